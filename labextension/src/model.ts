/**
 * The panel's model: the shapes the gpuhive REST API returns and pure functions that turn
 * them into what the panel shows (GPU state, countdowns, times). No DOM, no JupyterLab:
 * unit-tested with jest. Shapes the OpenAPI document states come from `api-types.ts`
 * (generated from it); those here are what it does not state (`hosts`) or states loosely.
 */

import { IdentityReply, LentTo, ReservationStatus } from './api-types';

/** A reservation as `hosts` gives it on each GPU (`reservation`, `next_reservation`). */
export interface IBrief {
  id: number;
  owner: string;
  title: string;
  start: string;
  end: string;
}

/** The ongoing violation a process is part of (GET hosts marks each offending process). */
export interface IProcessViolation {
  id?: number | null;
  kind: string;
  holder?: string | null;
  since?: string | null;
}

/** The container a process runs in (GET hosts); the process's `user` is then its owner. */
export interface IContainer {
  id: string;
  engine?: string | null;
  image?: string | null;
  name?: string | null;
  owner?: string | null;
  /** How the owner is known: gpuhive, rootless, subuid, label or unattributed. */
  source?: string | null;
  /** The UNIX user the process runs as, which the container chose. */
  process_user?: string | null;
}

export interface IProcess {
  pid: number;
  user: string | null;
  command?: string | null;
  used_memory_mib?: number | null;
  violation?: IProcessViolation | null;
  container?: IContainer | null;
}

/** ' in container NAME (IMAGE)' for a process in a container, else ''. */
export function containerText(p: IProcess): string {
  const c = p.container;
  if (!c) {
    return '';
  }
  const name = c.name || c.id.slice(0, 12) || `a user namespace of ${c.owner ?? '?'}`;
  return ` in container ${name}${c.image ? ` (${c.image})` : ''}`;
}

export interface IGpu {
  id: string;
  host: string;
  index: number;
  model?: string | null;
  util?: number | null;
  /** Why `util` is null when the driver reports none (MIG): "not reported". */
  util_label?: string | null;
  mem_used_mib?: number | null;
  mem_total_mib?: number | null;
  processes?: IProcess[];
  /** The engine job that holds it now, as the engine says ('a Slurm job'): busy. */
  held_by_engine?: string | null;
  reservation?: IBrief | null;
  next_reservation?: IBrief | null;
  /** A MIG slice ('host:index/migGI') is listed under its GPU and booked like one. */
  kind?: 'gpu' | 'slice';
  profile?: string | null;
  slices?: IGpu[];
}

/** One step of guidance: a sentence and the command (or line) to copy. */
export interface IStep {
  text: string;
  command?: string | null;
}

/** What the server says to do: with no hosts (`setup`), or about a host (`advice`). */
export interface IGuidance {
  message: string;
  steps: IStep[];
  note?: string | null;
}

export interface IHost {
  name: string;
  state: string;
  error?: string | null;
  gpu_error?: string | null;
  advice?: IGuidance | null;
  /** The host's GPU vendor ('nvidia', 'amd', or a site's). */
  vendor?: string;
  gpus: IGpu[];
}

/** The vendor a host's header shows: its name in capitals where the site mixes vendors, else ''. */
export function vendorLabel(hosts: IHost[], host: IHost): string {
  const vendors = new Set(hosts.map(h => h.vendor ?? 'nvidia'));
  return vendors.size > 1 ? (host.vendor ?? 'nvidia').toUpperCase() : '';
}

/** `GET hosts`: the hosts, and the first steps when there are none. */
export interface IHostsReply {
  hosts: IHost[];
  setup?: IGuidance | null;
  /** The site's note for the sidebar (c.GpuHiveApp.sidebar_note), e.g. what the demo holds. */
  note?: string | null;
}

/** The first steps, for a server too old to send them. */
export const FALLBACK_SETUP: IGuidance = {
  message: 'No GPU hosts are configured yet.',
  steps: [
    { text: 'Add a GPU machine (gpuhive logs in over SSH):', command: 'jupyter gpuhive hosts add gpu1 gpu1.example.org --user $USER' },
    { text: 'Or write a config file with every setting, commented:', command: 'jupyter gpuhive init' }
  ]
};

export interface IReservation extends IBrief {
  gpus: string[];
  status: ReservationStatus;
  created_at?: string;
  cancelled_at?: string | null;
  flagged?: boolean;
  flag_reason?: string | null;
  /** Hosts of its GPUs that are no longer configured. */
  hosts_gone?: string[];
  /** Whether its GPUs are lent to preemptible jobs while unused (default true). */
  lend?: boolean;
  /** Lent only until shortly before its start. */
  reclaim_before_start?: boolean;
  /** The preemptible jobs running on its GPUs now. */
  lent_to?: LentTo[];
}

export interface IJob {
  id: number | string;
  name: string;
  status: string;
  [key: string]: unknown;
}

/** `GET me`: who I am. */
export type IMe = IdentityReply;

