/**
 * Issue #48, the sidebar's model: a failed or drained GPU is never free (state, summary count,
 * selectable); my own (preemptible) job on a GPU is mine, not a red "busy"; a reclaim shows at
 * once; a violation going on when a window opens gets its notice, once.
 */
import { IGpuHealth, healthyState, selectable } from '../health';
import { ToastBoard, eventToast, openViolations } from '../events';
import { FakeNotices } from './notices';
import { jobGpus, jobsByGpu, myJobText } from '../jobs';
import { IReclaimSent, loanView, pruneReclaims } from '../lending';
import { IGpu, IHost, gpuState, summarize, summaryText } from '../model';

const NOW = new Date('2026-11-22T10:00:00Z');

function gpu(id: string, extra: Partial<IGpu> = {}): IGpu {
  return { id, host: id.split(':')[0], index: Number(id.split(':')[1]), processes: [], ...extra };
}

const failed: IGpuHealth = { gpu: 'gpu1:2', state: 'failed', reasons: ['uncorrectable ECC errors'], drained: false };
const drained: IGpuHealth = { gpu: 'gpu1:3', state: 'ok', reasons: [], drained: true, drained_by: 'ada', drain_reason: 'fan swap' };
const health = new Map([failed, drained].map(h => [h.gpu, h]));

describe('a failed or drained GPU is never free', () => {
  const next = { id: 1, owner: 'bob', title: 'b', start: '2026-11-22T13:00:00Z', end: '2026-11-22T14:00:00Z' };
  it('its state says failed or drained, with the reason, and it cannot be selected', () => {
    const s = healthyState(gpuState(gpu('gpu1:2', { next_reservation: next }), 'up', 'me', NOW), failed);
    expect(s.kind).toBe('failed');
    expect(s.label).toBe('failed');
    expect(s.label).not.toContain('free');
    expect(s.detail).toBe('gpu1:2: failed: uncorrectable ECC errors; it cannot be booked');
    expect(selectable(s)).toBe(false);
    const d = healthyState(gpuState(gpu('gpu1:3'), 'up', 'me', NOW), drained);
    expect(d).toMatchObject({ kind: 'drained', label: 'drained' });
    expect(d.detail).toContain('drained for maintenance by ada (fan swap)');
    expect(selectable(d)).toBe(false);
  });
  it('keeps who holds it after the word', () => {
    const held = { id: 2, owner: 'alice', title: 'a', start: '2026-11-22T09:00:00Z', end: '2026-11-22T11:00:00Z' };
    const s = healthyState(gpuState(gpu('gpu1:2', { reservation: held }), 'up', 'me', NOW), failed);
    expect(s).toMatchObject({ kind: 'failed', label: 'failed · alice until 11:00' });
  });
  it('a healthy GPU, a degraded one and one on a down host are as before', () => {
    const free = gpuState(gpu('gpu1:0'), 'up', 'me', NOW);
    expect(healthyState(free, { gpu: 'gpu1:0', state: 'ok', reasons: [], drained: false })).toBe(free);
    expect(healthyState(free, { gpu: 'gpu1:0', state: 'degraded', reasons: ['hot'], drained: false })).toBe(free);
    expect(healthyState(free, undefined)).toBe(free);
    expect(selectable(free)).toBe(true);
    const down = gpuState(gpu('gpu1:2'), 'down', 'me', NOW);
    expect(healthyState(down, failed).kind).toBe('down');
  });
  it('the summary does not count them as free', () => {
    const hosts: IHost[] = [{ name: 'gpu1', state: 'up', gpus: ['gpu1:0', 'gpu1:1', 'gpu1:2', 'gpu1:3'].map(id => gpu(id)) }];
    const counts = summarize(hosts, 'me', NOW, (g, h) => healthyState(gpuState(g, h.state, 'me', NOW), health.get(g.id)));
    expect(summaryText(counts)).toBe('2 free · 1 failed · 1 drained');
  });
});

