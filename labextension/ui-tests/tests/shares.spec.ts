/**
 * Shares of a GPU in a real browser (issue #44): on gpu2:1, the UI-test server's shareable GPU
 * (start_server.py), bob holds 0.25 and I hold 0.5, booked through the REST API, and a stand-in
 * process of mine uses 6 GiB there. The sidebar's row of gpu2:1 is mine ("my share until …") and
 * lists both holders (me as 'you', first), each share's memory and use, and what is left; the
 * calendar, opened from the sidebar's "Calendar" shortcut and run in a kernel, draws both shares
 * as their parts of gpu2:1's lane, stacked, each box's tooltip naming its share, the half's label
 * in its own band. Everything it books or starts is undone afterwards. Screenshots →
 * ui-tests/artifacts/screenshots/50-shares-sidebar.png, 51-shares-calendar.png.
 */
import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import { APIRequestContext, Page, expect, test } from '@playwright/test';
import { BOB, TOKEN, api, output, runAll, watchErrors } from './helpers';

const SHOTS = path.resolve(__dirname, '..', 'artifacts', 'screenshots');
const GPU = 'gpu2:1'; // shareable, 40960 MiB: 0.25 is 10.0 GiB, 0.5 is 20.0 GiB

test.describe.configure({ mode: 'serial' });
test.use({ timezoneId: 'UTC' });

let page: Page;
let errors: string[] = [];
let asBob: APIRequestContext;
let booked: { id: number; bob: boolean }[] = [];
let stray: ChildProcess | null = null;
let sessionsBefore = new Set<string>();
let me = '';

const panel = () => page.locator('#jupyter-gpuhive-panel');
const row = () => panel().locator(`li.jp-gpuhive-gpu[data-gpu="${GPU}"]`);

async function sessionIds(request: APIRequestContext): Promise<{ id: string; path: string; kernel?: { execution_state: string; connections: number } }[]> {
  return (await request.get(`api/sessions?token=${TOKEN}`)).json();
}

test.beforeAll(async ({ browser, request, playwright, baseURL }) => {
  me = (await api(request, 'GET', 'me')).body.name;
  // bob's own request context: the server's login cookie would make later calls on `request` his.
  asBob = await playwright.request.newContext({ baseURL });
  const bobs = await api(asBob, 'POST', 'reservations', BOB, { title: 'bob share', gpus: [GPU], share: 0.25, duration: '24h' });
  expect(bobs.status, JSON.stringify(bobs.body)).toBe(201);
  booked.push({ id: bobs.body.id, bob: true });
  const mine = await api(request, 'POST', 'reservations', TOKEN, { title: 'my share', gpus: [GPU], share: 0.5, duration: '24h' });
  expect(mine.status, JSON.stringify(mine.body)).toBe(201);
  booked.push({ id: mine.body.id, bob: false });
  // A process of mine on gpu2:1 of this run's simulated cluster, using 6 GiB (6144 MiB).
  const root = fs.readFileSync(path.resolve(__dirname, '..', 'artifacts', 'server-sim.dir'), 'utf8').trim();
  stray = spawn('sleep', ['600'], {
    env: {
      PATH: process.env.PATH,
      GPUHIVE_SIM_HOST: 'gpu2',
      GPUHIVE_SIM_CONFIG: path.join(root, 'sim', 'gpu2', 'gpu2.json'),
      GPUHIVE_SIM_MEM_MIB: '6144',
      CUDA_VISIBLE_DEVICES: '1'
    },
    stdio: 'ignore'
  });
  sessionsBefore = new Set((await sessionIds(request)).map(s => s.id));
  page = await browser.newPage();
  errors = watchErrors(page);
  await page.goto(`/lab/workspaces/gpuhive-shares?reset&token=${TOKEN}`);
  await page.locator('#jupyterlab-splash').waitFor({ state: 'detached', timeout: 90_000 });
  await page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jupyter-gpuhive-panel"]').click();
  await expect(panel()).toBeVisible();
});

test.afterAll(async ({ request }) => {
  stray?.kill();
  for (const s of await sessionIds(request)) {
    if (!sessionsBefore.has(s.id)) {
      await request.delete(`api/sessions/${s.id}?token=${TOKEN}`);
    }
  }
  for (const b of booked) {
    await api(b.bob ? asBob : request, 'DELETE', `reservations/${b.id}`, b.bob ? BOB : TOKEN);
  }
  await asBob?.dispose();
  expect(errors, 'page errors, or console errors of ours').toEqual([]);
  await page?.close();
});