/** 'failed' and 'drained' come from GET health (health.ts healthyState): never free. */
export type GpuKind = 'free' | 'mine' | 'reserved' | 'busy' | 'failed' | 'drained' | 'down' | 'unknown';

/** The kinds the summary line counts, in its order. */
export const SUMMARY_KINDS: GpuKind[] = ['free', 'mine', 'reserved', 'busy', 'failed', 'drained', 'down'];

export interface IGpuState {
  kind: GpuKind;
  /** One or two words: the badge. */
  label: string;
  /** A sentence: tooltip and accessible description. */
  detail: string;
}

const MINUTE = 60_000;

function pad(n: number): string {
  return n < 10 ? `0${n}` : `${n}`;
}

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];

/** A local wall-clock time: "14:30" today, "Tue 14:30" within a week, else "2026-12-01 14:30". */
export function formatTime(iso: string, now: Date = new Date()): string {
  const t = new Date(iso);
  if (isNaN(t.getTime())) {
    return iso;
  }
  const hm = `${pad(t.getHours())}:${pad(t.getMinutes())}`;
  const sameDay =
    t.getFullYear() === now.getFullYear() &&
    t.getMonth() === now.getMonth() &&
    t.getDate() === now.getDate();
  if (sameDay) {
    return hm;
  }
  if (Math.abs(t.getTime() - now.getTime()) < 6 * 24 * 60 * MINUTE) {
    return `${DAYS[t.getDay()]} ${hm}`;
  }
  return `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())} ${hm}`;
}

/** A countdown: "2d 3h", "1h 05m", "4m 09s", "12s"; "0s" once past. */
export function formatCountdown(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (d > 0) {
    return `${d}d ${h}h`;
  }
  if (h > 0) {
    return `${h}h ${pad(m)}m`;
  }
  if (m > 0) {
    return `${m}m ${pad(sec)}s`;
  }
  return `${sec}s`;
}

/** What a countdown line says for one of my reservations. */
export function reservationCountdown(r: IBrief, now: Date): string {
  const start = new Date(r.start).getTime();
  const end = new Date(r.end).getTime();
  const t = now.getTime();
  if (t < start) {
    return `starts in ${formatCountdown(start - t)}`;
  }
  if (t < end) {
    return `ends in ${formatCountdown(end - t)}`;
  }
  return 'ended';
}

/** "40.0 GiB" / "512 MiB". */
export function formatMemory(mib: number | null | undefined): string {
  if (mib === null || mib === undefined) {
    return '–';
  }
  return mib >= 1024 ? `${(mib / 1024).toFixed(1)} GiB` : `${Math.round(mib)} MiB`;
}

/** "37% · 1.2/40.0 GiB", or '' when nothing was measured. */
export function formatUsage(gpu: IGpu): string {
  const parts: string[] = [];
  if (gpu.util !== null && gpu.util !== undefined) {
    parts.push(`${Math.round(gpu.util)}%`);
  } else if (gpu.util_label) {
    parts.push(`utilization ${gpu.util_label}`);
  }
  if (gpu.mem_used_mib !== null && gpu.mem_used_mib !== undefined) {
    parts.push(`${formatMemory(gpu.mem_used_mib)}/${formatMemory(gpu.mem_total_mib)}`);
  }
  return parts.join(' · ');
}

/** A host's bookable units: each GPU followed by its MIG slices (with their profile). */
export function bookableUnits(gpus: IGpu[]): IGpu[] {
  return gpus.flatMap(gpu => [gpu, ...(gpu.slices ?? [])]);
}

/** The distinct users of a GPU's processes, in order of appearance. */
export function processUsers(gpu: IGpu): string[] {
  const users: string[] = [];
  for (const p of gpu.processes ?? []) {
    const u = p.user || `pid ${p.pid}`;
    if (!users.includes(u)) {
      users.push(u);
    }
  }
  return users;
}

/**
 * A GPU's state for `me`: down / mine / reserved by whom until when / busy with whose processes /
 * free. `myJob`: my job running on it (jobs.ts jobsByGpu), named when the GPU is not reserved.
 */
