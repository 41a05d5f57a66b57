/**
 * The calendar widget at real size (issue #48): a crowded week on 64 declared GPUs
 * (calendar_hive.py, started and stopped here), drawn by a Lab kernel at the demo's size (12 GPUs,
 * 3 hosts) and at 64 GPUs. In the DOM: GPU names on the lane axis, lanes at least 24 px, no two
 * box labels overlap (getBoundingClientRect), the drained GPU's lane says so, and the Host
 * dropdown shows one host. Hovering a cut label shows the box's whole title. Screenshots →
 * artifacts/screenshots/
 * 18-calendar-12.png, 19-calendar-64.png.
 */
import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { Locator, Page, expect, test } from '@playwright/test';
import { TOKEN, drawnLabels, kernelReady, output, runAll, watchErrors } from './helpers';

const PYTHON = process.env.PYTHON ?? path.resolve(__dirname, '../../../.venv/bin/python');
const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');
const INFO = path.resolve(__dirname, '..', 'artifacts', 'calendar-hive.json');
const NOTEBOOK = 'calendar-size.ipynb';
const TWELVE = [1, 2, 3].flatMap(h => [0, 1, 2, 3].map(i => `gpu0${h}:${i}`));

test.describe.configure({ mode: 'serial' });
test.use({ timezoneId: 'UTC' });

let hive: ChildProcess | null = null;
let hiveUrl = '';
let hiveToken = '';
let page: Page;
let errors: string[] = [];

const cell = (source: string) => ({ cell_type: 'code', metadata: {}, outputs: [], execution_count: null, source });

type Rect = { text: string; left: number; right: number; top: number; bottom: number };

/** The box labels' drawn rectangles (the figure's fourth mark), and the lane axis' tick texts. */
async function drawn(figure: Locator): Promise<{ labels: Rect[]; lanes: Rect[] }> {
  return figure.evaluate(f => {
    const rect = (t: Element) => {
      const r = t.getBoundingClientRect();
      return { text: t.textContent ?? '', left: r.left, right: r.right, top: r.top, bottom: r.bottom };
    };
    const marks = f.querySelectorAll('svg.svg-figure g[clip-path]');
    const labels = Array.from(marks[3]?.querySelectorAll('text') ?? []).filter(t => (t.textContent ?? '') !== '');
    const axes = Array.from(f.querySelectorAll('g.axis'));
    const lanes = axes.find(a => (a.textContent ?? '').includes('gpu0')) as Element;
    return { labels: labels.map(rect), lanes: Array.from(lanes.querySelectorAll('g.tick text')).map(rect) };
  });
}

function overlaps(rects: Rect[]): string[] {
  const found: string[] = [];
  for (let i = 0; i < rects.length; i++) {
    for (let j = i + 1; j < rects.length; j++) {
      const [a, b] = [rects[i], rects[j]];
      if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) {
        found.push(`${a.text} / ${b.text}`);
      }
    }
  }
  return found;
}

async function check(figure: Locator, gpus: string[], shot: string, box: Locator) {
  await expect.poll(async () => (await drawnLabels(figure)).length).toBeGreaterThan(gpus.length);
  const { labels, lanes } = await drawn(figure);
  expect(lanes.map(l => l.text)).toEqual(gpus.map(g => (g === 'gpu03:1' ? 'gpu03:1 · drained' : g)));
  const heights = lanes.slice(1).map((l, i) => l.top - lanes[i].top);
  expect(Math.min(...heights)).toBeGreaterThanOrEqual(23.5); // LANE_PX
  expect(overlaps(labels), 'box labels drawn over each other').toEqual([]);
  expect(overlaps(lanes), 'lane names drawn over each other').toEqual([]);
  // A cut label ends in an ellipsis; the whole one is a box's tooltip.
  expect(labels.some(l => l.text.endsWith('…'))).toBe(true);
  await page.setViewportSize({ width: 1280, height: 1100 });
  await box.screenshot({ path: path.join(SHOTS, shot) });
}

