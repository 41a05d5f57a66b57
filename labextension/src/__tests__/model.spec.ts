import {
  IGpu,
  IHost,
  IReservation,
  activeReservations,
  compactGpus,
  formatCountdown,
  formatMemory,
  formatTime,
  formatUsage,
  gpuState,
  hostGoneText,
  isRunning,
  reservationCountdown,
  summarize,
  vendorLabel,
  violationNotes
} from '../model';
import { isJobActive, jobPreemptionText, jobQueueText, jobStatusText, jobWaitText, jobsToShow } from '../jobs';

// jest.config.js sets TZ=UTC, so local times below are UTC.
const NOW = new Date('2026-11-22T10:00:00Z');

function gpu(extra: Partial<IGpu> = {}): IGpu {
  return { id: 'gpu1:0', host: 'gpu1', index: 0, processes: [], reservation: null, next_reservation: null, ...extra };
}

const brief = (owner: string, start: string, end: string) => ({ id: 7, owner, title: 'sweep', start, end });

describe('formatTime', () => {
  it('shows only the time today', () => {
    expect(formatTime('2026-11-22T14:30:00Z', NOW)).toBe('14:30');
  });
  it('adds the weekday within a week', () => {
    expect(formatTime('2026-11-24T09:05:00Z', NOW)).toBe('Tue 09:05');
  });
  it('shows the date further away', () => {
    expect(formatTime('2026-12-24T09:05:00Z', NOW)).toBe('2026-12-24 09:05');
  });
  it('honours the offset of the ISO string', () => {
    expect(formatTime('2026-11-22T14:30:00+02:00', NOW)).toBe('12:30');
  });
  it('returns garbage unchanged', () => {
    expect(formatTime('soon', NOW)).toBe('soon');
  });
});

describe('formatCountdown', () => {
  it.each([
    [0, '0s'],
    [-5000, '0s'],
    [12_000, '12s'],
    [4 * 60_000 + 9_000, '4m 09s'],
    [65 * 60_000, '1h 05m'],
    [(2 * 24 + 3) * 3600_000 + 59_000, '2d 3h']
  ])('%d ms → %s', (ms, text) => {
    expect(formatCountdown(ms)).toBe(text);
  });
});

describe('reservationCountdown', () => {
  it('counts to the start, then to the end', () => {
    const r = brief('me', '2026-11-22T10:30:00Z', '2026-11-22T12:00:00Z');
    expect(reservationCountdown(r, NOW)).toBe('starts in 30m 00s');
    expect(reservationCountdown(r, new Date('2026-11-22T11:00:00Z'))).toBe('ends in 1h 00m');
    expect(reservationCountdown(r, new Date('2026-11-22T12:00:00Z'))).toBe('ended');
  });
});

describe('memory and usage', () => {
  it('formats MiB and GiB', () => {
    expect(formatMemory(512)).toBe('512 MiB');
    expect(formatMemory(40960)).toBe('40.0 GiB');
    expect(formatMemory(null)).toBe('–');
  });
  it('joins utilisation and memory, empty when unmeasured', () => {
    expect(formatUsage(gpu({ util: 37.4, mem_used_mib: 1229, mem_total_mib: 40960 }))).toBe('37% · 1.2 GiB/40.0 GiB');
    expect(formatUsage(gpu())).toBe('');
  });
});

