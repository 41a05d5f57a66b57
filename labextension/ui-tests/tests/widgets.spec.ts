/**
 * The notebook widgets in a real browser: the quickstart notebook (examples/quickstart.ipynb,
 * copied into the server's root by start_server.py) is opened in JupyterLab and run with
 * Run All; then what bqplot drew is checked against the REST API — the calendar's reservation
 * boxes (a lane per GPU, time left to right) and their labels, the overview's rows (one per GPU),
 * the dashboard's charts — and a real mouse drag (the calendar's brush) across two lanes of free
 * time opens the dialog, which books both GPUs. Screenshots of each widget →
 * ui-tests/artifacts/screenshots/1x-*.png.
 *
 * Browser and kernel both run in UTC (timezoneId here, TZ in start_server.py), so "tomorrow
 * 14:00" is the same instant for the test, the calendar and the dialog's pickers.
 */
import * as path from 'path';
import { APIRequestContext, Locator, Page, expect, test } from '@playwright/test';
import { BOB, TOKEN, api, drawnBoxes as boxesOf, drawnLabels, kernelReady, output as outputIn, runAll as runAllIn, watchErrors } from './helpers';
const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');
const CALENDAR_GPUS = ['gpu1:0', 'gpu1:1', 'gpu1:2', 'gpu1:3']; // the quickstart shows hosts[0]
const ALL_GPUS = [...CALENDAR_GPUS, 'gpu2:0', 'gpu2:1'];
const DAYS = 7;
const HOUR = 3600_000;
const MINE_FILL = 'rgb(230, 85, 13)'; // palette.MINE
const OTHERS_FILL = 'rgb(158, 202, 225)'; // palette.OTHERS, the overview's colour for everybody else
const DASHBOARD_CHARTS = [
  'GPU utilization (%)',
  'GPU memory (MiB)',
  'GPU temperature (°C)',
  'GPU power (W)',
  'Host CPU (%)'
]; // DashboardView's default order

test.describe.configure({ mode: 'serial' });
test.use({ timezoneId: 'UTC' });

type Reservation = { id: number; title: string; owner: string; gpus: string[]; start: string; end: string; status: string };

let page: Page;
let errors: string[] = [];
let me = '';
const today = new Date(Math.floor(Date.now() / (24 * HOUR)) * 24 * HOUR); // UTC midnight
const at = (day: number, hours: number) => new Date(today.getTime() + day * 24 * HOUR + hours * HOUR);
const SEEDED = [
  // A day and a half (after the quickstart's own booking, tomorrow 10:00-12:00): its label fits whole.
  { token: TOKEN, title: 'ui seeded a', gpus: ['gpu1:0'], start: at(2, 6), end: at(3, 18) },
  // 90 minutes: too narrow for a label (its box's tooltip has the title).
  { token: TOKEN, title: 'ui seeded b', gpus: ['gpu1:2'], start: at(2, 8), end: at(2, 9.5) },
  { token: BOB, title: 'bob seeded', gpus: ['gpu1:1'], start: at(1, 13), end: at(1, 17) },
  // Over midnight: one box across it; 12 hours, so its label is cut.
  { token: BOB, title: 'bob overnight', gpus: ['gpu1:3'], start: at(3, 20), end: at(4, 8) }
];
// The free time the drag books: tomorrow 18:00-20:00 on the lanes of gpu1:1 and gpu1:2.
const DRAG = { gpus: ['gpu1:1', 'gpu1:2'], day: 1, from: 18, to: 20 };