export function gpuState(gpu: IGpu, hostState: string, me: string, now: Date = new Date(), myJob = ''): IGpuState {
  if (hostState === 'down') {
    return { kind: 'down', label: 'down', detail: `${gpu.id}: host ${gpu.host} is down` };
  }
  const users = processUsers(gpu);
  const others = users.filter(u => u !== me);
  const res = gpu.reservation;
  if (res) {
    const until = formatTime(res.end, now);
    const running = others.length ? `; processes of ${others.join(', ')} running` : '';
    if (res.owner === me) {
      return {
        kind: 'mine',
        label: `mine until ${until}`,
        detail: `${gpu.id}: reserved by you ('${res.title}') until ${until}${running}`
      };
    }
    return {
      kind: 'reserved',
      label: `${res.owner} until ${until}`,
      detail: `${gpu.id}: reserved by ${res.owner} ('${res.title}') until ${until}${running}`
    };
  }
  if (users.length && !others.length) {
    // Only my own processes (my job, preemptible or not): mine, never an intruder's colour.
    const what = myJob || 'in use by you';
    return { kind: 'mine', label: what, detail: `${gpu.id}: not reserved, ${myJob ? `running ${myJob}` : 'running your processes'}` };
  }
  if (users.length) {
    const n = gpu.processes?.length ?? 0;
    return {
      kind: 'busy',
      label: `busy: ${users.join(', ')}`,
      detail: `${gpu.id}: not reserved, busy with ${n} process${n === 1 ? '' : 'es'} of ${users.join(', ')}`
    };
  }
  if (gpu.held_by_engine) {
    // A job of the cluster's own scheduler holds it (its processes are not seen from here).
    return { kind: 'busy', label: `busy: ${gpu.held_by_engine}`, detail: `${gpu.id}: not reserved, held by ${gpu.held_by_engine}` };
  }
  if (hostState !== 'up') {
    return {
      kind: 'unknown',
      label: 'no data',
      detail: `${gpu.id}: not reserved; host ${gpu.host} is ${hostState || 'unknown'}`
    };
  }
  const next = gpu.next_reservation;
  if (next) {
    const from = formatTime(next.start, now);
    return {
      kind: 'free',
      label: `free until ${from}`,
      detail: `${gpu.id}: free until ${from}, then reserved by ${next.owner}`
    };
  }
  return { kind: 'free', label: 'free', detail: `${gpu.id}: free` };
}

/** Counts of each kind over all hosts (each GPU's state as `stateOf` gives it): for the summary line. */
export function summarize(
  hosts: IHost[],
  me: string,
  now: Date = new Date(),
  stateOf: (gpu: IGpu, host: IHost) => IGpuState = (g, h) => gpuState(g, h.state, me, now)
): Record<GpuKind, number> {
  const counts: Record<GpuKind, number> = { free: 0, mine: 0, reserved: 0, busy: 0, failed: 0, drained: 0, down: 0, unknown: 0 };
  for (const h of hosts) {
    for (const g of h.gpus) {
      counts[stateOf(g, h).kind] += 1;
    }
  }
  return counts;
}

/** The summary line: "8 free · 2 mine · 1 failed". */
export function summaryText(counts: Record<GpuKind, number>): string {
  return SUMMARY_KINDS.filter(k => counts[k]).map(k => `${counts[k]} ${k}`).join(' · ') || 'No GPUs';
}

/** My reservations worth listing (running or upcoming), soonest first. */
export function activeReservations(list: IReservation[], now: Date = new Date()): IReservation[] {
  const t = now.getTime();
  return list
    .filter(r => !r.cancelled_at && r.status !== 'cancelled' && new Date(r.end).getTime() > t)
    .sort((a, b) => new Date(a.start).getTime() - new Date(b.start).getTime());
}

/** A line per process of `gpu` that breaks a reservation, as `me` reads it. */
export function violationNotes(gpu: IGpu, me: string): string[] {
  const notes: string[] = [];
  for (const p of gpu.processes ?? []) {
    if (!p.violation) {
      continue;
    }
    const program = (p.command ?? '').trim().split(/\s+/)[0]?.split('/').pop();
    const what = `process ${p.pid}${program ? ` (${program})` : ''}${containerText(p)}`;
    const who = p.user === me ? `Your ${what}` : `${p.user ?? 'An unknown user'}’s ${what}`;
    const holder = p.violation.holder;
    const where = holder ? (holder === me ? 'your reservation' : `${holder}’s reservation`) : 'a GPU nobody reserved';
    notes.push(`⚠ Violation: ${who} runs on ${where}`);
  }
  return notes;
}

/** What a reservation on hosts that are no longer configured says about them. */
export function hostGoneText(hosts: string[]): string {
  const names = hosts.join(', ');
  const verb = hosts.length === 1 ? 'is' : 'are';
  return `⚠ host gone: ${names} ${verb} no longer configured; these GPUs are not monitored and cannot run kernels`;
}

/** Whether a reservation is running now (DELETE then ends it) or upcoming (DELETE cancels it). */
export function isRunning(r: IBrief, now: Date = new Date()): boolean {
  const t = now.getTime();
  return new Date(r.start).getTime() <= t && t < new Date(r.end).getTime();
}

/** 'gpu1:0','gpu1:1','gpu2:3' → 'gpu1:0,1 gpu2:3' (the %gpureserve form). */
export function compactGpus(ids: string[]): string {
  const byHost = new Map<string, string[]>();
  for (const id of ids) {
    const i = id.lastIndexOf(':');
    const host = i < 0 ? id : id.slice(0, i);
    const index = i < 0 ? '' : id.slice(i + 1);
    if (!byHost.has(host)) {
      byHost.set(host, []);
    }
    if (index) {
      byHost.get(host)!.push(index);
    }
  }
  return [...byHost.entries()]
    .map(([host, idx]) =>
      idx.length ? `${host}:${idx.sort((a, b) => Number(a) - Number(b)).join(',')}` : host
    )
    .join(' ');
}
