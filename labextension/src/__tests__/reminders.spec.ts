import { IReservation } from '../model';
import { dueReminders } from '../reminders';

const r = (extra: Partial<IReservation> = {}): IReservation => ({
  id: 1,
  owner: 'me',
  title: 'sweep',
  start: '2026-11-22T10:00:00Z',
  end: '2026-11-22T12:00:00Z',
  gpus: ['gpu1:0', 'gpu1:1'],
  status: 'upcoming',
  created_at: '2026-11-21T09:00:00Z',
  ...extra
});
const at = (iso: string) => new Date(iso);

describe('dueReminders', () => {
  it('fires "started" once when the start passes', () => {
    const fired = new Set<string>();
    const got = dueReminders([r()], at('2026-11-22T09:59:50Z'), at('2026-11-22T10:00:05Z'), fired);
    expect(got.map(x => x.kind)).toEqual(['started']);
    expect(got[0].message).toBe("Your reservation 'sweep' on gpu1:0, gpu1:1 has started (until 12:00).");
    expect(dueReminders([r()], at('2026-11-22T09:59:50Z'), at('2026-11-22T10:00:05Z'), fired)).toEqual([]);
  });
  it('fires "ends in 10 minutes"', () => {
    const got = dueReminders([r()], at('2026-11-22T11:49:50Z'), at('2026-11-22T11:50:05Z'), new Set());
    expect(got.map(x => x.kind)).toEqual(['ends-soon']);
    expect(got[0].message).toContain('ends in 10 minutes (12:00)');
  });
  it('stays quiet outside the window, for cancelled ones and for one just made here', () => {
    expect(dueReminders([r()], at('2026-11-22T10:30:00Z'), at('2026-11-22T10:30:15Z'), new Set())).toEqual([]);
    const cancelled = r({ status: 'cancelled', cancelled_at: '2026-11-22T09:00:00Z' });
    expect(dueReminders([cancelled], at('2026-11-22T09:59:50Z'), at('2026-11-22T10:00:05Z'), new Set())).toEqual([]);
    const quick = r({ created_at: '2026-11-22T09:59:59Z' });
    expect(dueReminders([quick], at('2026-11-22T09:59:50Z'), at('2026-11-22T10:00:05Z'), new Set())).toEqual([]);
  });
  it('fires again for an extended reservation', () => {
    const fired = new Set<string>();
    dueReminders([r()], at('2026-11-22T11:49:50Z'), at('2026-11-22T11:50:05Z'), fired);
    const extended = r({ end: '2026-11-22T13:00:00Z' });
    expect(dueReminders([extended], at('2026-11-22T12:49:50Z'), at('2026-11-22T12:50:05Z'), fired)).toHaveLength(1);
  });
});
