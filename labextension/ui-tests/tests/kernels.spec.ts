/**
 * Kernels on reservations in JupyterLab: a reservation's kernel chosen from the launcher, and
 * from the sidebar's "Open a notebook here"; a cell prints the host name and the GPUs it got;
 * the status bar counts down how long the GPUs are the notebook's; the sidebar lists the
 * kernels and sets one's end policy; `%gpureserve … --kernel` switches a notebook over. All
 * reservations and kernels it makes are gone afterwards (the panel spec expects none).
 */
import * as os from 'os';
import * as path from 'path';
import { APIRequestContext, Page, expect, test } from '@playwright/test';
import { TOKEN, api, watchErrors } from './helpers';

const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');

test.describe.configure({ mode: 'serial' });

let page: Page;
let errors: string[] = [];
let booked: { id: number; gpus: string[]; gpu_uuids: string[] };

const panel = () => page.locator('#jupyter-gpuhive-panel');
const notebook = () => page.locator('.jp-NotebookPanel:not(.lm-mod-hidden)');
const status = () => page.locator('.jp-gpuhive-kernel-status');

/** Type `code` into the notebook's last cell, run it, and return its output area. */
async function run(code: string, wait = true) {
  // The kernel is connected and idle first (a cell sent while it starts may never run).
  await expect(notebook().locator('.jp-Notebook-ExecutionIndicator')).toHaveAttribute('data-status', 'idle', { timeout: 60_000 });
  const cells = notebook().locator('.jp-CodeCell');
  // A notebook that has just opened may still replace its first cell as its file loads, and
  // take the code with it: then the code is written again (at most 3 times).
  for (let attempt = 1; ; attempt++) {
    const index = (await cells.count()) - 1; // Shift+Enter adds a cell below this one
    const cell = cells.nth(index);
    const editor = cell.locator('.jp-InputArea-editor .cm-content');
    const ran = await (async () => {
      await editor.fill(code, { timeout: 10_000 });
      await expect(editor).toHaveText(code, { timeout: 5_000 });
      await editor.press('Shift+Enter', { timeout: 10_000 });
      await expect(cell.locator('.jp-InputPrompt')).toHaveText(/\[(\d+|\*)\]/, { timeout: 10_000 });
      await expect(cell.locator('.jp-InputArea-editor .cm-content')).toHaveText(code, { timeout: 5_000 });
      if (wait) {
        await expect(cell.locator('.jp-OutputArea-output').first()).toBeVisible({ timeout: 30_000 });
      }
    })().then(
      () => true,
      error => {
        console.log(`run: attempt ${attempt} of '${code}' did not run: ${String(error).split('\n')[0]}`);
        return false;
      }
    );
    if (ran) {
      return cell.locator('.jp-OutputArea-output');
    }
    expect(attempt, `the cell never ran: ${code}`).toBeLessThan(4);
    await page.waitForTimeout(1000);
  }
}

/** The kernel this notebook runs on, from the server's sessions. */
async function kernelOf(request: APIRequestContext, name: string) {
  const sessions = await (await request.get(`api/sessions?token=${TOKEN}`)).json();
  return sessions.find((s: { kernel: { name: string } }) => s.kernel?.name === name);
}

async function cleanup(request: APIRequestContext) {
  const sessions = await (await request.get(`api/sessions?token=${TOKEN}`)).json();
  for (const s of sessions) {
    if (String(s.kernel?.name).startsWith('gpuhive-r')) {
      await request.delete(`api/sessions/${s.id}?token=${TOKEN}`);
    }
  }
  const me = (await api(request, 'GET', 'me')).body.name;
  for (const r of (await api(request, 'GET', `reservations?user=${me}`)).body.reservations) {
    await api(request, 'DELETE', `reservations/${r.id}`);
  }
}

