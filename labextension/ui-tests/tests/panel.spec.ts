/**
 * The GPU hive panel against a real server: opens, shows the right GPUs, a quick
 * reservation appears in the list and via the REST API, cancelling removes it, and a
 * conflicting reservation shows the server's message. Screenshots → ui-tests/artifacts/.
 */
import * as path from 'path';
import { Page, expect, test } from '@playwright/test';
import { BOB, TOKEN, api, watchErrors } from './helpers';
const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');
const EXPECTED_GPUS = ['gpu1:0', 'gpu1:1', 'gpu1:2', 'gpu1:3', 'gpu2:0', 'gpu2:1'];

test.describe.configure({ mode: 'serial' });

let page: Page;
let errors: string[] = [];

const panel = () => page.locator('#jupyter-gpuhive-panel');
const gpuRow = (id: string) => panel().locator(`li.jp-gpuhive-gpu[data-gpu="${id}"]`);
const reservations = () => panel().locator('li.jp-gpuhive-reservation');

test.beforeAll(async ({ browser }) => {
  page = await browser.newPage();
  errors = watchErrors(page);
  await page.goto(`/lab?token=${TOKEN}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
});

test.afterAll(async () => {
  expect(errors, 'page errors, or console errors of ours').toEqual([]);
  await page?.close();
});

test('the panel opens from its sidebar icon and shows the right GPUs', async ({ request }) => {
  const tab = page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-gpuhive-panel"]');
  await expect(tab).toBeVisible();
  await tab.click();
  await expect(panel()).toBeVisible();
  await expect(panel().locator('li.jp-gpuhive-gpu')).toHaveCount(EXPECTED_GPUS.length);
  const ids = await panel().locator('li.jp-gpuhive-gpu').evaluateAll(rows => rows.map(r => r.getAttribute('data-gpu')));
  expect(ids).toEqual(EXPECTED_GPUS);
  await expect(panel().locator('.jp-gpuhive-host')).toHaveCount(2);
  await expect(panel().locator('.jp-gpuhive-note')).toHaveText('UI tests: gpu1 and gpu2 are simulated hosts on this machine.');
  await expect(panel().locator('.jp-gpuhive-section-setup')).toBeHidden();
  await expect(gpuRow('gpu1:0')).toHaveAttribute('data-state', 'free');
  await expect(panel().getByText('No current or upcoming reservations')).toBeVisible();
  // The jobs section shows when the server has the jobs API, and hides (404) when not.
  const jobsApi = (await request.get(`gpuhive/api/jobs?token=${TOKEN}`)).status();
  const jobs = panel().locator('.jp-gpuhive-section-jobs');
  await (jobsApi === 404 ? expect(jobs).toBeHidden() : expect(jobs).toBeVisible());
  await page.screenshot({ path: path.join(SHOTS, '01-panel.png') });
});

test('a quick reservation appears in the list and via the REST API', async ({ request }) => {
  await gpuRow('gpu1:0').getByRole('checkbox').check();
  await gpuRow('gpu1:1').getByRole('checkbox').check();
  await expect(panel().locator('.jp-gpuhive-selected')).toHaveText('Selected: gpu1:0, gpu1:1');
  await panel().getByLabel('Reservation length').selectOption('1h');
  await panel().getByLabel('Reservation title').fill('ui quick');
  await panel().getByRole('button', { name: 'Reserve the selected GPUs now' }).click();

  await expect(reservations()).toHaveCount(1);
  await expect(reservations().first()).toContainText('ui quick');
  await expect(reservations().first()).toContainText('gpu1:0, gpu1:1');
  await expect(reservations().first().locator('.jp-gpuhive-countdown')).toContainText(/ends in (59m|1h)/);
  await expect(gpuRow('gpu1:0')).toHaveAttribute('data-state', 'mine');
  await expect(panel().locator('.jp-gpuhive-error')).toHaveText('');

  const me = (await api(request, 'GET', 'me')).body.name;
  const listed = (await api(request, 'GET', `reservations?user=${me}`)).body.reservations;
  expect(listed.map((r: { title: string }) => r.title)).toEqual(['ui quick']);
  expect(listed[0].gpus).toEqual(['gpu1:0', 'gpu1:1']);
  await page.screenshot({ path: path.join(SHOTS, '02-reserved.png') });
});

test('ending the reservation early removes it', async ({ request }) => {
  await reservations().first().getByRole('button', { name: /End now: reservation 'ui quick'/ }).click();
  await expect(reservations()).toHaveCount(0);
  await expect(panel().getByText('No current or upcoming reservations')).toBeVisible();
  await expect(gpuRow('gpu1:0')).toHaveAttribute('data-state', 'free');
  const me = (await api(request, 'GET', 'me')).body.name;
  expect((await api(request, 'GET', `reservations?user=${me}`)).body.reservations).toEqual([]);
  await page.screenshot({ path: path.join(SHOTS, '03-ended.png') });
});

test("a conflicting reservation shows the server's message", async ({ request }) => {
  const made = await api(request, 'POST', 'reservations', BOB, { title: 'bob run', gpus: ['gpu2:0'], duration: '2h' });
  expect(made.status).toBe(201);
  await panel().getByRole('button', { name: 'Refresh now' }).click();
  await expect(gpuRow('gpu2:0')).toHaveAttribute('data-state', 'reserved');
  await expect(gpuRow('gpu2:0')).toContainText('bob until');

  await gpuRow('gpu2:0').getByRole('checkbox').check();
  await panel().getByRole('button', { name: 'Reserve the selected GPUs now' }).click();
  const error = panel().locator('.jp-gpuhive-error');
  await expect(error).toContainText('Those GPUs are not free for that time');
  await expect(error).toContainText("gpu2:0 is reserved by bob ('bob run'");
  await expect(error).toHaveAttribute('role', 'alert');
  await expect(reservations()).toHaveCount(0);
  await page.screenshot({ path: path.join(SHOTS, '04-conflict.png') });
});

test('a notebook shortcut opens a new notebook with the widget cell', async () => {
  await panel().getByRole('button', { name: 'Insert a calendar cell into the notebook' }).click();
  const cell = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell .jp-InputArea-editor').first();
  await expect(cell).toContainText('widgets.calendar()', { timeout: 60_000 });
  await expect(cell).toContainText('from jupyter_gpuhive import widgets');
  await page.screenshot({ path: path.join(SHOTS, '05-notebook-cell.png') });
});

test('the panel follows the dark theme', async () => {
  await page.locator('#jp-MainMenu .lm-MenuBar-itemLabel', { hasText: /^Settings$/ }).click();
  await page.locator('.lm-Menu-itemLabel', { hasText: /^Theme$/ }).click();
  await page.locator('.lm-Menu-itemLabel', { hasText: /^JupyterLab Dark$/ }).click();
  await expect(page.locator('body')).toHaveAttribute('data-jp-theme-light', 'false');
  await expect
    .poll(async () => {
      const [r, g, b] = (await panel().evaluate(n => getComputedStyle(n).backgroundColor)).match(/\d+/g)!.map(Number);
      return r + g + b;
    })
    .toBeLessThan(200);
  await page.screenshot({ path: path.join(SHOTS, '06-dark.png') });
});