describe('gpuState', () => {
  it('is down when the host is down', () => {
    const s = gpuState(gpu({ reservation: brief('me', '2026-11-22T09:00:00Z', '2026-11-22T11:00:00Z') }), 'down', 'me', NOW);
    expect(s.kind).toBe('down');
    expect(s.detail).toContain('host gpu1 is down');
  });
  it('is mine with the end time', () => {
    const s = gpuState(gpu({ reservation: brief('me', '2026-11-22T09:00:00Z', '2026-11-22T11:00:00Z') }), 'up', 'me', NOW);
    expect(s).toMatchObject({ kind: 'mine', label: 'mine until 11:00' });
  });
  it('names who reserved it until when', () => {
    const s = gpuState(gpu({ reservation: brief('bob', '2026-11-22T09:00:00Z', '2026-11-22T11:00:00Z') }), 'up', 'me', NOW);
    expect(s).toMatchObject({ kind: 'reserved', label: 'bob until 11:00' });
    expect(s.detail).toContain("reserved by bob ('sweep') until 11:00");
  });
  it('notes foreign processes on my reservation', () => {
    const s = gpuState(
      gpu({
        reservation: brief('me', '2026-11-22T09:00:00Z', '2026-11-22T11:00:00Z'),
        processes: [{ pid: 1, user: 'me' }, { pid: 2, user: 'eve' }]
      }),
      'up',
      'me',
      NOW
    );
    expect(s.kind).toBe('mine');
    expect(s.detail).toContain('processes of eve running');
  });
  it('is busy with whose processes when not reserved', () => {
    const s = gpuState(gpu({ processes: [{ pid: 1, user: 'alice' }, { pid: 2, user: 'alice' }, { pid: 3, user: null }] }), 'up', 'me', NOW);
    expect(s).toMatchObject({ kind: 'busy', label: 'busy: alice, pid 3' });
    expect(s.detail).toContain('3 processes');
  });
  it('is busy while a job of the cluster\'s scheduler holds it, with no process seen', () => {
    const s = gpuState(gpu({ held_by_engine: 'a Slurm job' }), 'up', 'me', NOW);
    expect(s).toMatchObject({ kind: 'busy', label: 'busy: a Slurm job' });
    expect(s.detail).toBe('gpu1:0: not reserved, held by a Slurm job');
    // a booking still shows first; no engine job: free
    const booked = gpuState(gpu({ held_by_engine: 'a Slurm job', reservation: brief('bob', '2026-11-22T09:00:00Z', '2026-11-22T11:00:00Z') }), 'up', 'me', NOW);
    expect(booked.kind).toBe('reserved');
    expect(gpuState(gpu({ held_by_engine: null }), 'up', 'me', NOW).kind).toBe('free');
  });
  it('is free, until the next reservation', () => {
    expect(gpuState(gpu(), 'up', 'me', NOW)).toMatchObject({ kind: 'free', label: 'free' });
    const s = gpuState(gpu({ next_reservation: brief('bob', '2026-11-22T13:00:00Z', '2026-11-22T14:00:00Z') }), 'up', 'me', NOW);
    expect(s).toMatchObject({ kind: 'free', label: 'free until 13:00' });
  });
  it('has no data while the host state is unknown', () => {
    expect(gpuState(gpu(), 'unknown', 'me', NOW).kind).toBe('unknown');
  });
});

describe('summaries and lists', () => {
  const hosts: IHost[] = [
    { name: 'gpu1', state: 'up', gpus: [gpu(), gpu({ id: 'gpu1:1', reservation: brief('me', '2026-11-22T09:00:00Z', '2026-11-22T11:00:00Z') })] },
    { name: 'gpu2', state: 'down', gpus: [gpu({ id: 'gpu2:0', host: 'gpu2' })] }
  ];
  it('counts kinds', () => {
    expect(summarize(hosts, 'me', NOW)).toEqual({ free: 1, mine: 1, reserved: 0, busy: 0, failed: 0, drained: 0, down: 1, unknown: 0 });
  });
  const res = (id: number, start: string, end: string, extra: Partial<IReservation> = {}): IReservation => ({
    id,
    owner: 'me',
    title: `r${id}`,
    start,
    end,
    gpus: ['gpu1:0'],
    status: 'upcoming',
    ...extra
  });
  it('keeps running and upcoming reservations, soonest first', () => {
    const list = [
      res(1, '2026-11-22T12:00:00Z', '2026-11-22T13:00:00Z'),
      res(2, '2026-11-22T09:00:00Z', '2026-11-22T11:00:00Z', { status: 'active' }),
      res(3, '2026-11-22T08:00:00Z', '2026-11-22T09:00:00Z', { status: 'ended' }),
      res(4, '2026-11-22T12:00:00Z', '2026-11-22T13:00:00Z', { status: 'cancelled', cancelled_at: '2026-11-22T09:00:00Z' })
    ];
    expect(activeReservations(list, NOW).map(r => r.id)).toEqual([2, 1]);
    expect(isRunning(list[1], NOW)).toBe(true);
    expect(isRunning(list[0], NOW)).toBe(false);
  });
  it('knows which jobs can be stopped', () => {
    expect(isJobActive({ id: 1, name: 'a', status: 'running' })).toBe(true);
    expect(isJobActive({ id: 1, name: 'a', status: 'Queued' })).toBe(true);
    expect(isJobActive({ id: 1, name: 'a', status: 'finished' })).toBe(false);
  });
  it('compacts GPU ids per host', () => {
    expect(compactGpus(['gpu1:1', 'gpu2:3', 'gpu1:0', 'gpu1:10'])).toBe('gpu1:0,1,10 gpu2:3');
  });
});

