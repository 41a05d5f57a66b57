/**
 * GPU health in the sidebar (issue #30): a failure preset on the UI-test server's simulated host
 * (row remapping failed on gpu1:3) marks the GPU's row failed with the reason, never free; ada, an
 * admin, drains gpu2:0 from its row's menu (the row then says who drained it and why) and ends the
 * drain; a user who is not an admin gets no admin menu. Everything it changes is undone afterwards.
 */
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { Page, expect, test } from '@playwright/test';
import { ADA, TOKEN, api, watchErrors } from './helpers';

const PYTHON = process.env.PYTHON ?? path.resolve(__dirname, '../../../.venv/bin/python');

test.describe.configure({ mode: 'serial' });

let page: Page;
let errors: string[] = [];

const panel = () => page.locator('#jupyter-gpuhive-panel');
const row = (gpu: string) => panel().locator(`li.jp-gpuhive-gpu[data-gpu="${gpu}"]`);

/** Give GPU `index` of simulated host gpu1 a failure preset of the stand-in (null: healthy). */
function setFault(index: number, fault: string | null): void {
  const root = fs.readFileSync(path.resolve(__dirname, '..', 'artifacts', 'server-sim.dir'), 'utf8').trim();
  const config = path.join(root, 'sim', 'gpu1', 'gpu1.json');
  const code = 'import sys; from jupyter_gpuhive.sim.inventory import set_gpu_fault as s; ' +
    's(sys.argv[1], int(sys.argv[2]), None if sys.argv[3] == "-" else sys.argv[3])';
  execFileSync(PYTHON, ['-c', code, config, String(index), fault ?? '-']);
}

async function openPanel(token: string, workspace: string): Promise<void> {
  await page.goto(`/lab/workspaces/${workspace}?reset&token=${token}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
  await page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-gpuhive-panel"]').click();
  await expect(panel()).toBeVisible();
}

test.beforeAll(async ({ browser }) => {
  setFault(3, 'remapped');
  page = await browser.newPage();
  errors = watchErrors(page);
  await openPanel(ADA, 'gpuhive-health');
});

test.afterAll(async ({ request }) => {
  setFault(3, null);
  await api(request, 'POST', 'health/drain', ADA, { gpu: 'gpu2:0', drain: false });
  expect(errors, 'page errors, or console errors of ours').toEqual([]);
  await page?.close();
});

test("a failed GPU's row says so, with the reason", async () => {
  await expect(row('gpu1:3')).toHaveAttribute('data-health', 'failed', { timeout: 60_000 });
  await expect(row('gpu1:3').locator('.jp-gpuhive-health-failed')).toHaveText(
    "Failed: row remapping failed: the GPU's memory needs service. Not bookable."
  );
  await expect(row('gpu1:0').locator('.jp-gpuhive-health')).toHaveCount(0);
  // Never free: its state, its checkbox and the summary's count say so (issue #48).
  await expect(row('gpu1:3')).toHaveAttribute('data-state', 'failed');
  await expect(row('gpu1:3').locator('.jp-gpuhive-badge')).toHaveText(/^failed/);
  await expect(row('gpu1:3').getByRole('checkbox')).toBeDisabled();
  await expect(panel().locator('.jp-gpuhive-summary')).toContainText('1 failed');
});

/** Run an action of a row's admin menu. */
async function adminAction(gpu: string, action: RegExp): Promise<void> {
  await row(gpu).getByRole('button', { name: `Admin actions for ${gpu}` }).click();
  await page.getByRole('menuitem', { name: action }).click();
}

test('an admin drains a GPU from its row, and undrains it', async ({ request }) => {
  await adminAction('gpu2:0', /^Drain gpu2:0/);
  const dialog = page.locator('.jp-Dialog');
  await dialog.locator('input').fill('fan swap');
  await dialog.getByRole('button', { name: 'Drain' }).click();
  await expect(row('gpu2:0').locator('.jp-gpuhive-health-drained')).toHaveText('Drained for maintenance by ada: fan swap. Not bookable.');
  const health = (await api(request, 'GET', 'health')).body.gpus as { gpu: string; drained: boolean; drained_by: string }[];
  expect(health.find(h => h.gpu === 'gpu2:0')).toMatchObject({ drained: true, drained_by: 'ada' });

  await expect(row('gpu2:0')).toHaveAttribute('data-state', 'drained');
  await expect(row('gpu2:0').getByRole('checkbox')).toBeDisabled();
  await adminAction('gpu2:0', /^End the drain of gpu2:0/);
  await expect(row('gpu2:0').locator('.jp-gpuhive-health')).toHaveCount(0);
  await expect(row('gpu2:0')).toHaveAttribute('data-state', 'free');
  await row('gpu2:0').getByRole('button', { name: 'Admin actions for gpu2:0' }).click();
  await expect(page.getByRole('menuitem', { name: /^Drain gpu2:0/ })).toBeVisible();
  await page.keyboard.press('Escape');
  await expect(page.locator('.jp-gpuhive-rowmenu')).toBeHidden();
  const after = (await api(request, 'GET', 'health')).body.gpus as { gpu: string; drained: boolean }[];
  expect(after.find(h => h.gpu === 'gpu2:0')?.drained).toBe(false);
});

test('a user who is not an admin sees the health, and no drain button', async ({ browser }) => {
  await page.close();
  page = await browser.newPage();
  errors = watchErrors(page);
  await openPanel(TOKEN, 'gpuhive-health-user');
  await expect(row('gpu1:3').locator('.jp-gpuhive-health-failed')).toBeVisible();
  await expect(panel().locator('.jp-gpuhive-rowmenu-button')).toHaveCount(0);
});
