/**
 * The first hour, in the browser: a GPU workstation with no gpuhive configuration (an
 * nvidia-smi on PATH) lists its GPUs in the panel and quick reserve works; with no hosts and
 * no nvidia-smi, the panel shows the first steps with copy buttons. Two servers of their own
 * (start_server.py zeroconf / empty). Screenshots → ui-tests/artifacts/screenshots/3*.png.
 */
import { execFileSync } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { BrowserContext, Page, expect, test } from '@playwright/test';
import { TOKEN, watchErrors } from './helpers';

const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');
const PYTHON = process.env.PYTHON ?? path.resolve(__dirname, '../../../.venv/bin/python');
const ZERO = `http://127.0.0.1:${process.env.GPUHIVE_UI_PORT_ZERO}`;
const EMPTY = `http://127.0.0.1:${process.env.GPUHIVE_UI_PORT_EMPTY}`;

test.describe.configure({ mode: 'serial' });

async function openPanel(context: BrowserContext, base: string, workspace = ''): Promise<{ page: Page; errors: string[] }> {
  const page = await context.newPage();
  const errors = watchErrors(page);
  await page.goto(workspace ? `${base}/lab/workspaces/${workspace}?reset&token=${TOKEN}` : `${base}/lab?token=${TOKEN}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
  await page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-gpuhive-panel"]').click();
  await expect(page.locator('#jupyter-gpuhive-panel')).toBeVisible();
  return { page, errors };
}

test('zero config: the panel lists this machine’s GPUs and quick reserve works', async ({ browser, request }) => {
  const hosts = (await (await request.get(`${ZERO}/gpuhive/api/hosts?token=${TOKEN}`)).json()).hosts;
  expect(hosts.length).toBe(1);
  expect(hosts[0].transport).toBe('local');
  const ids = hosts[0].gpus.map((g: { id: string }) => g.id);
  expect(ids).toEqual([0, 1, 2, 3].map(i => `${hosts[0].name}:${i}`));

  const context = await browser.newContext();
  const { page, errors } = await openPanel(context, ZERO);
  const panel = page.locator('#jupyter-gpuhive-panel');
  await expect(panel.locator('li.jp-gpuhive-gpu')).toHaveCount(4);
  expect(await panel.locator('li.jp-gpuhive-gpu').evaluateAll(rows => rows.map(r => r.getAttribute('data-gpu')))).toEqual(ids);
  await expect(panel.locator(`.jp-gpuhive-host[data-host="${hosts[0].name}"] .jp-gpuhive-host-state`)).toHaveText('up', { timeout: 30_000 });
  await expect(panel.locator('.jp-gpuhive-section-setup')).toBeHidden();

  const row = panel.locator(`li.jp-gpuhive-gpu[data-gpu="${ids[2]}"]`);
  await row.getByRole('checkbox').check();
  await panel.getByLabel('Reservation title').fill('first hour');
  await panel.getByRole('button', { name: 'Reserve the selected GPUs now' }).click();
  const mine = panel.locator('li.jp-gpuhive-reservation');
  await expect(mine).toHaveCount(1);
  await expect(mine.first()).toContainText('first hour');
  await expect(mine.first()).toContainText(ids[2]);
  await expect(row).toHaveAttribute('data-state', 'mine');
  await page.screenshot({ path: path.join(SHOTS, '31-zeroconf.png') });
  expect(errors).toEqual([]);
  await context.close();
});

test('hosts add keeps this machine; a host that goes leaves its reservation marked “host gone”', async ({ browser, request }) => {
  // Issue #28 item 3: the real CLI against the zero-config server's files.
  const root = fs.readFileSync(path.resolve(__dirname, '..', 'artifacts', 'server-zeroconf.dir'), 'utf8').trim();
  const env = {
    ...process.env,
    JUPYTER_CONFIG_DIR: path.join(root, 'config'),
    JUPYTER_DATA_DIR: path.join(root, 'data'),
    PATH: `${path.join(root, 'driver-bin')}:${process.env.PATH}`
  };
  const hosts = (...args: string[]) => execFileSync(PYTHON, ['-m', 'jupyter_gpuhive.cli.main', 'hosts', ...args], { env }).toString();
  const name = (await (await request.get(`${ZERO}/gpuhive/api/hosts?token=${TOKEN}`)).json()).hosts[0].name;
  const made = await request.post(`${ZERO}/gpuhive/api/reservations?token=${TOKEN}`, {
    data: { title: 'on my workstation', gpus: [`${name}:3`], duration: '1h' }
  });
  expect(made.status()).toBe(201);
  const id = (await made.json()).id;

  expect(hosts('add', 'box', 'box.lab')).toContain(`Kept this machine (${name}) as a host`);
  const context = await browser.newContext();
  const { page, errors } = await openPanel(context, ZERO, 'gpuhive-host-gone');
  const panel = page.locator('#jupyter-gpuhive-panel');
  await expect(panel.locator('.jp-gpuhive-host[data-host="box"]')).toBeVisible({ timeout: 30_000 });
  await expect(panel.locator(`.jp-gpuhive-host[data-host="${name}"] li.jp-gpuhive-gpu`)).toHaveCount(4);
  const mine = panel.locator(`li.jp-gpuhive-reservation[data-reservation-id="${id}"]`);
  await expect(mine).toBeVisible();
  await expect(mine.locator('.jp-gpuhive-host-gone')).toHaveCount(0);

  hosts('remove', name);
  await expect(mine.locator('.jp-gpuhive-host-gone')).toHaveText(
    `⚠ host gone: ${name} is no longer configured; these GPUs are not monitored and cannot run kernels`,
    { timeout: 30_000 }
  );
  await page.screenshot({ path: path.join(SHOTS, '33-host-gone.png') });
  // Back to zero config for what follows: an empty hosts file uses this machine again.
  hosts('remove', 'box');
  await expect(panel.locator(`.jp-gpuhive-host[data-host="${name}"]`)).toBeVisible({ timeout: 30_000 });
  await request.delete(`${ZERO}/gpuhive/api/reservations/${id}?token=${TOKEN}`);
  expect(errors).toEqual([]);
  await context.close();
});

test('no hosts and no nvidia-smi: the panel shows the first steps with copy buttons', async ({ browser, request }) => {
  const reply = await (await request.get(`${EMPTY}/gpuhive/api/hosts?token=${TOKEN}`)).json();
  expect(reply.hosts).toEqual([]);
  const commands = reply.setup.steps.filter((s: { command?: string }) => s.command).map((s: { command: string }) => s.command);

  const context = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'] });
  const { page, errors } = await openPanel(context, EMPTY);
  const panel = page.locator('#jupyter-gpuhive-panel');
  await expect(panel.locator('.jp-gpuhive-summary')).toHaveText('No GPU hosts configured');
  const setup = panel.locator('.jp-gpuhive-section-setup');
  await expect(setup).toBeVisible();
  await expect(setup).toContainText('No GPU hosts are configured yet.');
  await expect(setup.locator('.jp-gpuhive-command code')).toHaveText(commands);
  expect(commands).toContain('jupyter gpuhive init');
  expect(commands.some((c: string) => c.startsWith('jupyter gpuhive hosts add '))).toBe(true);
  await expect(panel.locator('.jp-gpuhive-section-gpus')).toBeHidden();
  await expect(panel.locator('.jp-gpuhive-section-reserve')).toBeHidden();

  const copy = setup.getByRole('button', { name: `Copy: ${commands[0]}` });
  await copy.click();
  await expect(copy).toHaveText('Copied');
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(commands[0]);
  await page.screenshot({ path: path.join(SHOTS, '32-empty.png') });
  expect(errors).toEqual([]);
  await context.close();
});
