/**
 * The sidebar's "Earliest slot" section against a real server: it asks the finder
 * (POST reservations/search) for GPUs that bob's booking keeps busy now, lists the slots from
 * when his booking ends, and books the first with a click.
 */
import { Page, expect, test } from '@playwright/test';
import { BOB, TOKEN, api, watchErrors } from './helpers';

test.describe.configure({ mode: 'serial' });

let page: Page;
let errors: string[] = [];

const panel = () => page.locator('#jupyter-gpuhive-panel');
const earliest = () => panel().locator('.jp-gpuhive-section-earliest');

test.beforeAll(async ({ browser }) => {
  page = await browser.newPage();
  errors = watchErrors(page);
  // A workspace of its own: the default one keeps the panel open, and panel.spec.ts then
  // closes it with the very click that should open it.
  await page.goto(`/lab/workspaces/gpuhive-earliest?reset&token=${TOKEN}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
  await page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-gpuhive-panel"]').click();
  await expect(panel()).toBeVisible();
});

test.afterAll(async () => {
  expect(errors, 'page errors, or console errors of ours').toEqual([]);
  await page?.close();
});

test('the earliest slot is found after a booking ends and booked with a click', async ({ request }) => {
  // bob holds every GPU from an hour from now for two hours: 6 GPUs for 3 hours fit only after
  const start = new Date(Date.now() + 3600_000);
  start.setUTCMinutes(0, 0, 0);
  const all = ['gpu1:0', 'gpu1:1', 'gpu1:2', 'gpu1:3', 'gpu2:0', 'gpu2:1'];
  const held = await api(request, 'POST', 'reservations', BOB, { title: 'bob all', gpus: all, start: start.toISOString(), duration: '2h' });
  expect(held.status).toBe(201);
  await earliest().scrollIntoViewIfNeeded();
  await earliest().getByLabel('How many GPUs').fill('6');
  await earliest().getByLabel('For how many hours').fill('3');
  await earliest().getByRole('button', { name: 'Find the earliest slots that fit' }).click();
  const slots = earliest().locator('li.jp-gpuhive-slot');
  await expect(slots).toHaveCount(1);
  await expect(slots.first()).toContainText('gpu1:0, gpu1:1, gpu1:2, gpu1:3, gpu2:0, gpu2:1');
  await slots.first().getByRole('button', { name: /^Book / }).click();
  await expect(earliest().locator('.jp-gpuhive-slot-booked')).toContainText('Booked gpu1:0');
  const listed = (await api(request, 'GET', 'reservations')).body.reservations;
  const booked = listed.find((r: { title: string }) => r.title === 'earliest slot');
  expect(booked, JSON.stringify(listed)).toBeTruthy();
  expect(new Date(booked.start).getTime()).toBe(start.getTime() + 2 * 3600_000);
  // it is mine (the page's user): listed under My reservations, and cancelled from there
  const row = panel().locator('li.jp-gpuhive-reservation', { hasText: 'earliest slot' });
  await expect(row).toHaveCount(1);
  await row.getByRole('button', { name: /^Cancel/ }).click();
  await expect(row).toHaveCount(0);
  expect((await api(request, 'DELETE', `reservations/${held.body.id}`, BOB)).status).toBe(200);
});

test('a refusal is said in words', async () => {
  await earliest().getByLabel('How many GPUs').fill('0');
  await earliest().getByRole('button', { name: 'Find the earliest slots that fit' }).click();
  await expect(earliest().locator('.jp-gpuhive-earliest-error')).toContainText('How many GPUs?');
});
