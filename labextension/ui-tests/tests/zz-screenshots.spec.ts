/**
 * Pictures for the documentation (`make docs-screenshots` copies them into docs/_static/): the
 * job builder with a two-node PyTorch job and its preview, in the light and the dark theme →
 * ui-tests/artifacts/screenshots/16-job-builder.png, 17-job-builder-dark.png. The notebook is
 * ui-tests/notebooks/jobbuilder.ipynb (copied by start_server.py). It runs last (zz-, files run in
 * name order): after it, Notebook 7 pages raised "Command 'filebrowser:open-path' not registered".
 */
import * as path from 'path';
import { APIRequestContext, Locator, Page, expect, test } from '@playwright/test';
import { TOKEN, kernelReady, output, runAll, watchErrors } from './helpers';

const NOTEBOOK = 'jobbuilder.ipynb';
const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');

test.describe.configure({ mode: 'serial' });

let page: Page;
let errors: string[] = [];

async function theme(request: APIRequestContext, name: string) {
  const done = await request.put('lab/api/settings/@jupyterlab/apputils-extension:themes', {
    headers: { Authorization: `token ${TOKEN}` },
    data: { raw: JSON.stringify({ theme: name }) }
  });
  expect(done.status()).toBe(204);
}

/** A picture of a widget's output, the window grown to hold it. */
async function shot(what: Locator, name: string) {
  await page.setViewportSize({ width: 1280, height: 1400 });
  await what.screenshot({ path: path.join(SHOTS, name) });
  await page.setViewportSize({ width: 1280, height: 900 });
}

test.beforeAll(async ({ browser, request }) => {
  await theme(request, 'JupyterLab Light');
  page = await browser.newPage();
  errors = watchErrors(page);
  // A workspace of its own: the default one, which the other specs open, keeps no trace of this notebook.
  await page.goto(`/lab/workspaces/gpuhive-docs/tree/${NOTEBOOK}?token=${TOKEN}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
});

test.afterAll(async ({ request }) => {
  expect(errors, 'page errors, or console errors of ours').toEqual([]);
  await page?.close();
  await theme(request, 'JupyterLab Light'); // the next specs start in the light theme
});

test('the job builder previews a two-node PyTorch job, in light and dark', async ({ request }) => {
  await expect(page.locator('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator[data-status="idle"]')).toBeVisible({
    timeout: 60_000
  });
  await kernelReady(request, NOTEBOOK);
  await runAll(page);
  const builder = output(page, 'jb = gpuhive.job_builder(');
  await builder.getByRole('button', { name: 'Preview' }).click();
  // Two tasks, one per host, each a torchrun with its node rank.
  await expect(builder).toContainText('--node-rank 1', { timeout: 60_000 });
  await expect(builder).toContainText('torchrun');
  await shot(builder, '16-job-builder.png');

  await page.locator('#jp-MainMenu .lm-MenuBar-itemLabel', { hasText: /^Settings$/ }).click();
  await page.locator('.lm-Menu-itemLabel', { hasText: /^Theme$/ }).click();
  await page.locator('.lm-Menu-itemLabel', { hasText: /^JupyterLab Dark$/ }).click();
  await expect(page.locator('body')).toHaveAttribute('data-jp-theme-light', 'false');
  await shot(builder, '17-job-builder-dark.png');
});