test.beforeAll(async ({ browser, request }) => {
  test.setTimeout(240_000);
  fs.rmSync(INFO, { force: true });
  hive = spawn(PYTHON, [path.resolve(__dirname, '..', 'calendar_hive.py'), INFO], { stdio: 'inherit' });
  await expect.poll(() => fs.existsSync(INFO), { timeout: 180_000, intervals: [1000] }).toBe(true);
  const { url, token } = JSON.parse(fs.readFileSync(INFO, 'utf8'));
  [hiveUrl, hiveToken] = [url, token];
  const client = `from jupyter_gpuhive import widgets\nfrom jupyter_gpuhive.notebook.client import HiveClient\nclient = HiveClient(${JSON.stringify(url)}, ${JSON.stringify(token)})`;
  const notebook = {
    nbformat: 4,
    nbformat_minor: 5,
    metadata: { kernelspec: { name: 'python3', display_name: 'Python 3', language: 'python' } },
    cells: [
      cell(client),
      cell(`cal12 = widgets.calendar(client, gpus=${JSON.stringify(TWELVE)}, zone="UTC")\ncal12`),
      cell('cal64 = widgets.calendar(client, zone="UTC")\ncal64')
    ]
  };
  const put = await request.put(`api/contents/${NOTEBOOK}`, {
    headers: { Authorization: `token ${TOKEN}` },
    data: { type: 'notebook', format: 'json', content: notebook }
  });
  expect(put.status()).toBeLessThan(300);
  page = await browser.newPage();
  errors = watchErrors(page);
  await page.goto(`/lab/workspaces/gpuhive-calendar/tree/${NOTEBOOK}?token=${TOKEN}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
  await kernelReady(request, NOTEBOOK);
  await runAll(page);
});

test.afterAll(async () => {
  expect(errors, 'page errors, or console errors of ours').toEqual([]);
  await page?.close();
  hive?.kill('SIGTERM');
});

test('at the demo size (12 GPUs) every lane is named and no label overprints another', async () => {
  const out = output(page, 'cal12 = widgets.calendar(');
  await expect(out.locator('.bqplot.figure')).toHaveCount(1, { timeout: 60_000 });
  await check(out.locator('.bqplot.figure'), TWELVE, '18-calendar-12.png', out);
});

test('at 64 GPUs the lanes keep their height, the figure scrolls, labels stay apart', async () => {
  const out = output(page, 'cal64 = widgets.calendar(');
  const figure = out.locator('.bqplot.figure');
  await expect(figure).toHaveCount(1, { timeout: 60_000 });
  const all = Array.from({ length: 16 }, (_, h) => [0, 1, 2, 3].map(i => `gpu${String(h + 1).padStart(2, '0')}:${i}`)).flat();
  await check(figure, all, '19-calendar-64.png', out);
  const scroller = await figure.evaluate(f => {
    const box = f.parentElement!.closest('.widget-box') as HTMLElement;
    return { scroll: box.scrollHeight, client: box.clientHeight, overflow: getComputedStyle(box).overflowY };
  });
  expect(scroller.overflow).toBe('auto');
  expect(scroller.scroll).toBeGreaterThan(scroller.client); // 64 lanes do not fit: it scrolls
});

test('hovering a box where its label is cut shows the whole title', async ({ request }) => {
  const out = output(page, 'cal12 = widgets.calendar(');
  const figure = out.locator('.bqplot.figure');
  // "Pick a box": in "Select time" the brush lies over the marks and takes the mouse.
  await out.getByRole('button', { name: 'Pick a box' }).click();
  await figure.scrollIntoViewIfNeeded();
  const cut = (await drawn(figure)).labels.find(l => l.text.endsWith('…'))!;
  expect(cut, 'a label cut to its box').toBeDefined();
  // On the label's first letters: the label lies over its box (and away from the box's handle).
  await page.mouse.move(cut.left + 3, (cut.top + cut.bottom) / 2, { steps: 3 });
  const tip = page.locator('.bqplot_mark_tooltip:visible');
  await expect(tip).toHaveCount(1);
  const shown = (await tip.innerText()).replace(/^reservation\s*/, '').trim();
  // The tooltip is one booking's whole label (owner: title), of which the drawn one is the cut.
  const answer = await request.get(`${hiveUrl}gpuhive/api/reservations?limit=10000`, { headers: { Authorization: `token ${hiveToken}` } });
  const whole = new Set(((await answer.json()).reservations as { owner: string; title: string }[]).map(r => `${r.owner}: ${r.title}`));
  expect(whole).toContain(shown);
  expect(shown.startsWith(cut.text.slice(0, -1).trimEnd())).toBe(true);
  expect(shown.length).toBeGreaterThan(cut.text.length - 1);
  await page.mouse.move(0, 0);
  await out.getByRole('button', { name: 'Select time' }).click();
});

test('the Host dropdown shows one host, its drained GPU still marked', async () => {
  const out = output(page, 'cal12 = widgets.calendar(');
  const figure = out.locator('.bqplot.figure');
  const host = out.locator('.widget-dropdown', { hasText: 'Host' }).locator('select');
  await host.selectOption('gpu03');
  await expect.poll(async () => (await drawn(figure)).lanes.map(l => l.text)).toEqual(['gpu03:0', 'gpu03:1 · drained', 'gpu03:2', 'gpu03:3']);
  expect(overlaps((await drawn(figure)).labels)).toEqual([]);
});
