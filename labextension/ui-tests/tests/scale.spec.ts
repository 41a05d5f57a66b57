/**
 * The sidebar at real size (issue #48): `make demo` itself (12 GPUs over 3 hosts, its bookings,
 * violation, queued job and load; start_server.py demo) and the same with 32 GPUs (wide), as
 * the demo's user, an admin. A violation going on shows its notice in a fresh window at once;
 * admin actions sit in one "⋯" per row; no label overlaps another and no status is cut; a
 * failed or drained GPU is never free; my own preemptible job is mine. Each server is started
 * and stopped here. Screenshots → ui-tests/artifacts/screenshots/40-sidebar-12.png, 41-sidebar-32.png.
 */
import { ChildProcess, execFileSync, spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { APIRequestContext, Page, expect, test } from '@playwright/test';
import { TOKEN, api, watchErrors } from './helpers';

const PYTHON = process.env.PYTHON ?? path.resolve(__dirname, '../../../.venv/bin/python');
const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');
const BASE = `http://127.0.0.1:${process.env.GPUHIVE_UI_PORT_SCALE}`;

/** Start start_server.py MODE and wait until its API answers. */
async function startServer(mode: string, request: APIRequestContext): Promise<ChildProcess> {
  const server = spawn(PYTHON, ['start_server.py', mode], { cwd: path.resolve(__dirname, '..'), env: process.env, stdio: 'inherit' });
  await expect
    .poll(async () => (await request.get(`gpuhive/api/me?token=${TOKEN}`).catch(() => null))?.status() ?? 0, {
      timeout: 180_000,
      intervals: [1000]
    })
    .toBe(200);
  return server;
}

async function stopServer(server: ChildProcess | null): Promise<void> {
  if (server && server.exitCode === null) {
    const gone = new Promise(resolve => server.once('exit', resolve));
    server.kill('SIGTERM');
    await gone;
  }
}

/** Give GPU `index` of a simulated host of MODE's server a failure preset (null: healthy). */
function setFault(mode: string, host: string, index: number, fault: string | null): void {
  const root = fs.readFileSync(path.resolve(__dirname, '..', 'artifacts', `server-${mode}.dir`), 'utf8').trim();
  const code = 'import sys; from jupyter_gpuhive.sim.inventory import set_gpu_fault as s; ' +
    's(sys.argv[1], int(sys.argv[2]), None if sys.argv[3] == "-" else sys.argv[3])';
  execFileSync(PYTHON, ['-c', code, path.join(root, 'sim', host, `${host}.json`), String(index), fault ?? '-']);
}

/** What is wrong with the panel's layout: labels of a row that overlap, rows that overlap, statuses cut. */
async function layoutProblems(page: Page): Promise<string[]> {
  return page.locator('#jupyter-gpuhive-panel').evaluate(root => {
    const out: string[] = [];
    const box = (e: Element) => e.getBoundingClientRect();
    const shown = (r: DOMRect) => r.width > 0 && r.height > 0;
    const overlap = (a: DOMRect, b: DOMRect) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
    const rows = Array.from(root.querySelectorAll('li.jp-gpuhive-gpu'));
    rows.forEach((row, i) => {
      const id = row.getAttribute('data-gpu');
      const parts = ['.jp-gpuhive-gpu-label', '.jp-gpuhive-badge', '.jp-gpuhive-rowmenu-button', '.jp-gpuhive-usage', '.jp-gpuhive-violation', '.jp-gpuhive-health']
        .flatMap(s => Array.from(row.querySelectorAll(s)))
        .filter(e => shown(box(e)));
      for (let a = 0; a < parts.length; a++) {
        for (let b = a + 1; b < parts.length; b++) {
          if (overlap(box(parts[a]), box(parts[b]))) {
            out.push(`${id}: '${parts[a].textContent}' overlaps '${parts[b].textContent}'`);
          }
        }
      }
      const menu = row.querySelector('.jp-gpuhive-rowmenu-button');
      const label = box(row.querySelector('.jp-gpuhive-gpu-label')!);
      if (menu && (box(menu).top >= label.bottom || box(menu).bottom <= label.top)) {
        out.push(`${id}: the admin menu is on a line of its own`);
      }
      if (i && overlap(box(rows[i - 1]), box(row))) {
        out.push(`${id} overlaps the row above`);
      }
    });
    for (const badge of Array.from(root.querySelectorAll('.jp-gpuhive-badge'))) {
      if (shown(box(badge)) && (badge.scrollWidth > badge.clientWidth || badge.scrollHeight > badge.clientHeight + 1)) {
        out.push(`status cut: '${badge.textContent}' (${badge.scrollWidth} > ${badge.clientWidth})`);
      }
    }
    return out;
  });
}

for (const [mode, count] of [['demo', 12], ['wide', 32]] as const) {
  test.describe(`the sidebar at ${count} GPUs`, () => {
    test.describe.configure({ mode: 'serial' });

    let server: ChildProcess | null = null;
    let request: APIRequestContext;
    let page: Page;
    let errors: string[] = [];
    const panel = () => page.locator('#jupyter-gpuhive-panel');
    const row = (gpu: string) => panel().locator(`li.jp-gpuhive-gpu[data-gpu="${gpu}"]`);

    test.beforeAll(async ({ playwright }) => {
      test.setTimeout(300_000);
      request = await playwright.request.newContext({ baseURL: `${BASE}/` });
      server = await startServer(mode, request);
    });

    test.afterAll(async () => {
      await page?.close();
      await request?.dispose();
      await stopServer(server);
      expect(errors, 'page errors, or console errors of ours').toEqual([]);
    });

    test('a violation going on shows its notice in a fresh window, sidebar closed', async ({ browser }) => {
      // The demo's stray process of mine on alice's gpu3:1: open once the server has seen it.
      await expect
        .poll(async () => {
          const found = (await api(request, 'GET', 'violations')).body.violations as { gpu: string; ended_at: string | null }[];
          return found.some(v => v.gpu === 'gpu3:1' && !v.ended_at);
        }, { timeout: 120_000 })
        .toBe(true);
      page = await browser.newPage({ baseURL: BASE });
      errors = watchErrors(page);
      await page.goto(`/lab/workspaces/gpuhive-scale?reset&token=${TOKEN}`);
      await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
      // The server repeats the violation's event once a minute: the notice comes before that.
      const notice = page.locator('.Toastify__toast', { hasText: 'gpu3:1' });
      await expect(notice).toHaveCount(1, { timeout: 20_000 });
      await expect(notice).toContainText('runs on a GPU reserved by alice');
      await expect(panel()).toBeHidden();
      await notice.getByRole('button', { name: 'Hide notification' }).click();
    });

    test(`${count} GPUs: one admin menu per row, nothing overlaps, no status cut`, async () => {
      await page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-gpuhive-panel"]').click();
      await expect(panel()).toBeVisible();
      await expect(panel().locator('li.jp-gpuhive-gpu')).toHaveCount(count);
      await expect(panel().locator('.jp-gpuhive-host-state')).toHaveText(Array(count / 4).fill('up'), { timeout: 60_000 });
      await expect(row('gpu3:1').locator('.jp-gpuhive-violation')).toHaveCount(1, { timeout: 60_000 });
      await expect(panel().locator('li.jp-gpuhive-job', { hasText: 'overnight sweep' })).toBeVisible();
      // Admin actions: one small menu per whole GPU, no button row of their own.
      await expect(panel().locator('.jp-gpuhive-rowmenu-button')).toHaveCount(count);
      await expect(panel().locator('.jp-gpuhive-drain, .jp-gpuhive-undrain')).toHaveCount(0);
      // My own processes (the demo's load on gpu1:0-1) are mine, not a red "busy".
      await expect(row('gpu1:0')).toHaveAttribute('data-state', 'mine');
      expect(await layoutProblems(page)).toEqual([]);
      if (count === 12) {
        // The violation is above the fold, the panel scrolled to its top.
        await panel().evaluate(p => (p.scrollTop = 0));
        const note = await row('gpu3:1').locator('.jp-gpuhive-violation').boundingBox();
        expect(note!.y + note!.height).toBeLessThanOrEqual(page.viewportSize()!.height);
      }
    });

    test('a failed and a drained GPU are never free', async () => {
      setFault(mode, 'gpu1', 2, 'ecc');
      await expect(row('gpu1:2')).toHaveAttribute('data-state', 'failed', { timeout: 60_000 });
      // The drain, from the row's admin menu.
      await row('gpu2:3').getByRole('button', { name: 'Admin actions for gpu2:3' }).click();
      await page.getByRole('menuitem', { name: /^Drain gpu2:3/ }).click();
      const dialog = page.locator('.jp-Dialog');
      await dialog.locator('input').fill('fan swap');
      await dialog.getByRole('button', { name: 'Drain' }).click();
      await expect(row('gpu2:3')).toHaveAttribute('data-state', 'drained');
      for (const [gpu, word] of [['gpu1:2', 'failed'], ['gpu2:3', 'drained']]) {
        await expect(row(gpu).locator('.jp-gpuhive-badge')).toHaveText(new RegExp(`^${word}`));
        await expect(row(gpu).getByRole('checkbox')).toBeDisabled();
        await expect(row(gpu).locator('.jp-gpuhive-gpu-label')).toHaveAttribute('title', new RegExp(`^${gpu} cannot be booked: ${word}`));
      }
      const free = await panel().locator('li.jp-gpuhive-gpu[data-kind="gpu"][data-state="free"]').count();
      await expect(panel().locator('.jp-gpuhive-summary')).toHaveText(new RegExp(`^${free} free · .*1 failed · 1 drained`));
      expect(await layoutProblems(page)).toEqual([]);
      await panel().evaluate(p => (p.scrollTop = 0));
      await page.screenshot({ path: path.join(SHOTS, count === 12 ? '40-sidebar-12.png' : '41-sidebar-32.png') });
      setFault(mode, 'gpu1', 2, null);
    });

    test('my own preemptible job is mine, not a red "busy"', async () => {
      test.skip(count !== 12, 'once is enough');
      const made = await api(request, 'POST', 'jobs', TOKEN, { name: 'borrow', command: 'sleep 600', gpus: ['gpu1:3'], queued: true, preemptible: true });
      expect(made.status, JSON.stringify(made.body)).toBe(201);
      await expect(row('gpu1:3')).toHaveAttribute('data-state', 'mine', { timeout: 90_000 });
      await expect(row('gpu1:3').locator('.jp-gpuhive-badge')).toHaveText(`my job ${made.body.id} (preemptible)`);
      expect(await layoutProblems(page)).toEqual([]);
      await api(request, 'POST', `jobs/${made.body.id}/stop`);
    });
  });
}
