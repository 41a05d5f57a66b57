import { IGpu, bookableUnits, formatUsage, gpuState } from '../model';

const NOW = new Date('2026-11-22T10:00:00Z');

function unit(id: string, extra: Partial<IGpu> = {}): IGpu {
  return { id, host: 'gpu1', index: 0, processes: [], reservation: null, next_reservation: null, ...extra };
}

describe('MIG slices in the sidebar', () => {
  const slice = unit('gpu1:0/mig5', {
    kind: 'slice',
    profile: '2g.20gb',
    util: null,
    util_label: 'not reported',
    mem_used_mib: 700,
    mem_total_mib: 19968,
    reservation: { id: 3, owner: 'bob', title: 'ft', start: '2026-11-22T09:00:00Z', end: '2026-11-22T12:00:00Z' }
  });
  const whole = unit('gpu1:0', { util: null, util_label: 'not reported', slices: [slice] });

  it('lists each GPU followed by its slices', () => {
    expect(bookableUnits([whole, unit('gpu1:1')]).map(g => g.id)).toEqual(['gpu1:0', 'gpu1:0/mig5', 'gpu1:1']);
  });
  it('says utilisation is not reported, never 0%', () => {
    expect(formatUsage(slice)).toBe('utilization not reported · 700 MiB/19.5 GiB');
    expect(formatUsage(slice)).not.toContain('0%');
  });
  it('shows who holds a slice', () => {
    expect(gpuState(slice, 'up', 'alice', NOW)).toMatchObject({ kind: 'reserved' });
  });
});