describe('jobs', () => {
  const job = (id: number, status: string, extra: Record<string, unknown> = {}) => ({ id, name: `j${id}`, status, ...extra });
  it('describes status, queue and GPUs', () => {
    expect(jobStatusText(job(1, 'running', { gpus: ['gpu1:0', 'gpu1:1'] }))).toBe('running · 2 GPUs');
    expect(jobStatusText(job(2, 'pending', { queued: true, gpus: [] }))).toBe('pending · queued');
    expect(jobStatusText(job(3, 'succeeded'))).toBe('succeeded');
  });
  it("says where a waiting queued job stands in the queue and why it waits (GET jobs' place and waiting_for)", () => {
    const waiting = (place: unknown, why: unknown = 'gpu1:3 is reserved until 11:00') =>
      job(7, 'pending', { queued: true, place, waiting_for: why });
    expect(jobQueueText(waiting(1))).toBe('next in the queue · gpu1:3 is reserved until 11:00');
    expect(jobQueueText(waiting(2, 'waiting for 8 free GPUs on one host'))).toBe(
      '2nd in the queue · waiting for 8 free GPUs on one host'
    );
    expect(jobQueueText(waiting(3))).toMatch(/^3rd in the queue · /);
    expect(jobQueueText(waiting(11))).toMatch(/^11th in the queue · /);
    expect(jobQueueText(waiting(22, null))).toBe('22nd in the queue');
    // not placed yet by the queue, or not waiting: nothing to say
    expect(jobQueueText(waiting(null))).toBe('');
    expect(jobQueueText(job(8, 'running', { queued: true, place: 1, waiting_for: 'x' }))).toBe('');
    expect(jobQueueText(job(9, 'pending'))).toBe('');
  });
  it("gives a waiting queued job's planned start (GET jobs' estimated_start) in local time", () => {
    const waiting = (start: unknown, why: unknown = 'gpu1:3 is reserved') =>
      job(7, 'pending', { queued: true, place: 1, estimated_start: start, waiting_for: why });
    expect(jobQueueText(waiting('2026-11-24T14:00:00Z'), NOW)).toBe(
      'next in the queue · starts ~Tue 14:00 · gpu1:3 is reserved'
    );
    expect(jobQueueText(waiting('2026-11-22T10:30:00Z', null), NOW)).toBe('next in the queue · starts ~10:30');
    expect(jobQueueText(waiting(null), NOW)).toBe('next in the queue · gpu1:3 is reserved'); // not known
  });
  it('says how often a job was preempted, the service it had and what it lost', () => {
    const preempted = (n: unknown, had: unknown = 1.5, lost: unknown = 0.123) =>
      job(7, 'pending', { queued: true, preemptions: n, service_gpu_h: had, lost_gpu_h: lost });
    expect(jobPreemptionText(preempted(2))).toBe('preempted 2× · had 1.5 GPU-h, lost 0.12');
    expect(jobPreemptionText(preempted(1, 12.345, 12.345))).toBe('preempted 1× · had 12.3 GPU-h, lost 12.3');
    expect(jobPreemptionText(preempted(1, null, null))).toBe('preempted 1×');
    expect(jobPreemptionText(preempted(0))).toBe('');
    expect(jobPreemptionText(job(8, 'running'))).toBe('');
    const both = job(9, 'pending', {
      queued: true, place: 2, estimated_start: '2026-11-22T11:00:00Z', waiting_for: 'waiting for 2 free GPUs',
      preemptions: 1, service_gpu_h: 0.5, lost_gpu_h: 0.5
    });
    expect(jobWaitText(both, NOW)).toBe(
      '2nd in the queue · starts ~11:00 · waiting for 2 free GPUs · preempted 1× · had 0.5 GPU-h, lost 0.5'
    );
    expect(jobWaitText(job(10, 'succeeded'), NOW)).toBe('');
  });
  it('lists active jobs first, then the latest finished ones', () => {
    const jobs = [
      job(1, 'succeeded', { updated_at: '2026-11-22T08:00:00Z' }),
      job(2, 'running', { updated_at: '2026-11-22T07:00:00Z' }),
      job(3, 'failed', { updated_at: '2026-11-22T09:00:00Z' }),
      job(4, 'pending', { updated_at: '2026-11-22T09:30:00Z' }),
      job(5, 'stopped', { updated_at: '2026-11-22T06:00:00Z' })
    ];
    expect(jobsToShow(jobs, 2).map(j => j.id)).toEqual([4, 2, 3, 1]);
  });
});

