/**
 * What the UI specs share: the REST API as a user, and driving a notebook (JupyterLab or
 * Notebook 7: the same cell and output DOM) — Run All made reliable, the calendar's marks.
 */
import { APIRequestContext, Page, expect } from '@playwright/test';

export const TOKEN = process.env.GPUHIVE_UI_TOKEN!;
export const BOB = process.env.GPUHIVE_UI_BOB_TOKEN!;
/** ada's token: an admin of the simulated site (start_server.py's admin_users). */
export const ADA = process.env.GPUHIVE_UI_ADMIN_TOKEN ?? 'gpuhive-ui-test-ada';

export async function api(request: APIRequestContext, method: string, url: string, token = TOKEN, data?: unknown) {
  const response = await request.fetch(`gpuhive/api/${url}`, { method, headers: { Authorization: `token ${token}` }, data });
  return { status: response.status(), body: await response.json() };
}

/** The server's side of "ready": the notebook's session has an idle kernel a page is connected to. */
export async function kernelReady(request: APIRequestContext, notebook: string) {
  await expect
    .poll(
      async () => {
        const sessions = await (await request.get(`api/sessions?token=${TOKEN}`)).json();
        const kernel = sessions.find((s: { path: string }) => s.path === notebook)?.kernel;
        return kernel && kernel.execution_state === 'idle' && kernel.connections > 0;
      },
      { timeout: 60_000 }
    )
    .toBe(true);
}

export const codeCell = (page: Page, source: string) =>
  page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell').filter({
    has: page.locator('.jp-InputArea-editor', { hasText: source })
  });
export const output = (page: Page, source: string) => codeCell(page, source).locator('.jp-OutputArea');

async function runMenu(page: Page, item: string) {
  await page.locator('#jp-MainMenu .lm-MenuBar-itemLabel', { hasText: /^Run$/ }).click();
  await page.locator('.lm-Menu-itemLabel', { hasText: new RegExp(`^${item}$`) }).click();
}

/**
 * Run All, made reliable. Sent while the page is still settling the kernel of a notebook it
 * has just opened (the kernel indicator already says idle; sometimes it even replaces the
 * kernel: "Kernel started", "Kernel shutdown", "Kernel started" in the server log), a Run All
 * runs nothing or stops after the first cell, or asks for a kernel: the rest keep "[ ]" and
 * nothing is running. Those cells are then run from the first one that did not run ("Run
 * Selected Cell and All Below"), so no cell runs twice.
 */
export async function runAll(page: Page) {
  const prompts = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt');
  const states = async () =>
    (await prompts.allTextContents()).map(t => (/\[\d+\]/.test(t) ? 'done' : t.includes('*') ? 'running' : 'waiting'));
  expect(await states(), 'cells ran before Run All').not.toContain('done');
  await runMenu(page, 'Run All Cells');
  let idleSince = Date.now();
  for (let retries = 0; ; ) {
    const now = await states();
    if (now.every(s => s === 'done')) {
      return;
    }
    if (now.includes('running')) {
      idleSince = Date.now();
    } else if (Date.now() - idleSince > 5_000) {
      expect(++retries, `cells that never ran: ${now}`).toBeLessThanOrEqual(3);
      console.log(`Run All stopped early (${now.join(' ')}); running the rest again`);
      await prompts.nth(now.indexOf('waiting')).click();
      await runMenu(page, 'Run Selected Cell and All Below');
      idleSince = Date.now();
    }
    await page.waitForTimeout(250);
  }
}

/** A calendar's reservation boxes as drawn: the curves of its third mark (CalendarView: allowed, grid, boxes, ...). */
export async function drawnBoxes(figure: ReturnType<Page['locator']>): Promise<{ count: number; fills: string[] }> {
  return figure.evaluate(f => {
    const marks = f.querySelectorAll('svg.svg-figure g[clip-path]');
    const boxes = marks[2] as SVGGElement | undefined;
    if (!boxes || getComputedStyle(boxes).display === 'none') {
      return { count: 0, fills: [] };
    }
    const curves = Array.from(boxes.querySelectorAll('g.curve'));
    return { count: curves.length, fills: curves.map(c => getComputedStyle(c.querySelector('path.area')!).fill) };
  });
}

/** A calendar's box labels as drawn (its fourth mark). */
export async function drawnLabels(figure: ReturnType<Page['locator']>): Promise<string[]> {
  return figure.evaluate(f => {
    const marks = f.querySelectorAll('svg.svg-figure g[clip-path]');
    const mark = marks[3] as SVGGElement | undefined;
    if (!mark || getComputedStyle(mark).display === 'none') {
      return [];
    }
    return Array.from(mark.querySelectorAll('text')).map(t => t.textContent ?? '');
  });
}

/**
 * Uncaught page errors that are known bugs of Jupyter itself, not ours: each with where it
 * comes from. Notebook 7's shortcuts plugin reads `registry.plugins[id].schema` in a
 * `pluginChanged` handler before the plugin is there (a race in notebook_core's bundled
 * @jupyterlab/shortcuts-extension; jupyter/notebook#7862, upstream jupyterlab/jupyterlab#18163).
 */
const UPSTREAM_PAGE_ERRORS: { message: RegExp; stack: RegExp; ref: string }[] = [
  {
    message: /^Cannot read properties of undefined \(reading 'schema'\)$/,
    stack: /^TypeError[^\n]*\n\s+at [^\n]*\/static\/notebook\/notebook_core\.[0-9a-f]+\.js/,
    ref: 'jupyter/notebook#7862'
  }
];

/**
 * Collect what must fail a spec (it ends with `expect(errors).toEqual([])`): every uncaught
 * page error, except the known upstream ones above, and every console error that comes from
 * our code (the extension's bundle or a gpuhive request). All are logged as they come. The
 * browser's own "Failed to load resource" lines only report an HTTP status (a 409 the panel
 * shows in words is one): the specs check what the code does with those.
 */
export function watchErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('pageerror', error => {
    const stack = error.stack ?? '';
    const known = UPSTREAM_PAGE_ERRORS.find(k => k.message.test(error.message) && k.stack.test(stack) && !/jupyter-gpuhive/.test(stack));
    console.log(`page error${known ? ` (known upstream: ${known.ref})` : ''}: ${error.message}\n${stack}`);
    if (!known) {
      errors.push(`page error: ${error.message}`);
    }
  });
  page.on('console', message => {
    if (message.type() !== 'error') {
      return;
    }
    const where = message.location().url ?? '';
    const network = message.text().startsWith('Failed to load resource:');
    const ours = !network && /jupyter-gpuhive|gpuhive\/api/.test(`${where} ${message.text()}`);
    console.log(`console error${ours ? ' (ours)' : ''}: ${message.text()} (${where})`);
    if (ours) {
      errors.push(`console error: ${message.text()} (${where})`);
    }
  });
  return errors;
}
