import { HiveApi } from '../api';
import { IGpuHealth, drainAction, fetchHealth, healthByGpu, healthNotes, setDrain } from '../health';
import { fake } from './fetcher';

const ok: IGpuHealth = { gpu: 'gpu1:0', state: 'ok', reasons: [], drained: false };
const failed: IGpuHealth = {
  gpu: 'gpu1:3',
  state: 'failed',
  reasons: ["row remapping failed: the GPU's memory needs service"],
  drained: false
};

describe('healthNotes', () => {
  it('says nothing about a healthy GPU, or one the server did not report', () => {
    expect(healthNotes(ok)).toEqual([]);
    expect(healthNotes(undefined)).toEqual([]);
  });

  it('names the reasons of a failed or degraded GPU', () => {
    expect(healthNotes(failed)).toEqual([
      { kind: 'failed', text: "Failed: row remapping failed: the GPU's memory needs service. Not bookable." }
    ]);
    const hot = { ...ok, state: 'degraded', reasons: ['95 C, at or above the slowdown threshold of 89 C', '3 memory page(s) retired'] };
    expect(healthNotes(hot)[0]).toEqual({
      kind: 'degraded',
      text: 'Degraded: 95 C, at or above the slowdown threshold of 89 C; 3 memory page(s) retired.'
    });
  });

  it('says who drained a GPU and why, after its health', () => {
    const drained = { ...failed, drained: true, drained_by: 'ada', drain_reason: 'fan swap' };
    expect(healthNotes(drained).map(n => n.kind)).toEqual(['failed', 'drained']);
    expect(healthNotes(drained)[1].text).toBe('Drained for maintenance by ada: fan swap. Not bookable.');
    expect(healthNotes({ ...ok, drained: true })[0].text).toBe('Drained for maintenance. Not bookable.');
  });
});

describe('drainAction', () => {
  it('offers admins drain or undrain on whole GPUs only', () => {
    expect(drainAction(ok, true, false)).toBe('drain');
    expect(drainAction({ ...ok, drained: true }, true, false)).toBe('undrain');
    expect(drainAction(ok, false, false)).toBeNull();
    expect(drainAction(ok, true, true)).toBeNull();
    expect(drainAction(undefined, true, false)).toBeNull();
  });
});

describe('health API', () => {
  it('reads GET health by GPU and posts a drain with its reason', async () => {
    const { fetcher, calls } = fake({
      'GET http://x/gpuhive/api/health': [200, { gpus: [ok, failed] }],
      'POST http://x/gpuhive/api/health/drain': [200, { ...ok, drained: true, drained_by: 'ada' }]
    });
    const api = new HiveApi('http://x/', fetcher);
    const byGpu = healthByGpu(await fetchHealth(api));
    expect(byGpu.get('gpu1:3')?.state).toBe('failed');
    expect((await setDrain(api, 'gpu1:0', true, '  fan swap ')).drained).toBe(true);
    expect(JSON.parse(calls[1].body!)).toEqual({ gpu: 'gpu1:0', drain: true, reason: 'fan swap' });
    await setDrain(api, 'gpu1:0', false, 'ignored');
    expect(JSON.parse(calls[2].body!)).toEqual({ gpu: 'gpu1:0', drain: false });
  });
});
