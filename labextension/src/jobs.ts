/**
 * My jobs in the sidebar, the pure part: which can still be stopped, their status line, which to
 * list, and which GPUs my running jobs hold (a GPU my job runs on is mine, not an intruder's).
 */

import type { IJob } from './model';

/** Whether a job can still be stopped. */
export function isJobActive(job: IJob): boolean {
  return ['pending', 'queued', 'starting', 'running'].includes(String(job.status).toLowerCase());
}

/** The status line of a job: "running · 2 GPUs", "pending · queued". */
export function jobStatusText(job: IJob): string {
  const parts = [String(job.status)];
  if (job.queued === true && String(job.status).toLowerCase() === 'pending') {
    parts.push('queued');
  }
  const gpus = Array.isArray(job.gpus) ? job.gpus.length : 0;
  if (gpus) {
    parts.push(`${gpus} GPU${gpus === 1 ? '' : 's'}`);
  }
  return parts.join(' · ');
}

/**
 * Where a waiting queued job stands, from GET jobs' place (1: next) and waiting_for: "next in the
 * queue · gpu1:3 is reserved …", "3rd in the queue · …"; '' for any other job.
 */
export function jobQueueText(job: IJob): string {
  const place = job.place;
  if (String(job.status).toLowerCase() !== 'pending' || typeof place !== 'number' || place < 1) {
    return '';
  }
  const where = place === 1 ? 'next in the queue' : `${ordinal(place)} in the queue`;
  return typeof job.waiting_for === 'string' && job.waiting_for ? `${where} · ${job.waiting_for}` : where;
}

/** 2 → "2nd", 3 → "3rd", 11 → "11th", 22 → "22nd". */
function ordinal(n: number): string {
  const teen = n % 100 >= 11 && n % 100 <= 13;
  const suffix = teen ? 'th' : ({ 1: 'st', 2: 'nd', 3: 'rd' } as Record<number, string>)[n % 10] ?? 'th';
  return `${n}${suffix}`;
}

/** The jobs worth listing: every active one (newest first), then the `recent` latest finished ones. */
export function jobsToShow(jobs: IJob[], recent = 5): IJob[] {
  const newest = (a: IJob, b: IJob) =>
    String(b.updated_at ?? b.created_at ?? '').localeCompare(String(a.updated_at ?? a.created_at ?? '')) ||
    Number(b.id) - Number(a.id);
  const active = jobs.filter(isJobActive).sort(newest);
  const done = jobs.filter(j => !isJobActive(j)).sort(newest).slice(0, recent);
  return [...active, ...done];
}

/** Whether a job's processes may be on its GPUs now. */
function isJobOnGpus(job: IJob): boolean {
  return ['starting', 'running', 'stopping'].includes(String(job.status).toLowerCase());
}

/** The GPU refs a job holds: its named GPUs, else its tasks' host:index. */
export function jobGpus(job: IJob): string[] {
  if (Array.isArray(job.gpus) && job.gpus.length && job.gpus.every(g => typeof g === 'string' && g.includes(':'))) {
    return job.gpus as string[];
  }
  const tasks = Array.isArray(job.tasks) ? (job.tasks as { host?: string; gpu_indices?: number[] }[]) : [];
  return tasks.flatMap(t => (t.host && Array.isArray(t.gpu_indices) ? t.gpu_indices.map(i => `${t.host}:${i}`) : []));
}

/** My jobs that run now, by the GPU refs they hold (the newest job when two share a GPU). */
export function jobsByGpu(jobs: IJob[] | null): Map<string, IJob> {
  const byGpu = new Map<string, IJob>();
  for (const job of jobsToShow((jobs ?? []).filter(isJobOnGpus), Infinity)) {
    for (const gpu of jobGpus(job)) {
      if (!byGpu.has(gpu)) {
        byGpu.set(gpu, job);
      }
    }
  }
  return byGpu;
}

/** "my job 3", "my job 3 (preemptible)": what a GPU my job runs on says. */
export function myJobText(job: IJob): string {
  return `my job ${job.id}${job.preemptible === true ? ' (preemptible)' : ''}`;
}
