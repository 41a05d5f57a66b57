/**
 * A violation held open for several sweeps (issue #28, items 4 and 5): bob holds gpu2:1, a
 * process of mine sits on it. The server repeats the violation's event every 2 s here
 * (start_server.py); the Lab shows ONE notice for it, updated in place, which can be dismissed
 * and stays dismissed; the GPU's row in the sidebar names the offending process. The picture
 * of the sidebar with the violation is the docs' (09-violation.png). Everything it makes is gone
 * afterwards.
 */
import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { APIRequestContext, Page, expect, test } from '@playwright/test';
import { BOB, TOKEN, api, watchErrors } from './helpers';

const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');

test.describe.configure({ mode: 'serial' });

let page: Page;
let errors: string[] = [];
let stray: ChildProcess | null = null;
let held: { id: number } | null = null;
let mine: { id: number } | null = null;
let asBob: APIRequestContext; // its own context: a login cookie of bob's would outrank my token

const panel = () => page.locator('#jupyter-gpuhive-panel');
const notices = () => page.locator('.Toastify__toast', { hasText: 'gpu2:1' });

/** How many times the server has published the violation's event so far. */
async function published(request: Parameters<Parameters<typeof test>[1]>[0]['request']): Promise<number> {
  const found = (await api(request, 'GET', 'violations')).body.violations as { gpu: string; kind: string; ended_at: string | null; actions: { handler: string }[] }[];
  const open = found.find(v => v.gpu === 'gpu2:1' && v.kind === 'foreign' && !v.ended_at);
  return open ? open.actions.filter(a => a.handler === 'event').length : 0;
}

test.beforeAll(async ({ browser, request, playwright }) => {
  asBob = await playwright.request.newContext({ baseURL: `http://127.0.0.1:${process.env.GPUHIVE_UI_PORT}/` });
  const made = await api(asBob, 'POST', 'reservations', BOB, { title: "bob's training", gpus: ['gpu2:1'], duration: '1h' });
  expect(made.status).toBe(201);
  held = made.body;
  const own = await api(request, 'POST', 'reservations', TOKEN, { title: 'my experiment', gpus: ['gpu1:0', 'gpu1:1'], duration: '2h' });
  expect(own.status).toBe(201);
  mine = own.body;
  // A process of mine on gpu2:1 of this run's simulated cluster (its stand-in's config).
  const root = fs.readFileSync(path.resolve(__dirname, '..', 'artifacts', 'server-sim.dir'), 'utf8').trim();
  stray = spawn('sleep', ['600'], {
    env: { PATH: process.env.PATH, GPUHIVE_SIM_HOST: 'gpu2', GPUHIVE_SIM_CONFIG: path.join(root, 'sim', 'gpu2', 'gpu2.json'), CUDA_VISIBLE_DEVICES: '1' },
    stdio: 'ignore'
  });
  page = await browser.newPage();
  errors = watchErrors(page);
  await page.goto(`/lab/workspaces/gpuhive-violations?reset&token=${TOKEN}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
  await page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-gpuhive-panel"]').click();
  await expect(panel()).toBeVisible();
});

test.afterAll(async ({ request }) => {
  stray?.kill();
  if (held) {
    await api(asBob, 'DELETE', `reservations/${held.id}`, BOB);
  }
  if (mine) {
    await api(request, 'DELETE', `reservations/${mine.id}`);
  }
  await asBob?.dispose();
  expect(errors, 'page errors, or console errors of ours').toEqual([]);
  await page?.close();
});

test('one notice per violation, however often the server repeats it, and it can be dismissed', async ({ request }) => {
  await expect(notices()).toHaveCount(1, { timeout: 60_000 });
  await expect(notices()).toContainText(`Your process ${stray!.pid} on GPU gpu2:1 runs on a GPU reserved by bob`);
  // Several sweeps later, the server has said it again and again: still one notice.
  await expect.poll(() => published(request), { timeout: 60_000 }).toBeGreaterThanOrEqual(4);
  await expect(notices()).toHaveCount(1);

  // The GPU's row names the process that breaks bob's reservation.
  const row = panel().locator('li.jp-gpuhive-gpu[data-gpu="gpu2:1"]');
  await expect(row.locator('.jp-gpuhive-violation')).toHaveText(`⚠ Violation: Your process ${stray!.pid} (sleep) runs on bob’s reservation`);
  await expect(panel().locator('li.jp-gpuhive-gpu[data-gpu="gpu2:0"] .jp-gpuhive-violation')).toHaveCount(0);
  await page.screenshot({ path: path.join(SHOTS, '09-violation.png') });

  await notices().getByRole('button', { name: 'Hide notification' }).click();
  await expect(notices()).toHaveCount(0);
  const before = await published(request);
  await expect.poll(() => published(request), { timeout: 60_000 }).toBeGreaterThanOrEqual(before + 2);
  await expect(notices()).toHaveCount(0); // dismissed stays dismissed
  await expect(row.locator('.jp-gpuhive-violation')).toHaveCount(1); // the row still says it

  stray?.kill();
  await expect(row.locator('.jp-gpuhive-violation')).toHaveCount(0, { timeout: 30_000 });
});