/** The reservations the calendar shows (its 7-day window), and the boxes they make: one per reservation and GPU shown. */
async function expectedBoxes(request: APIRequestContext) {
  const window = `start=${encodeURIComponent(at(0, 0).toISOString())}&end=${encodeURIComponent(at(DAYS, 0).toISOString())}`;
  const found: Reservation[] = (await api(request, 'GET', `reservations?${window}&limit=10000`)).body.reservations;
  let all = 0;
  let mine = 0;
  const labels: string[] = [];
  for (const r of found) {
    const shown = Date.parse(r.start) < at(DAYS, 0).getTime() && Date.parse(r.end) > at(0, 0).getTime();
    const gpus = r.gpus.filter(g => CALENDAR_GPUS.includes(g)).length;
    if (r.status === 'cancelled' || !shown || gpus === 0) {
      continue;
    }
    all += gpus;
    mine += r.owner === me ? gpus : 0;
    labels.push(`${r.owner}: ${r.title}`);
  }
  return { all, mine, found, labels };
}

type Rect = { text: string; left: number; right: number; top: number; bottom: number };

/** The calendar's drawn box outlines and box labels, as page rectangles. */
async function drawnRects(): Promise<{ boxes: Rect[]; labels: Rect[] }> {
  return calendarFigure().evaluate(f => {
    const rect = (e: Element) => {
      const r = e.getBoundingClientRect();
      return { text: e.textContent ?? '', left: r.left, right: r.right, top: r.top, bottom: r.bottom };
    };
    const marks = f.querySelectorAll('svg.svg-figure g[clip-path]');
    return {
      boxes: Array.from(marks[2].querySelectorAll('g.curve path.line')).map(rect),
      labels: Array.from(marks[3].querySelectorAll('text')).filter(t => (t.textContent ?? '') !== '').map(rect)
    };
  });
}

/** Page positions in the calendar: x of an hour (from the first day's midnight) from the time axis' first and last ticks, y of a GPU's lane middle from the lane axis. */
async function calendarPlaces() {
  const ticks = (hasText: string) =>
    calendarFigure()
      .locator('g.axis', { hasText })
      .locator('g.tick')
      .evaluateAll(ts =>
        ts.map(t => {
          const r = t.querySelector('line')!.getBoundingClientRect();
          return { text: t.textContent ?? '', x: r.left + r.width / 2, y: r.top + r.height / 2 };
        })
      );
  const hours = (await ticks('time of day')).sort((a, b) => a.x - b.x);
  const lanes = await ticks('gpu1:0');
  const [first, last] = [hours[0].x, hours[hours.length - 1].x];
  return {
    x: (hour: number) => first + (hour / (DAYS * 24)) * (last - first),
    y: (gpu: string) => lanes.find(l => l.text.split(' · ')[0] === gpu)!.y,
    lanes: lanes.map(l => l.text)
  };
}

const output = (source: string) => outputIn(page, source);
const calendarOut = () => output('cal = gpuhive.calendar(');
const calendarFigure = () => calendarOut().locator('.bqplot.figure');
const overviewOut = () => output('ov = gpuhive.overview(');
const dashboardOut = () => output('dash = gpuhive.dashboard(');

const drawnBoxes = () => boxesOf(calendarFigure());
const labels = () => drawnLabels(calendarFigure());
const runAll = () => runAllIn(page);

/** A picture of a widget's output; the window grows for it (the outputs are taller than 900 px). */
async function shot(what: Locator, name: string) {
  await page.setViewportSize({ width: 1280, height: 1600 });
  await what.screenshot({ path: path.join(SHOTS, name) });
  await page.setViewportSize({ width: 1280, height: 900 });
}

