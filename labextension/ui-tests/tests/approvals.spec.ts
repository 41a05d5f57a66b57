/**
 * Approvals in a real browser (issue #46): on the UI-test server, bookings of more than 3 GPUs on
 * gpu1 wait for the administrator of its host group 'lab', the token's user (start_server.py).
 * bob books all 4 of gpu1's GPUs twice, through the REST API: both are tentative. The sidebar's
 * "Awaiting my approval" lists them with a "tentative" badge; Approve confirms the first, Decline
 * (with a reason, asked in a dialog) cancels the second, and the section hides once nothing waits.
 * Everything it books is undone afterwards. Screenshot → ui-tests/artifacts/screenshots/60-approvals.png.
 */
import * as path from 'path';
import { APIRequestContext, Page, expect, test } from '@playwright/test';
import { BOB, api, watchErrors, TOKEN } from './helpers';

const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');
const GPUS = ['gpu1:0', 'gpu1:1', 'gpu1:2', 'gpu1:3'];

test.describe.configure({ mode: 'serial' });
test.use({ timezoneId: 'UTC' });

let page: Page;
let errors: string[] = [];
let asBob: APIRequestContext;
const booked: number[] = [];

const panel = () => page.locator('#jupyter-gpuhive-panel');
const waiting = () => panel().locator('section.jp-gpuhive-section-approvals');
const item = (id: number) => waiting().locator(`li.jp-gpuhive-approval[data-reservation-id="${id}"]`);

/** A whole hour some weeks ahead, clear of the other specs' bookings. */
function ahead(days: number, hour: number): string {
  const t = new Date();
  t.setUTCHours(hour, 0, 0, 0);
  t.setUTCDate(t.getUTCDate() + days);
  return t.toISOString();
}

test.beforeAll(async ({ browser, playwright, baseURL }) => {
  asBob = await playwright.request.newContext({ baseURL });
  for (const [title, hour] of [['bob needs all of gpu1', 3], ['bob again', 6]] as const) {
    const made = await api(asBob, 'POST', 'reservations', BOB, { title, gpus: GPUS, start: ahead(20, hour), duration: '2h' });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    expect(made.body.tentative).toBe(true);
    expect(made.body.may_approve).toBe(false);
    booked.push(made.body.id);
  }
  page = await browser.newPage();
  errors = watchErrors(page);
  await page.goto(`/lab/workspaces/gpuhive-approvals?reset&token=${TOKEN}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
  await page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-gpuhive-panel"]').click();
  await expect(panel()).toBeVisible();
});

test.afterAll(async () => {
  for (const id of booked) {
    await api(asBob, 'DELETE', `reservations/${id}`, BOB);
  }
  await asBob?.dispose();
  expect(errors, 'page errors, or console errors of ours').toEqual([]);
  await page?.close();
});

test('the bookings that wait for me are listed as tentative, with Approve and Decline', async () => {
  await expect(async () => {
    await panel().getByRole('button', { name: 'Refresh now' }).click();
    await expect(item(booked[0])).toBeVisible({ timeout: 2000 });
  }).toPass({ timeout: 30_000 });
  await expect(waiting().locator('h3')).toHaveText('Awaiting my approval');
  for (const id of booked) {
    await expect(item(id).locator('.jp-gpuhive-badge-tentative')).toHaveText('tentative');
  }
  await expect(item(booked[0])).toContainText('bob: bob needs all of gpu1 · 4 GPUs (gpu1:0, gpu1:1, gpu1:2, gpu1:3)');
  await expect(item(booked[0]).getByRole('button', { name: "Approve bob's booking 'bob needs all of gpu1'" })).toBeVisible();
  await expect(item(booked[0]).getByRole('button', { name: "Decline bob's booking 'bob needs all of gpu1'" })).toBeVisible();
  await waiting().screenshot({ path: path.join(SHOTS, '60-approvals.png') });
});

test('Approve confirms a booking; Decline, with its reason, cancels the other', async ({ request }) => {
  await item(booked[0]).getByRole('button', { name: /^Approve / }).click();
  await expect(item(booked[0])).toHaveCount(0);
  const approved = await api(request, 'GET', `reservations/${booked[0]}`);
  expect(approved.body.tentative).toBe(false);
  expect(approved.body.status).toBe('upcoming');

  await item(booked[1]).getByRole('button', { name: /^Decline / }).click();
  const dialog = page.locator('.jp-Dialog');
  await dialog.locator('input.jp-gpuhive-decline-reason').fill('the term is full');
  await dialog.getByRole('button', { name: 'Decline' }).click();
  await expect(waiting()).toBeHidden();
  const declined = await api(request, 'GET', `reservations/${booked[1]}`);
  expect(declined.body.status).toBe('cancelled');
  expect(declined.body.tentative).toBe(false);
  // answered once: a second answer is a 409 that says why
  const again = await api(request, 'POST', `reservations/${booked[0]}/approve`, TOKEN, {});
  expect(again.status).toBe(409);
  expect(again.body.message).toContain('does not wait for approval');
});