test('GET hosts lists both shares of the GPU; a third that does not fit is refused', async ({ request }) => {
  const hosts = (await api(request, 'GET', 'hosts')).body.hosts as { gpus: { id: string; shares?: { owner: string; share: number; memory_mib: number }[] }[] }[];
  const gpu = hosts.flatMap(h => h.gpus).find(g => g.id === GPU)!;
  const shares = (gpu.shares ?? []).map(s => [s.owner, s.share, s.memory_mib]).sort();
  expect(shares).toEqual([['bob', 0.25, 10240], [me, 0.5, 20480]].sort());
  // 0.25 + 0.5 held: another 0.5 would make 1.25 of the GPU
  const over = await api(asBob, 'POST', 'reservations', BOB, { title: 'too much', gpus: [GPU], share: 0.5, duration: '1h' });
  expect(over.status).toBe(409);
  expect(over.body.message).toContain(GPU);
});

test("the sidebar's row of the shared GPU lists its holders, their memory and use, and what is left", async () => {
  const shares = row().locator('.jp-gpuhive-shares');
  // The sampler sees the stand-in process within a poll or two; the panel then shows its use.
  await expect(async () => {
    await panel().getByRole('button', { name: 'Refresh now' }).click();
    await expect(shares).toHaveText('Shares: you 0.5 (20.0 GiB) uses 6.0 GiB · bob 0.25 (10.0 GiB) uses 0 MiB · free 0.25', { timeout: 2000 });
  }).toPass({ timeout: 60_000 });
  // The GPU is mine while I hold a share of it, though the server names bob's booking as its
  // reservation (before, the badge said "bob until …").
  await expect(row()).toHaveAttribute('data-state', 'mine');
  const badge = row().locator('.jp-gpuhive-badge');
  await expect(badge).toHaveText(/^my share until (\w{3} )?\d\d:\d\d$/);
  expect(await badge.evaluate(b => b.scrollWidth <= b.clientWidth), 'the badge is cut').toBe(true);
  await expect(row()).toHaveAttribute('title', /^gpu2:1: shared: you hold 0\.5 of it until .+; bob holds a share too$/);
  // Only the shareable GPU's row has a shares line.
  await expect(panel().locator('.jp-gpuhive-shares')).toHaveCount(1);
  // No label of the row overlaps another: the shares line has a line of its own.
  const overlaps = await row().evaluate(r => {
    const parts = Array.from(r.querySelectorAll('.jp-gpuhive-gpu-label, .jp-gpuhive-badge, .jp-gpuhive-usage, .jp-gpuhive-shares'));
    const rects = parts.map(p => ({ text: p.textContent, r: p.getBoundingClientRect() })).filter(p => p.r.width > 0);
    const found: string[] = [];
    for (let i = 0; i < rects.length; i++) {
      for (let j = i + 1; j < rects.length; j++) {
        const [a, b] = [rects[i].r, rects[j].r];
        if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) {
          found.push(`'${rects[i].text}' / '${rects[j].text}'`);
        }
      }
    }
    return found;
  });
  expect(overlaps).toEqual([]);
  await row().screenshot({ path: path.join(SHOTS, '50-shares-sidebar.png') });
});