test.beforeAll(async ({ browser, request }) => {
  me = (await api(request, 'GET', 'me')).body.name;
  for (const s of SEEDED) {
    const made = await api(request, 'POST', 'reservations', s.token, {
      title: s.title,
      gpus: s.gpus,
      start: s.start.toISOString(),
      end: s.end.toISOString()
    });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
  }
  // The light theme, whatever an earlier spec chose (panel.spec.ts ends in the dark one): the
  // pictures compare across runs, and the calendar's box labels are dark text.
  const theme = await request.put('lab/api/settings/@jupyterlab/apputils-extension:themes', {
    headers: { Authorization: `token ${TOKEN}` },
    data: { raw: JSON.stringify({ theme: 'JupyterLab Light' }) }
  });
  expect(theme.status()).toBe(204);
  page = await browser.newPage();
  errors = watchErrors(page);
  // A workspace of its own: the default one may still hold the notebook panel.spec.ts opened,
  // and two notebooks would then answer every locator below.
  await page.goto(`/lab/workspaces/gpuhive-widgets/tree/quickstart.ipynb?token=${TOKEN}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
});

test.afterAll(async () => {
  expect(errors, 'page errors, or console errors of ours').toEqual([]);
  await page?.close();
});

test('the quickstart notebook runs to the end in JupyterLab', async ({ request }) => {
  await expect(page.locator('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status="idle"]')).toBeVisible({
    timeout: 60_000
  });
  await kernelReady(request, 'quickstart.ipynb');
  await expect(page.locator('.jp-Dialog')).toHaveCount(0);
  await runAll();
  // The last cell cancels the booking the notebook made from code.
  const last = output('m.end_or_cancel()');
  await expect(last).toContainText(/Reservation \d+ cancelled\./, { timeout: 60_000 });
  await expect(output('m.submit()')).toContainText('Reserved gpu1:0, gpu1:1 from');
  await expect(output('hive.me()')).toContainText(`I am ${me}; 6 GPUs on 2 hosts`);
  // No cell failed.
  await expect(page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')).toHaveCount(0);
  await expect(page.locator('.jp-OutputArea-output', { hasText: /Traceback|Error/ })).toHaveCount(0);
});

test('the calendar draws one box per reservation and GPU, labelled within it', async ({ request }) => {
  await expect(calendarFigure()).toHaveCount(1);
  // Six marks of the calendar and two of the earliest-slot finder (highlights and their handles).
  await expect(calendarFigure().locator('svg.svg-figure g[clip-path]')).toHaveCount(8);
  const expected = await expectedBoxes(request);
  // The four seeded reservations make four boxes (the one over midnight is one box); runs of
  // the other specs on the same server (ended quick bookings) add theirs.
  expect(expected.all).toBeGreaterThanOrEqual(4);
  await expect.poll(async () => (await drawnBoxes()).count).toBe(expected.all);
  const { fills } = await drawnBoxes();
  expect(fills.filter(f => f === MINE_FILL)).toHaveLength(expected.mine);
  // Each drawn label is a booking's label, whole or cut to its box with an ellipsis; the long
  // booking's is whole, the 12-hour one over midnight is cut, the 90-minute one has none.
  const drawnLabels = await labels();
  const cutOf = (l: string) => (l.endsWith('…') ? l.slice(0, -1).trimEnd() : null);
  for (const l of drawnLabels) {
    const cut = cutOf(l);
    const whole = (e: string) => e === l || l.startsWith(`${e} · `); // a lent booking says so after its title
    const cutFrom = (e: string) => cut !== null && ((e.startsWith(cut) && e.length > cut.length) || cut.startsWith(`${e} · `));
    expect(expected.labels.some(e => whole(e) || cutFrom(e)), l).toBe(true);
  }
  expect(drawnLabels.filter(l => l === `${me}: ui seeded a`)).toHaveLength(1);
  expect(drawnLabels.some(l => cutOf(l) !== null && 'bob: bob overnight'.startsWith(cutOf(l)!))).toBe(true);
  expect(drawnLabels.filter(l => l.includes('ui seeded b'))).toEqual([]);
  // Every label lies inside a box of its own lane (1 px for anti-aliasing).
  const rects = await drawnRects();
  for (const l of rects.labels) {
    const inside = rects.boxes.some(b => b.left - 1 <= l.left && l.right <= b.right + 1 && b.top - 1 <= l.top && l.bottom <= b.bottom + 1);
    expect(inside, `label ${l.text} inside its box`).toBe(true);
  }
  // Days on top; one lane per GPU, named on the lane axis (a failed GPU's lane says so).
  const days = await calendarFigure().locator('g.axis').first().locator('g.tick text').allTextContents();
  expect(days).toContain(today.toLocaleDateString('en-GB', { weekday: 'short', day: '2-digit', month: 'short', timeZone: 'UTC' }).replace(',', ''));
  expect(days).toHaveLength(DAYS);
  expect((await calendarPlaces()).lanes.map(l => l.split(' · ')[0])).toEqual(CALENDAR_GPUS);
  await shot(calendarOut(), '11-calendar.png');
});

test('the overview has a row per GPU with the bookings coloured', async () => {
  const figure = overviewOut().locator('.bqplot.figure');
  await expect(figure).toHaveCount(1);
  const rows = figure.locator('g.heatmaprow');
  await expect(rows).toHaveCount(ALL_GPUS.length);
  const cells = await rows.evaluateAll(rs => rs.map(r => r.querySelectorAll('rect.heatmapcell').length));
  expect(new Set(cells).size).toBe(1);
  expect(cells[0]).toBeGreaterThanOrEqual(30 * 24);
  const yTicks = await figure.locator('g.axis g.tick text').allTextContents();
  for (const gpu of ALL_GPUS) {
    expect(yTicks).toContain(gpu);
  }
  // Mine (orange) where I booked gpu1:2, bob's pastel and none of mine on gpu1:3. (gpu1:0 and
  // gpu1:1 also show the quickstart's own booking: the overview is drawn before the last cell
  // cancels it and does not refresh by itself.)
  const cellsOf = async (gpu: string, fill: string) =>
    rows
      .nth(ALL_GPUS.indexOf(gpu))
      .evaluate((r, f) => Array.from(r.querySelectorAll('rect.heatmapcell')).filter(c => getComputedStyle(c).fill === f).length, fill);
  expect(await cellsOf('gpu1:2', MINE_FILL)).toBeGreaterThanOrEqual(1);
  expect(await cellsOf('gpu1:3', MINE_FILL)).toBe(0);
  expect(await cellsOf('gpu1:3', OTHERS_FILL)).toBeGreaterThanOrEqual(1);
  await shot(overviewOut(), '12-overview.png');
});

test('the dashboard renders its charts and the process table', async () => {
  const figures = dashboardOut().locator('.bqplot.figure');
  await expect(figures).toHaveCount(DASHBOARD_CHARTS.length);
  expect(await figures.locator('text.mainheading').allTextContents()).toEqual(DASHBOARD_CHARTS);
  // The quickstart's dashboard follows gpu1: a line per GPU in each GPU chart (the stand-in's
  // metrics), one for the host in the CPU chart.
  for (const title of DASHBOARD_CHARTS.filter(t => t.startsWith('GPU'))) {
    const chart = figures.nth(DASHBOARD_CHARTS.indexOf(title));
    await expect(chart.locator('g.curve path.line'), title).toHaveCount(CALENDAR_GPUS.length);
    for (const gpu of CALENDAR_GPUS) {
      await expect(chart.locator('.g_legend'), title).toContainText(gpu);
    }
  }
  const cpu = figures.nth(DASHBOARD_CHARTS.indexOf('Host CPU (%)'));
  await expect(cpu.locator('g.curve path.line')).toHaveCount(1);
  await expect(cpu.locator('.g_legend')).toContainText('gpu1');
  await expect(dashboardOut()).toContainText('GPU processes');
  await expect(dashboardOut()).toContainText('No GPU processes.');
  // Clock time on every time axis, not milliseconds of 1970.
  for (const title of DASHBOARD_CHARTS) {
    const ticks = await figures.nth(DASHBOARD_CHARTS.indexOf(title)).locator('g.axis').first().locator('g.tick text').allTextContents();
    expect(ticks.length, title).toBeGreaterThan(0);
    expect(ticks.filter(t => !/^\d\d:\d\d:\d\d$/.test(t)), `${title}: ${ticks}`).toEqual([]);
  }
  await shot(dashboardOut(), '13-dashboard.png');
});

test('dragging across two lanes of free time opens the dialog and books both GPUs', async ({ request }) => {
  const before = (await drawnBoxes()).count;
  await calendarFigure().locator('rect.plotarea_events').scrollIntoViewIfNeeded();
  const { x, y } = await calendarPlaces();
  const [from, to] = [DRAG.day * 24 + DRAG.from, DRAG.day * 24 + DRAG.to];
  // From inside the first lane to inside the second: the lanes covered are the GPUs.
  await page.mouse.move(x(from), y(DRAG.gpus[0]) - 4);
  await page.mouse.down();
  await page.mouse.move(x((from + to) / 2), y(DRAG.gpus[1]), { steps: 5 });
  await page.mouse.move(x(to), y(DRAG.gpus[1]) + 4, { steps: 5 });
  await page.mouse.up();
  await expect(calendarFigure().locator('.brushintsel rect.selection')).toBeVisible();

  const dialog = calendarOut().locator('.widget-vbox', { has: page.getByText('New reservation', { exact: true }) }).last();
  await expect(dialog).toBeVisible();
  // The times are the drag's left and right edges, snapped to 15 minutes: a pixel is about 14
  // minutes at this width, so the snap may land one step off the hour.
  const picked = async (label: string) =>
    Date.parse(`${await dialog.locator('.widget-datetimepicker', { hasText: label }).locator('input').inputValue()}Z`);
  const [start, end] = [await picked('Start'), await picked('End')];
  expect(Math.abs(start - at(DRAG.day, DRAG.from).getTime())).toBeLessThanOrEqual(15 * 60_000);
  expect(Math.abs(end - at(DRAG.day, DRAG.to).getTime())).toBeLessThanOrEqual(15 * 60_000);
  const gpus = dialog.locator('.widget-select-multiple', { hasText: 'GPUs' }).locator('select');
  expect(await gpus.evaluate((s: HTMLSelectElement) => Array.from(s.selectedOptions).map(o => o.value))).toEqual(DRAG.gpus);
  await dialog.locator('.widget-text', { hasText: 'Title' }).locator('input').fill('ui dragged');
  await shot(calendarOut(), '14-calendar-dialog.png');
  await dialog.getByRole('button', { name: 'Reserve' }).click();

  await expect(calendarOut()).toContainText(`Reserved ${DRAG.gpus.join(', ')} from`);
  await expect(dialog).toBeHidden();
  // The brush's rectangle goes once the dialog is done with it.
  await expect(calendarFigure().locator('.brushintsel rect.selection')).toBeHidden();
  await expect.poll(async () => (await drawnBoxes()).count).toBe(before + DRAG.gpus.length);
  // Two hours are too narrow for a label: hovering the new box (in "Pick a box") shows its title.
  await calendarOut().getByRole('button', { name: 'Pick a box' }).click();
  await page.mouse.move(x(from + 0.5), y(DRAG.gpus[0]), { steps: 3 });
  await expect(page.locator('.bqplot_mark_tooltip:visible')).toContainText(`${me}: ui dragged`);
  await page.mouse.move(0, 0);
  await calendarOut().getByRole('button', { name: 'Select time' }).click();
  const mine: Reservation[] = (await api(request, 'GET', `reservations?user=${me}&start=${encodeURIComponent(at(0, 0).toISOString())}`)).body
    .reservations;
  const made = mine.filter(r => r.title === 'ui dragged');
  expect(made).toHaveLength(1);
  expect(made[0].gpus).toEqual(DRAG.gpus);
  expect(Date.parse(made[0].start)).toBe(start);
  expect(Date.parse(made[0].end)).toBe(end);
  expect((await expectedBoxes(request)).all).toBe(before + DRAG.gpus.length);
  await shot(calendarOut(), '15-calendar-booked.png');
});
