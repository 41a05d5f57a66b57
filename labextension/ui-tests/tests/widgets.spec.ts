/**
 * The notebook widgets in a real browser: the quickstart notebook (examples/quickstart.ipynb,
 * copied into the server's root by start_server.py) is opened in JupyterLab and run with
 * Run All; then what bqplot drew is checked against the REST API — the calendar's reservation
 * boxes, the overview's rows (one per GPU), the dashboard's charts — and a real mouse drag
 * (the calendar's brush) over a free slot opens the dialog, which books it. Screenshots of
 * each widget → ui-tests/artifacts/screenshots/1x-*.png.
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
  { token: TOKEN, title: 'ui seeded a', gpus: ['gpu1:0'], start: at(1, 14), end: at(1, 16) },
  { token: TOKEN, title: 'ui seeded b', gpus: ['gpu1:2'], start: at(2, 8), end: at(2, 9.5) },
  { token: BOB, title: 'bob seeded', gpus: ['gpu1:1'], start: at(1, 13), end: at(1, 17) },
  // Over midnight: one box on each day.
  { token: BOB, title: 'bob overnight', gpus: ['gpu1:3'], start: at(3, 20), end: at(4, 2) }
];
// The free slot the drag books: tomorrow 18:00-20:00 on gpu1:3 (column 1 * 4 + 3).
const DRAG = { gpu: 'gpu1:3', day: 1, from: 18, to: 20 };

/** The reservations the calendar shows (its 7-day window), and the boxes they make: one per GPU shown per day. */
async function expectedBoxes(request: APIRequestContext) {
  const window = `start=${encodeURIComponent(at(0, 0).toISOString())}&end=${encodeURIComponent(at(DAYS, 0).toISOString())}`;
  const found: Reservation[] = (await api(request, 'GET', `reservations?${window}&limit=10000`)).body.reservations;
  let all = 0;
  let mine = 0;
  for (const r of found) {
    if (r.status === 'cancelled') {
      continue;
    }
    const gpus = r.gpus.filter(g => CALENDAR_GPUS.includes(g)).length;
    let days = 0;
    for (let d = 0; d < DAYS; d++) {
      const a = Math.max(Date.parse(r.start), at(d, 0).getTime());
      const b = Math.min(Date.parse(r.end), at(d + 1, 0).getTime());
      days += a < b ? 1 : 0;
    }
    all += gpus * days;
    mine += r.owner === me ? gpus * days : 0;
  }
  return { all, mine, found };
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

test('the calendar draws one box per reservation, GPU and day', async ({ request }) => {
  await expect(calendarFigure()).toHaveCount(1);
  // Six marks of the calendar and two of the earliest-slot finder (highlights and their handles).
  await expect(calendarFigure().locator('svg.svg-figure g[clip-path]')).toHaveCount(8);
  const expected = await expectedBoxes(request);
  // The four seeded reservations make five boxes (one crosses midnight); runs of the other
  // specs on the same server (ended quick bookings) add theirs.
  expect(expected.all).toBeGreaterThanOrEqual(5);
  await expect.poll(async () => (await drawnBoxes()).count).toBe(expected.all);
  const { fills } = await drawnBoxes();
  expect(fills.filter(f => f === MINE_FILL)).toHaveLength(expected.mine);
  const drawnLabels = await labels();
  for (const label of [`${me}: ui seeded a`, `${me}: ui seeded b`, 'bob: bob seeded', 'bob: bob overnight']) {
    expect(drawnLabels.filter(l => l === label.slice(0, 18)).length, label).toBeGreaterThanOrEqual(1);
  }
  expect(drawnLabels.filter(l => l === 'bob: bob overnight')).toHaveLength(2);
  // Day labels on top, GPU labels below.
  const ticks = await calendarFigure().locator('g.axis g.tick text').allTextContents();
  expect(ticks).toContain(today.toLocaleDateString('en-GB', { weekday: 'short', day: '2-digit', month: 'short', timeZone: 'UTC' }).replace(',', ''));
  for (const gpu of CALENDAR_GPUS) {
    expect(ticks.filter(t => t === gpu)).toHaveLength(DAYS);
  }
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

test('dragging over a free slot opens the dialog and books it', async ({ request }) => {
  const before = (await drawnBoxes()).count;
  const area = calendarFigure().locator('rect.plotarea_events');
  await area.scrollIntoViewIfNeeded();
  const box = (await area.boundingBox())!;
  const columns = DAYS * CALENDAR_GPUS.length;
  const column = DRAG.day * CALENDAR_GPUS.length + CALENDAR_GPUS.indexOf(DRAG.gpu);
  const x = (c: number) => box.x + (c / columns) * box.width;
  // Hours from the time axis' own ticks (every 2 h), not from the plot area: the figure pads
  // the y range.
  const tickY = async (hour: number) => {
    const tick = calendarFigure().locator('g.axis', { hasText: 'time of day' }).locator('g.tick', { has: page.locator(`text:text-is("${hour}")`) });
    const line = (await tick.locator('line').boundingBox())!;
    return line.y + line.height / 2;
  };
  const [y0, y24] = [await tickY(0), await tickY(24)];
  const y = (h: number) => y0 + (h / 24) * (y24 - y0); // reversed scale: 0:00 on top
  await page.mouse.move(x(column + 0.25), y(DRAG.from));
  await page.mouse.down();
  await page.mouse.move(x(column + 0.5), y((DRAG.from + DRAG.to) / 2), { steps: 5 });
  await page.mouse.move(x(column + 0.75), y(DRAG.to), { steps: 5 });
  await page.mouse.up();
  await expect(calendarFigure().locator('.brushintsel rect.selection')).toBeVisible();

  const dialog = calendarOut().locator('.widget-vbox', { has: page.getByText('New reservation', { exact: true }) }).last();
  await expect(dialog).toBeVisible();
  const day = at(DRAG.day, 0).toISOString().slice(0, 10);
  const pad = (h: number) => String(h).padStart(2, '0');
  await expect(dialog.locator('.widget-datetimepicker', { hasText: 'Start' }).locator('input')).toHaveValue(
    new RegExp(`^${day}T${pad(DRAG.from)}:00`)
  );
  await expect(dialog.locator('.widget-datetimepicker', { hasText: 'End' }).locator('input')).toHaveValue(
    new RegExp(`^${day}T${pad(DRAG.to)}:00`)
  );
  const gpus = dialog.locator('.widget-select-multiple', { hasText: 'GPUs' }).locator('select');
  expect(await gpus.evaluate((s: HTMLSelectElement) => Array.from(s.selectedOptions).map(o => o.value))).toEqual([DRAG.gpu]);
  await dialog.locator('.widget-text', { hasText: 'Title' }).locator('input').fill('ui dragged');
  await shot(calendarOut(), '14-calendar-dialog.png');
  await dialog.getByRole('button', { name: 'Reserve' }).click();

  await expect(calendarOut()).toContainText(`Reserved ${DRAG.gpu} from`);
  await expect(dialog).toBeHidden();
  // The brush's rectangle goes once the dialog is done with it.
  await expect(calendarFigure().locator('.brushintsel rect.selection')).toBeHidden();
  await expect.poll(async () => (await drawnBoxes()).count).toBe(before + 1);
  expect(await labels()).toContain(`${me}: ui dragged`);
  const mine: Reservation[] = (await api(request, 'GET', `reservations?user=${me}&start=${encodeURIComponent(at(0, 0).toISOString())}`)).body
    .reservations;
  const made = mine.filter(r => r.title === 'ui dragged');
  expect(made).toHaveLength(1);
  expect(made[0].gpus).toEqual([DRAG.gpu]);
  expect(Date.parse(made[0].start)).toBe(at(DRAG.day, DRAG.from).getTime());
  expect(Date.parse(made[0].end)).toBe(at(DRAG.day, DRAG.to).getTime());
  expect((await expectedBoxes(request)).all).toBe(before + 1);
  await shot(calendarOut(), '15-calendar-booked.png');
});
