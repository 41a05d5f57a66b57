import {
  KERNEL_SCHEMA,
  canOpenNotebook,
  compact,
  kernelCountdown,
  endedStatus,
  kernelNotice,
  nameKernel,
  notYetReason,
  reservationOfSpec,
  specName,
  switchRequest
} from '../kernels';
import { IReservation } from '../model';

const res = (extra: Partial<IReservation> = {}): IReservation => ({
  id: 12,
  owner: 'alice',
  title: 'train',
  start: '2026-11-22T10:00:00Z',
  end: '2026-11-22T12:00:00Z',
  gpus: ['gpu1:0', 'gpu1:1'],
  status: 'active',
  ...extra
});
const at = (iso: string) => new Date(iso);

describe('kernelspec names', () => {
  it('round-trips a reservation id and refuses other kernels', () => {
    expect(specName(12)).toBe('gpuhive-r12');
    expect(reservationOfSpec('gpuhive-r12')).toBe(12);
    expect(reservationOfSpec('python3')).toBeNull();
    expect(reservationOfSpec('gpuhive-r12x')).toBeNull();
    expect(reservationOfSpec(undefined)).toBeNull();
  });
});

describe('canOpenNotebook', () => {
  it('offers a running reservation only', () => {
    expect(canOpenNotebook(res(), at('2026-11-22T11:00:00Z'))).toBe(true);
    expect(canOpenNotebook(res(), at('2026-11-22T09:00:00Z'))).toBe(false);
    expect(canOpenNotebook(res(), at('2026-11-22T12:00:00Z'))).toBe(false);
    expect(canOpenNotebook(res({ cancelled_at: '2026-11-22T10:30:00Z' }), at('2026-11-22T11:00:00Z'))).toBe(false);
  });

  it('says from when an upcoming one can have a kernel', () => {
    expect(notYetReason(res(), at('2026-11-22T09:00:00Z'))).toBe('A kernel on these GPUs can start from 10:00.');
    expect(notYetReason(res(), at('2026-11-22T13:00:00Z'))).toBe('This reservation has ended.');
    expect(notYetReason(res(), at('2026-11-22T11:00:00Z'))).toBeNull();
  });
});

describe('kernelCountdown', () => {
  it('counts down, turns urgent within the warning, and says when it ended', () => {
    const end = '2026-11-22T12:00:00Z';
    const ok = kernelCountdown(['gpu1:0', 'gpu1:1'], end, at('2026-11-22T10:54:30Z'), 10, 'extend');
    expect(ok.text).toBe('gpu1:0,1 · 1h 05m left');
    expect(ok.urgency).toBe('ok');
    expect(ok.title).toContain('At the end: extend if free.');
    const soon = kernelCountdown(['gpu1:0'], end, at('2026-11-22T11:55:51Z'), 10);
    expect(soon.text).toBe('gpu1:0 · 4m 09s left');
    expect(soon.urgency).toBe('soon');
    const over = kernelCountdown(['gpu1:0'], end, at('2026-11-22T12:00:01Z'), 10, 'warn');
    expect(over.text).toBe('gpu1:0 · reservation ended');
    expect(over.urgency).toBe('ended');
  });

  it('compacts GPUs by host', () => {
    expect(compact(['gpu1:0', 'gpu1:1', 'gpu2:3'])).toBe('gpu1:0,1 gpu2:3');
  });
});

describe('kernelNotice', () => {
  const warning = {
    schema_id: KERNEL_SCHEMA,
    kind: 'warning',
    kernel_id: 'k1',
    owner: 'alice',
    message: 'gpuhive: reservation 12 on gpu1:0 ends at 12:00 UTC; then this kernel will shut down.'
  };

  it('warns the owner with a line for the running cell', () => {
    const notice = kernelNotice(warning, 'alice', new Set());
    expect(notice?.level).toBe('warning');
    expect(notice?.line).toContain('reservation 12 on gpu1:0 ends');
  });

  it('ignores other schemas and other users', () => {
    expect(kernelNotice({ ...warning, schema_id: 'other' }, 'alice', new Set())).toBeNull();
    expect(kernelNotice(warning, 'bob', new Set())).toBeNull();
    expect(kernelNotice(warning, 'bob', new Set(['k1']))).not.toBeNull(); // an admin's open notebook
  });

  it('reports the end action; a failed one as an error', () => {
    const ended = { ...warning, kind: 'ended', action: 'shutdown', ok: true, message: 'shut down' };
    expect(kernelNotice(ended, 'alice', new Set())?.level).toBe('warning');
    expect(kernelNotice(ended, 'alice', new Set())?.line).toBeNull();
    expect(kernelNotice({ ...ended, ok: false }, 'alice', new Set())?.level).toBe('error');
  });
});

describe('switchRequest', () => {
  it('accepts a reservation kernel and refuses anything else', () => {
    expect(switchRequest({ kernel_name: 'gpuhive-r12', reservation_id: 12 })).toEqual({
      kernel_name: 'gpuhive-r12',
      reservation_id: 12,
      display_name: undefined
    });
    expect(switchRequest({ kernel_name: 'python3', reservation_id: 12 })).toBeNull();
    expect(switchRequest({ kernel_name: 'gpuhive-r12', reservation_id: 13 })).toBeNull();
    expect(switchRequest(null)).toBeNull();
  });
});

describe('the end of a reservation, in words', () => {
  const id = '3f2a9c1e-7b4d-4e0a-9c6f-2b8d1e5a7c90';
  const ended = {
    schema_id: KERNEL_SCHEMA,
    kind: 'ended',
    kernel_id: id,
    reservation_id: 7,
    owner: 'alice',
    action: 'shutdown',
    ok: true,
    message: `Reservation 7 ended at 15:00: kernel ${id} was shut down.`
  };

  it('names the notebook, not the kernel UUID', () => {
    const notice = kernelNotice(ended, 'alice', new Set([id]), new Map([[id, 'work/train.ipynb']]));
    expect(notice?.message).toBe('Reservation 7 ended at 15:00: the kernel of train.ipynb was shut down.');
    expect(nameKernel(ended.message, id, null)).toBe('Reservation 7 ended at 15:00: kernel 3f2a9c1e was shut down.');
  });

  it('says in the status bar why the kernel is gone', () => {
    const shown = endedStatus(ended, ['gpu2:0', 'gpu2:1']);
    expect(shown.text).toBe('gpu2:0,1 · reservation 7 ended, kernel shut down');
    expect(shown.urgency).toBe('ended');
    expect(endedStatus({ ...ended, action: 'interrupt' }, []).text).toBe('GPUs · reservation 7 ended, cell interrupted');
    expect(endedStatus({ ...ended, ok: false }, ['gpu1:0']).text).toBe('gpu1:0 · reservation 7 ended, could not shut the kernel down');
  });
});