describe('hostGoneText', () => {
  it('names the hosts that are no longer configured, in words a user reads', () => {
    expect(hostGoneText(['ws'])).toBe(
      '⚠ host gone: ws is no longer configured; these GPUs are not monitored and cannot run kernels'
    );
    expect(hostGoneText(['a', 'b'])).toContain('host gone: a, b are no longer configured');
  });
});

describe('violationNotes', () => {
  const gpu = (processes: IGpu['processes']): IGpu => ({ id: 'gpu3:1', host: 'gpu3', index: 1, processes });

  it('marks each process that breaks a reservation, for the offender and the holder', () => {
    const marked = gpu([
      { pid: 41, user: 'alice', command: 'python train.py' },
      { pid: 42, user: 'me', command: '/usr/bin/sleep 600', violation: { kind: 'foreign', holder: 'alice' } }
    ]);
    expect(violationNotes(marked, 'me')).toEqual(['⚠ Violation: Your process 42 (sleep) runs on alice’s reservation']);
    expect(violationNotes(marked, 'alice')).toEqual(['⚠ Violation: me’s process 42 (sleep) runs on your reservation']);
  });

  it('names the container a violating process runs in', () => {
    const boxed = gpu([
      {
        pid: 43,
        user: 'root',
        command: 'sleep 600',
        violation: { kind: 'foreign', holder: 'alice' },
        container: { id: 'ab'.repeat(32), name: 'bobs-run', image: 'lab/torch:2', source: 'unattributed' }
      }
    ]);
    expect(violationNotes(boxed, 'alice')).toEqual([
      '⚠ Violation: root’s process 43 (sleep) in container bobs-run (lab/torch:2) runs on your reservation'
    ]);
  });

  it('says nothing for processes without a violation', () => {
    expect(violationNotes(gpu([{ pid: 1, user: 'me', command: 'python' }]), 'me')).toEqual([]);
    expect(violationNotes(gpu(undefined), 'me')).toEqual([]);
  });
});

describe('vendorLabel', () => {
  const host = (name: string, vendor?: string): IHost => ({ name, state: 'up', gpus: [], ...(vendor ? { vendor } : {}) });

  it('names each host\'s vendor where the site mixes vendors', () => {
    const hosts = [host('nv1', 'nvidia'), host('am1', 'amd'), host('old')];
    expect(hosts.map(h => vendorLabel(hosts, h))).toEqual(['NVIDIA', 'AMD', 'NVIDIA']);
  });

  it('says nothing on a site of one vendor', () => {
    const hosts = [host('am1', 'amd'), host('am2', 'amd')];
    expect(hosts.map(h => vendorLabel(hosts, h))).toEqual(['', '']);
    expect(vendorLabel([host('gpu1')], host('gpu1'))).toBe('');
  });
});
