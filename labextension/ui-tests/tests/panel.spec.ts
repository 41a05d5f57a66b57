/**
 * The GPU hive panel against a real server: opens, shows the right GPUs, a quick
 * reservation appears in the list and via the REST API, cancelling removes it, and a
 * conflicting reservation shows the server's message; the calendar feed is made and rotated,
 * and a GPU notification is made, fires, is booked and cancelled. Screenshots →
 * ui-tests/artifacts/.
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

const feed = () => panel().locator('.jp-gpuhive-section-feed');
const notify = () => panel().locator('.jp-gpuhive-section-notify');
const notices = () => notify().locator('li.jp-gpuhive-subscription');

/** Make or rotate my feed from the sidebar (confirming when one exists); the URL it shows. */
async function newFeedUrl(): Promise<string> {
  const link = feed().locator('.jp-gpuhive-feed-link');
  const old = (await link.count()) ? await link.textContent() : '';
  const make = feed().getByRole('button', { name: 'Make a new calendar feed URL' });
  const existed = (await make.textContent()) === 'New feed URL';
  await make.click();
  if (existed) {
    await page.locator('.jp-Dialog').getByRole('button', { name: 'New URL' }).click();
  }
  await expect(link).toHaveText(/\/gpuhive\/api\/calendar\/.+\.ics$/);
  await expect(link).not.toHaveText(old ?? '');
  return (await link.textContent())!;
}

test('the calendar feed is made and rotated from the sidebar; the old URL then answers 404', async ({ request }) => {
  await feed().scrollIntoViewIfNeeded();
  const first = await newFeedUrl();
  const got = await request.get(first); // the URL alone opens it: no Jupyter token
  expect(got.status()).toBe(200);
  expect(await got.text()).toContain('BEGIN:VCALENDAR');
  await feed().getByRole('button', { name: 'Copy the calendar feed URL' }).click();
  await expect(feed().locator('.jp-gpuhive-copy')).toHaveText('Copied');

  const second = await newFeedUrl(); // a feed exists now: rotating asks first
  expect(second).not.toBe(first);
  expect((await request.get(first)).status()).toBe(404);
  expect((await request.get(second)).status()).toBe(200);
  await expect(feed().locator('.jp-gpuhive-feed-status')).toContainText(`URL ending …${second.slice(-8, -4)}.ics`);
  const status = (await api(request, 'GET', 'feeds')).body;
  expect(status.personal.token_hint).toBe(`…${second.slice(-8, -4)}`);
  await feed().screenshot({ path: path.join(SHOTS, '07-calendar-feed.png') });
});

test('a GPU notification is made from the sidebar, fires when the GPUs free up, and is booked', async ({ request }) => {
  // bob holds gpu2:0 (the test above): the 2 GPUs of gpu2 are not free now
  await notify().scrollIntoViewIfNeeded();
  await notify().getByLabel('How many GPUs').fill('2');
  await notify().getByLabel('On which host').selectOption('gpu2');
  await notify().getByLabel('For how many hours').fill('1');
  await notify().getByRole('button', { name: 'Notify me when these GPUs are free' }).click();
  await expect(notices()).toHaveCount(1);
  await expect(notices().first()).toContainText('2 GPUs on gpu2 for 1h, free now · watching until');
  const made = (await api(request, 'GET', 'subscriptions')).body.subscriptions;
  expect(made.map((s: Record<string, unknown>) => [s.gpus, s.host, s.duration_s, s.active, s.starts_now])).toEqual([[2, 'gpu2', 3600, true, true]]);
  await notify().screenshot({ path: path.join(SHOTS, '08-notify.png') });

  // bob ends his booking: the GPUs are free now, the notification fires with a "Book it"
  const bobs = (await api(request, 'GET', 'reservations?user=bob', BOB)).body.reservations;
  for (const r of bobs) {
    expect((await api(request, 'DELETE', `reservations/${r.id}`, BOB)).status).toBe(200);
  }
  await expect(async () => {
    await panel().getByRole('button', { name: 'Refresh now' }).click();
    await expect(notices().first().locator('.jp-gpuhive-sub-offer')).toContainText('Free: gpu2:0, gpu2:1', { timeout: 1000 });
  }).toPass({ timeout: 30_000 });
  await notices().first().getByRole('button', { name: /^Book it/ }).click();
  await expect(reservations()).toHaveCount(1);
  await expect(reservations().first()).toContainText('GPUs from subscription');
  await expect(reservations().first()).toContainText('gpu2:0, gpu2:1');
  await expect(notices()).toHaveCount(0); // booked: nothing left to offer
  await reservations().first().getByRole('button', { name: /^End now/ }).click();
  await expect(reservations()).toHaveCount(0);
});

test('a GPU notification with "before" is listed and cancelled from the sidebar', async ({ request, playwright, baseURL }) => {
  // bob holds gpu2 for 6 h: no 1 h slot on it ends within the next 5 h. (His own request
  // context: the server's login cookie would make later calls on `request` his.)
  const asBob = await playwright.request.newContext({ baseURL });
  const held = await api(asBob, 'POST', 'reservations', BOB, { title: 'bob long', gpus: ['gpu2:0'], duration: '6h' });
  expect(held.status).toBe(201);
  const before = await page.evaluate(() => {
    const d = new Date(Date.now() + 5 * 3600_000);
    d.setMinutes(d.getMinutes() - d.getTimezoneOffset()); // the local time, as the input wants it
    return d.toISOString().slice(0, 16);
  });
  await notify().getByLabel('Free before (optional)').fill(before);
  await notify().getByRole('button', { name: 'Notify me when these GPUs are free' }).click();
  await expect(notices()).toHaveCount(1);
  await expect(notices().first()).toContainText('2 GPUs on gpu2 for 1h, before');
  const listed = (await api(request, 'GET', 'subscriptions')).body.subscriptions;
  const [sub] = listed.filter((s: { active: boolean }) => s.active);
  expect(sub?.starts_now, JSON.stringify(listed)).toBe(false);
  expect(await notices().first().getAttribute('data-subscription-id')).toBe(String(sub.id));
  expect(await notices().first().getAttribute('data-subscription-id')).toBe(String(sub.id));
  await notices().first().getByRole('button', { name: /^Cancel the notification/ }).click();
  await expect(notices()).toHaveCount(0);
  await expect(notify().getByText('No GPU notifications')).toBeVisible();
  expect((await api(request, 'GET', `subscriptions/${sub.id}`)).status).toBe(404);
  // a form the server cannot take says why, in words
  await notify().getByLabel('How many GPUs').fill('0');
  await notify().getByRole('button', { name: 'Notify me when these GPUs are free' }).click();
  await expect(notify().locator('.jp-gpuhive-notify-error')).toHaveText('How many GPUs? A whole number from 1 to 64.');
  expect((await api(asBob, 'DELETE', `reservations/${held.body.id}`, BOB)).status).toBe(200);
  await asBob.dispose();
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