describe('my own job on a GPU is mine', () => {
  const job = { id: 3, name: 'sweep', status: 'running', preemptible: true, gpus: ['gpu2:1'], tasks: [] };
  it('reads "my job 3 (preemptible)", not "busy: root"', () => {
    const g = gpu('gpu2:1', { processes: [{ pid: 9, user: 'root' }] });
    const s = gpuState(g, 'up', 'root', NOW, myJobText(job));
    expect(s).toMatchObject({ kind: 'mine', label: 'my job 3 (preemptible)' });
    expect(gpuState(g, 'up', 'root', NOW)).toMatchObject({ kind: 'mine', label: 'in use by you' });
    // someone else's process on it is still busy, in their name
    expect(gpuState(g, 'up', 'alice', NOW)).toMatchObject({ kind: 'busy', label: 'busy: root' });
  });
  it('finds the GPUs of my running jobs, named or from their tasks', () => {
    const byCount = { id: 4, name: 'n', status: 'running', gpus: [], tasks: [{ host: 'gpu3', gpu_indices: [0, 2] }] };
    expect(jobGpus(byCount)).toEqual(['gpu3:0', 'gpu3:2']);
    const done = { id: 5, name: 'old', status: 'succeeded', gpus: ['gpu1:0'], tasks: [] };
    const map = jobsByGpu([job, byCount, done]);
    expect([...map.keys()].sort()).toEqual(['gpu2:1', 'gpu3:0', 'gpu3:2']);
    expect(map.get('gpu3:2')?.id).toBe(4);
    expect(myJobText(byCount)).toBe('my job 4');
  });
});

describe('a reclaim shows at once', () => {
  const r = { id: 7, lent_to: [{ job: 3, name: 'sweep', owner: 'bob', preemptible: true }] };
  it('before: lent, with the button', () => {
    expect(loanView(r, new Map(), NOW)).toEqual({ text: 'lent to job 3 (preemptible) until you start', reclaim: true });
  });
  it('after the answer: told to stop, no button, while the server still lists the job', () => {
    const sent = new Map<number, IReclaimSent>([[7, { reclaimed: [3], free_by: '2026-11-22T10:00:30Z', at: NOW.getTime() }]]);
    const view = loanView(r, sent, NOW);
    expect(view.reclaim).toBe(false);
    expect(view.text).toBe('taking your GPUs back: job 3 told to save and stop; free within 30 s');
    // a new borrower after the reclaim shows as lent again
    const again = { id: 7, lent_to: [...r.lent_to, { job: 9, name: 'x', owner: 'eve', preemptible: true }] };
    expect(loanView(again, sent, NOW).reclaim).toBe(true);
    // once the server no longer lists the job, the reclaim is forgotten
    pruneReclaims(sent, [{ id: 7, lent_to: [] }]);
    expect(sent.size).toBe(0);
  });
});


describe('violations going on when a window opens', () => {
  const hosts: IHost[] = [
    {
      name: 'gpu3',
      state: 'up',
      gpus: [
        gpu('gpu3:0', { processes: [{ pid: 5, user: 'bob', violation: { id: 11, kind: 'foreign', holder: 'root' } }] }),
        gpu('gpu3:1', {
          processes: [
            { pid: 7, user: 'root', command: '/bin/sleep 86400', violation: { id: 12, kind: 'foreign', holder: 'alice' } },
            { pid: 8, user: 'root', violation: { id: 12, kind: 'foreign', holder: 'alice' } }
          ]
        }),
        gpu('gpu3:2', { processes: [{ pid: 9, user: 'eve', violation: { id: 13, kind: 'foreign', holder: 'alice' } }] })
      ]
    }
  ];
  it('are found from GET hosts, one per violation, only those that concern me', () => {
    const found = openViolations(hosts, 'root');
    expect(found.map(e => e.violation)).toEqual([11, 12]);
    expect(eventToast(found[0], 'root')?.message).toBe('bob is running on your reserved GPU (gpu3:0).');
    expect(eventToast(found[1], 'root')?.message).toBe('Your process 7 (sleep) on GPU gpu3:1 runs on a GPU reserved by alice.');
    expect(openViolations(hosts, 'carol')).toEqual([]);
  });
  it('get one notice, which the server\'s next event updates in place and never repeats once dismissed', () => {
    const [event] = openViolations(hosts, 'root').slice(1);
    const notices = new FakeNotices();
    const board = new ToastBoard(notices);
    board.seed(event, eventToast(event, 'root')!);
    board.seed(event, eventToast(event, 'root')!);
    expect(notices.emitted).toBe(1);
    const server = { ...event, message: 'Your process 7 on GPU gpu3:1 runs on a GPU reserved by alice (until 13:00).' };
    board.show(server, eventToast(server, 'root')!);
    expect(notices.emitted).toBe(1);
    expect([...notices.shown.values()]).toEqual([server.message]);

    const other = new ToastBoard((notices.shown.clear(), notices));
    other.seed(event, eventToast(event, 'root')!);
    notices.shown.clear(); // the user closed it
    other.show(server, eventToast(server, 'root')!);
    expect(notices.shown.size).toBe(0);
    other.show(server, { ...eventToast(server, 'root')!, message: 'Your process will be stopped now.' });
    expect(notices.shown.size).toBe(1); // the next step of the ladder is news
  });
});
