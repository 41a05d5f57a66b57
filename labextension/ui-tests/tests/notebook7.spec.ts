/**
 * The notebook widgets in Notebook 7 (the `notebook` package's own UI, not JupyterLab): a
 * copy of the quickstart notebook (quickstart-nb7.ipynb, copied by start_server.py) is opened
 * at /notebooks/… and run; the calendar draws the same boxes the REST API says it should,
 * and the overview and dashboard render. Screenshot → ui-tests/artifacts/screenshots/21-*.png.
 */
import * as path from 'path';
import { Page, expect, test } from '@playwright/test';
import { TOKEN, api, drawnBoxes, kernelReady, output, runAll, watchErrors } from './helpers';

const NOTEBOOK = 'quickstart-nb7.ipynb';
const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');
const GPUS = ['gpu1:0', 'gpu1:1', 'gpu1:2', 'gpu1:3']; // the quickstart's calendar shows hosts[0]
const DAY = 24 * 3600_000;

test.describe.configure({ mode: 'serial' });
test.use({ timezoneId: 'UTC' });

let page: Page;
let errors: string[] = [];

let seeded = 0;

test.beforeAll(async ({ browser, request }) => {
  const at = Math.floor(Date.now() / DAY) * DAY + 2 * DAY + 10 * 3600_000; // the day after tomorrow, 10:00
  const made = await api(request, 'POST', 'reservations', TOKEN, {
    title: 'nb7 seeded',
    gpus: ['gpu1:2'],
    start: new Date(at).toISOString(),
    end: new Date(at + 3600_000).toISOString()
  });
  expect(made.status, JSON.stringify(made.body)).toBe(201);
  seeded = made.body.id;
  page = await browser.newPage();
  errors = watchErrors(page);
  await page.goto(`/notebooks/${NOTEBOOK}?token=${TOKEN}`);
  await expect(page.locator('.jp-NotebookPanel .jp-CodeCell').first()).toBeVisible({ timeout: 90_000 });
});

test.afterAll(async ({ request }) => {
  await page?.close();
  if (seeded) {
    expect((await api(request, 'DELETE', `reservations/${seeded}`)).status).toBeLessThan(300);
  }
});

test('the quickstart runs in Notebook 7 and its widgets render', async ({ request }) => {
  // Notebook 7's own single-document app (it marks its body), not JupyterLab's shell.
  await expect(page.locator('body')).toHaveAttribute('data-notebook', 'notebooks');
  await expect(page.locator('#jp-main-dock-panel')).toHaveCount(0);
  await kernelReady(request, NOTEBOOK);
  await runAll(page);
  await expect(output(page, 'm.end_or_cancel()')).toContainText(/Reservation \d+ cancelled\./, { timeout: 60_000 });
  await expect(page.locator('.jp-OutputArea-output', { hasText: /Traceback|Error/ })).toHaveCount(0);

  // The calendar: one box per reservation × shown GPU (a lane per GPU), as the API has them.
  const figure = output(page, 'cal = gpuhive.calendar(').locator('.bqplot.figure');
  await expect(figure).toHaveCount(1);
  const today = Math.floor(Date.now() / DAY) * DAY;
  const window = `start=${encodeURIComponent(new Date(today).toISOString())}&end=${encodeURIComponent(new Date(today + 7 * DAY).toISOString())}`;
  const found = (await api(request, 'GET', `reservations?${window}&limit=10000`)).body.reservations as {
    gpus: string[];
    start: string;
    end: string;
    status: string;
  }[];
  let expected = 0;
  for (const r of found.filter(r => r.status !== 'cancelled')) {
    const overlaps = Date.parse(r.start) < today + 7 * DAY && Date.parse(r.end) > today;
    expected += overlaps ? r.gpus.filter(g => GPUS.includes(g)).length : 0;
  }
  expect(expected).toBeGreaterThan(0); // the one seeded, at least
  await expect.poll(async () => (await drawnBoxes(figure)).count).toBe(expected);
  // A lane per GPU, named on the lane axis (a GPU that cannot be booked says why after its name).
  const lanes = await figure.locator('g.axis', { hasText: 'gpu1:0' }).locator('g.tick text').allTextContents();
  expect(lanes.map(l => l.split(' · ')[0])).toEqual(GPUS);

  // Overview rows and dashboard charts.
  await expect(output(page, 'ov = gpuhive.overview(').locator('.bqplot.figure g.heatmaprow')).toHaveCount(6);
  await expect(output(page, 'dash = gpuhive.dashboard(').locator('.bqplot.figure')).toHaveCount(5);
  await page.setViewportSize({ width: 1280, height: 1600 });
  await output(page, 'cal = gpuhive.calendar(').screenshot({ path: path.join(SHOTS, '21-notebook7-calendar.png') });
  expect(errors).toEqual([]);
});
