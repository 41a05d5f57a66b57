import { IGpu, formatTime, gpuState } from '../model';
import { shareState, shareText, sharesOf } from '../shares';

function gpu(extra: Record<string, unknown> = {}): IGpu {
  return { id: 'gpu1:3', host: 'gpu1', index: 3, processes: [], reservation: null, next_reservation: null, ...extra } as IGpu;
}

describe('shareText', () => {
  it('lists each holder (mine first, several shares summed), their use and what is free', () => {
    const shares = [
      { owner: 'bob', share: 0.5, memory_mib: 40960 },
      { owner: 'ann', share: 0.125, memory_mib: 10240 },
      { owner: 'ann', share: 0.125, memory_mib: 10240 }
    ];
    const processes = [
      { pid: 1, user: 'ann', used_memory_mib: 6144 },
      { pid: 2, user: 'bob', used_memory_mib: 41984 },
      { pid: 3, user: 'bob', used_memory_mib: 0 }
    ];
    expect(shareText(gpu({ shares, processes }), 'ann')).toBe(
      'Shares: you 0.25 (20.0 GiB) uses 6.0 GiB · bob 0.5 (40.0 GiB) uses 41.0 GiB, over its share · free 0.25'
    );
  });

  it('says nothing for GPUs without shares, or booked whole', () => {
    expect(shareText(gpu(), 'ann')).toBe('');
    expect(shareText(gpu({ shares: [{ owner: 'bob', share: 1 }] }), 'ann')).toBe('');
    expect(sharesOf(gpu({ shares: null }))).toEqual([]);
  });

  it('leaves the size out when the memory is unknown', () => {
    expect(shareText(gpu({ shares: [{ owner: 'bob', share: 0.5, memory_mib: null }] }), 'ann')).toBe(
      'Shares: bob 0.5 uses 0 MiB · free 0.5'
    );
  });
});

describe('shareState', () => {
  const now = new Date('2027-03-01T09:00:00Z');
  const bobs = { id: 1, owner: 'bob', title: 'nb', start: '2027-03-01T08:00:00Z', end: '2027-03-01T20:00:00Z' };
  const shares = [
    { ...bobs, share: 0.25, memory_mib: 10240 },
    { id: 2, owner: 'ann', title: 'mine', start: '2027-03-01T08:30:00Z', end: '2027-03-01T18:00:00Z', share: 0.5, memory_mib: 20480 }
  ];

  it("is mine when I hold a share, though the GPU's named reservation is another holder's", () => {
    const shared = gpu({ shares, reservation: bobs });
    expect(gpuState(shared, 'up', 'ann', now).label).toMatch(/^bob until/); // what the row said before
    const state = shareState(gpuState(shared, 'up', 'ann', now), shared, 'ann', now);
    const until = formatTime('2027-03-01T18:00:00Z', now);
    expect(state).toEqual({ kind: 'mine', label: `my share until ${until}`, detail: `gpu1:3: shared: you hold 0.5 of it until ${until}; bob holds a share too` });
  });

  it("leaves other states alone: another's share, my own named booking, a GPU without shares", () => {
    const shared = gpu({ shares, reservation: bobs });
    const bobState = gpuState(shared, 'up', 'carol', now);
    expect(shareState(bobState, shared, 'carol', now)).toBe(bobState);
    const mineNamed = gpu({ shares, reservation: { ...bobs, owner: 'ann' } });
    const mine = gpuState(mineNamed, 'up', 'ann', now);
    expect(shareState(mine, mineNamed, 'ann', now)).toBe(mine);
    const whole = gpu({ reservation: bobs });
    const reserved = gpuState(whole, 'up', 'ann', now);
    expect(shareState(reserved, whole, 'ann', now)).toBe(reserved);
  });
});