test.beforeAll(async ({ browser, request }) => {
  await cleanup(request);
  // Booked before the page loads: Lab reads the kernelspecs (the launcher's cards) as it starts.
  const made = await api(request, 'POST', 'reservations', TOKEN, { title: 'ui kernel', gpus: ['gpu2:1'], duration: '1h' });
  expect(made.status).toBe(201);
  booked = made.body;
  page = await browser.newPage();
  errors = watchErrors(page);
  await page.goto(`/lab/workspaces/gpuhive-kernels?reset&token=${TOKEN}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
});

test.afterAll(async ({ request }) => {
  await cleanup(request);
  expect(errors, 'page errors, or console errors of ours').toEqual([]);
  await page?.close();
});

test('the launcher offers my reservation; its kernel runs on the reserved GPU', async ({ request }) => {
  const card = page.locator('.jp-LauncherCard[data-category="Notebook"]', { hasText: 'Python on my reservation: gpu2:1' });
  await expect(card).toBeVisible({ timeout: 30_000 });
  await expect(card).toContainText('until');
  await card.click();
  await expect(notebook()).toBeVisible();
  await expect(notebook().locator('.jp-KernelName, .jp-Toolbar-kernelName').first()).toContainText('Python on my reservation', { timeout: 60_000 });

  const out = await run('import os, socket; print(socket.gethostname(), os.environ["CUDA_VISIBLE_DEVICES"])');
  await expect(out.first()).toContainText(`${os.hostname()} ${booked.gpu_uuids[0]}`, { timeout: 60_000 });
  expect(await kernelOf(request, `gpuhive-r${booked.id}`)).toBeTruthy();

  // The status bar: how long the GPUs are this notebook's.
  await expect(status()).toBeVisible();
  await expect(status()).toContainText(/gpu2:1 · (59m|1h 00m) \S* ?left|gpu2:1 · \d+m \d+s left/);
  const before = await status().textContent();
  await page.waitForTimeout(2100);
  expect(await status().textContent()).not.toEqual(before); // it counts down
  await page.screenshot({ path: path.join(SHOTS, '20-kernel-launcher.png') });
});

test('the sidebar opens a notebook on a reservation and sets its kernels\' end policy', async ({ request }) => {
  await page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-gpuhive-panel"]').click();
  await expect(panel()).toBeVisible();
  const item = panel().locator(`li.jp-gpuhive-reservation[data-reservation-id="${booked.id}"]`);
  await item.getByRole('button', { name: /Open a notebook whose kernel runs on gpu2:1/ }).click();
  await expect(notebook().locator('.jp-KernelName, .jp-Toolbar-kernelName').first()).toContainText('Python on my reservation', { timeout: 60_000 });
  await page.waitForTimeout(3000); // a notebook just made may still reload its first cell
  const out = await run('import os, socket; print("on", socket.gethostname(), os.environ["CUDA_VISIBLE_DEVICES"])');
  await expect(out.first()).toContainText(`on ${os.hostname()} ${booked.gpu_uuids[0]}`, { timeout: 60_000 });
  await expect(status()).toContainText('gpu2:1 ·');

  // Both kernels are listed, each counting down, each with its end policy.
  const kernels = panel().locator('li.jp-gpuhive-kernel');
  await expect(kernels).toHaveCount(2, { timeout: 30_000 });
  await expect(kernels.first().locator('.jp-gpuhive-kernel-countdown')).toContainText('left');
  const id = await kernels.first().getAttribute('data-kernel-id');
  await kernels.first().getByLabel(`At the end of reservation ${booked.id}`).selectOption('extend');
  await expect
    .poll(async () => (await api(request, 'GET', `kernels/${id}`)).body.policy)
    .toBe('extend');
  await page.screenshot({ path: path.join(SHOTS, '21-kernel-sidebar.png') });
});

test('%gpureserve --kernel books GPUs and switches the notebook to a kernel on them', async ({ request }) => {
  await page.locator('.lm-TabBar-addButton:not(.lm-mod-hidden)').first().click(); // a new launcher
  await page.locator('.jp-LauncherCard[data-category="Notebook"]', { hasText: 'Python 3' }).last().click();
  await expect(notebook().locator('.jp-KernelName, .jp-Toolbar-kernelName').first()).toContainText(/Python 3/, { timeout: 60_000 });
  await run('%load_ext jupyter_gpuhive', false);
  const out = await run('%gpureserve gpu2:0 --for 30m --title ui-switch --kernel');
  await expect(out.first()).toContainText('switches to a kernel on gpu2:0', { timeout: 60_000 });
  await expect(notebook().locator('.jp-KernelName, .jp-Toolbar-kernelName').first()).toContainText('Python on my reservation', { timeout: 60_000 });
  const me = (await api(request, 'GET', 'me')).body.name;
  const mine = (await api(request, 'GET', `reservations?user=${me}`)).body.reservations;
  const made = mine.find((r: { title: string }) => r.title === 'ui-switch');
  expect(made.gpus).toEqual(['gpu2:0']);
  await notebook().locator('.jp-CodeCell').last().waitFor();
  const where = await run('import os; print("now", os.environ["CUDA_VISIBLE_DEVICES"])');
  await expect(where.last()).toContainText(`now ${made.gpu_uuids[0]}`, { timeout: 60_000 });
  await expect(status()).toContainText('gpu2:0 ·');
});

test('the warning before the end reaches the notebook and its running cell', async ({ request }) => {
  const me = (await api(request, 'GET', 'me')).body.name;
  const mine = (await api(request, 'GET', `reservations?user=${me}`)).body.reservations;
  const made = mine.find((r: { title: string }) => r.title === 'ui-switch');
  await run('import time; [time.sleep(1) for i in range(60)]', false);
  const cells = notebook().locator('.jp-CodeCell');
  const running = cells.nth((await cells.count()) - 2);
  await expect(running.locator('.jp-InputPrompt')).toContainText('*');
  // The reservation now ends in the warning's lead (10 minutes) and a few seconds.
  const end = new Date(Date.now() + 10 * 60_000 + 8_000).toISOString();
  expect((await api(request, 'PATCH', `reservations/${made.id}`, TOKEN, { end })).status).toBe(200);
  await expect(page.locator('.Toastify__toast', { hasText: `reservation ${made.id} on gpu2:0 ends at` })).toBeVisible({ timeout: 30_000 });
  await expect(running.locator('.jp-OutputArea-output')).toContainText(`⚠ gpuhive: reservation ${made.id} on gpu2:0 ends at`);
  await expect(status()).toHaveAttribute('data-urgency', 'soon');
  await page.screenshot({ path: path.join(SHOTS, '22-kernel-warning.png') });
});

test('the end of the reservation names the notebook and says in the status bar what happened', async ({ request }) => {
  // Issue #28 item 8: not the kernel's UUID, not "Disconnected".
  const me = (await api(request, 'GET', 'me')).body.name;
  const made = (await api(request, 'GET', `reservations?user=${me}`)).body.reservations.find((r: { title: string }) => r.title === 'ui-switch');
  const sessions = await (await request.get(`api/sessions?token=${TOKEN}`)).json();
  const session = sessions.find((s: { kernel: { name: string } }) => s.kernel?.name === `gpuhive-r${made.id}`);
  const kernelId: string = session.kernel.id;
  const notebookName = String(session.path).split('/').pop();
  const end = new Date(Date.now() + 6_000).toISOString();
  expect((await api(request, 'PATCH', `reservations/${made.id}`, TOKEN, { end })).status).toBe(200);
  const ended = page.locator('.Toastify__toast', { hasText: `Reservation ${made.id} ended at` });
  await expect(ended).toBeVisible({ timeout: 60_000 });
  await expect(ended).toContainText(`the kernel of ${notebookName}`);
  await expect(ended).not.toContainText(kernelId);
  await expect(status()).toContainText(`reservation ${made.id} ended`);
  await expect(status()).not.toContainText('Disconnected');
  await page.screenshot({ path: path.join(SHOTS, '23-kernel-ended.png') });
});
