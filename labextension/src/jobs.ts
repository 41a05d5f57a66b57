/**
 * My jobs in the sidebar, the pure part: which can still be stopped, their status line, which to
 * list, and which GPUs my running jobs hold (a GPU my job runs on is mine, not an intruder's).
 */

import { IJob, formatTime } from './model';

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
 * Where a waiting queued job stands, from GET jobs' place (1: next), estimated_start and
 * waiting_for: "next in the queue · starts ~Tue 14:00 · gpu1:3 is reserved …", "3rd in the
 * queue · …"; '' for any other job. The start is an estimate, in local time (formatTime).
 */
export function jobQueueText(job: IJob, now: Date = new Date()): string {
  const place = job.place;
  if (String(job.status).toLowerCase() !== 'pending' || typeof place !== 'number' || place < 1) {
    return '';
  }
  const parts = [place === 1 ? 'next in the queue' : `${ordinal(place)} in the queue`];
  if (typeof job.estimated_start === 'string' && job.estimated_start) {
    parts.push(`starts ~${formatTime(job.estimated_start, now)}`);
  }
  if (typeof job.waiting_for === 'string' && job.waiting_for) {
    parts.push(job.waiting_for);
  }
  return parts.join(' · ');
}

/**
 * What preemption cost a job, from GET jobs' preemptions, service_gpu_h and lost_gpu_h:
 * "preempted 2× · had 1.5 GPU-h, lost 0.75"; '' for a job never preempted.
 */
export function jobPreemptionText(job: IJob): string {
  const n = job.preemptions;
  if (typeof n !== 'number' || n < 1) {
    return '';
  }
  const had = typeof job.service_gpu_h === 'number' ? gpuHours(job.service_gpu_h) : null;
  const lost = typeof job.lost_gpu_h === 'number' ? gpuHours(job.lost_gpu_h) : null;
  const cost = had !== null && lost !== null ? ` · had ${had} GPU-h, lost ${lost}` : '';
  return `preempted ${n}×${cost}`;
}

/** The line under a job in My jobs: where it stands in the queue, then what preemption cost it. */
export function jobWaitText(job: IJob, now: Date = new Date()): string {
  return [jobQueueText(job, now), jobPreemptionText(job)].filter(Boolean).join(' · ');
}

/** 1.5 → "1.5", 0.123 → "0.12", 12.34 → "12.3", 0 → "0". */
function gpuHours(h: number): string {
  return h >= 10 ? h.toFixed(1) : `${Math.round(h * 100) / 100}`;
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
