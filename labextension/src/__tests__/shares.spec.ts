import { IGpu } from '../model';
import { shareText, sharesOf } from '../shares';

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