test("the calendar opened from the sidebar draws both shares as parts of the GPU's lane", async ({ request }) => {
  test.setTimeout(240_000);
  await panel().getByRole('button', { name: 'Insert a calendar cell into the notebook' }).click();
  const source = 'widgets.calendar()';
  await expect(page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-InputArea-editor').first()).toContainText(source, { timeout: 60_000 });
  // The new notebook's kernel is up and the page connected to it.
  await expect
    .poll(
      async () => {
        const fresh = (await sessionIds(request)).filter(s => !sessionsBefore.has(s.id));
        return fresh.some(s => s.kernel?.execution_state === 'idle' && (s.kernel?.connections ?? 0) > 0);
      },
      { timeout: 90_000 }
    )
    .toBe(true);
  await runAll(page);
  const out = output(page, source);
  const figure = out.locator('.bqplot.figure');
  await expect(figure).toHaveCount(1, { timeout: 60_000 });
  await figure.scrollIntoViewIfNeeded();

  // gpu2:1's lane (from the lane axis' ticks) and the boxes drawn within it.
  const drawn = async () =>
    figure.evaluate((f, gpu) => {
      const axis = Array.from(f.querySelectorAll('g.axis')).find(a => (a.textContent ?? '').includes('gpu1:0'))!;
      const ticks = Array.from(axis.querySelectorAll('g.tick')).map(t => {
        const r = t.querySelector('line')!.getBoundingClientRect();
        return { text: (t.textContent ?? '').split(' · ')[0], y: r.top + r.height / 2 };
      });
      const i = ticks.findIndex(t => t.text === gpu);
      const lane = Math.abs(ticks[1].y - ticks[0].y);
      const marks = f.querySelectorAll('svg.svg-figure g[clip-path]');
      const boxes = Array.from(marks[2].querySelectorAll('g.curve path.line')).map(p => {
        const r = p.getBoundingClientRect();
        return { left: r.left, right: r.right, top: r.top, bottom: r.bottom };
      });
      const mid = ticks[i].y;
      const labels = Array.from(marks[3].querySelectorAll('text'))
        .filter(t => (t.textContent ?? '') !== '')
        .map(t => {
          const r = t.getBoundingClientRect();
          return { text: t.textContent ?? '', middle: (r.top + r.bottom) / 2 };
        })
        .filter(l => Math.abs(l.middle - mid) < lane / 2);
      // Share boxes only: whole bookings other specs ended on this GPU fill the lane's height.
      // Other specs' short bookings of this GPU, earlier today (an hour or two), are slivers
      // of the week: the two 24-hour shares are the widest boxes of the lane.
      const inLane = boxes.filter(b => b.bottom > mid - lane / 2 && b.top < mid + lane / 2 && b.bottom - b.top < 0.9 * lane);
      const widest = Math.max(0, ...inLane.map(b => b.right - b.left));
      const shares = inLane.filter(b => b.right - b.left > 0.5 * widest);
      return { lane, top: mid - lane / 2, bottom: mid + lane / 2, labels, parts: shares.sort((a, b) => a.bottom - a.top - (b.bottom - b.top)) };
    }, GPU);
  await expect.poll(async () => (await drawn()).parts.length, { timeout: 30_000 }).toBe(2);
  const { lane, top, bottom, labels, parts } = await drawn();
  const [quarter, half] = parts;
  // Each is its part of the lane: 0.5 twice the height of 0.25; stacked, not drawn over each other, inside the lane.
  expect((half.bottom - half.top) / (quarter.bottom - quarter.top)).toBeGreaterThan(1.7);
  expect((half.bottom - half.top) / (quarter.bottom - quarter.top)).toBeLessThan(2.3);
  expect(half.bottom - half.top).toBeLessThan(0.55 * lane);
  expect(quarter.bottom <= half.top + 0.5 || half.bottom <= quarter.top + 0.5, 'the shares are drawn over each other').toBe(true);
  for (const b of parts) {
    expect(b.top).toBeGreaterThanOrEqual(top - 0.5);
    expect(b.bottom).toBeLessThanOrEqual(bottom + 0.5);
  }
  // Same start and end: the same span of time.
  expect(Math.abs(quarter.left - half.left)).toBeLessThan(1);
  expect(Math.abs(quarter.right - half.right)).toBeLessThan(1);
  // The half's label lies in the half's band (the quarter is too thin for one: its tooltip has
  // it). Before, the first share's label ('bob: …') was drawn in the lane's middle: over my half.
  expect(labels.map(l => l.text)).toEqual([expect.stringMatching(new RegExp(`^${me}: my share`))]);
  expect(labels[0].middle).toBeGreaterThan(half.top);
  expect(labels[0].middle).toBeLessThan(half.bottom);

  // Hovering each box shows whose share it is, and how much ("Pick a box": the brush takes the mouse otherwise).
  await out.getByRole('button', { name: 'Pick a box' }).click();
  const tip = page.locator('.bqplot_mark_tooltip:visible');
  for (const [box, label] of [
    [quarter, 'bob: bob share · 0.25 GPU'],
    [half, `${me}: my share · 0.5 GPU`]
  ] as const) {
    await page.mouse.move((box.left + box.right) / 2, (box.top + box.bottom) / 2, { steps: 3 });
    await expect(tip).toHaveCount(1);
    await expect(tip).toContainText(label);
    await page.mouse.move(0, 0);
  }
  await out.getByRole('button', { name: 'Select time' }).click();
  await page.setViewportSize({ width: 1280, height: 1600 });
  await out.screenshot({ path: path.join(SHOTS, '51-shares-calendar.png') });
  await page.setViewportSize({ width: 1280, height: 900 });
});
