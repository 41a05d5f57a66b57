/**
 * Kernels on reservations, as the labextension shows them: which kernelspec belongs to which
 * reservation, the countdown of a notebook's GPUs, and what to do with the server's kernel
 * events (a warning before the end, the end policy's action). Pure functions: unit-tested
 * with jest; kernelsUi.ts puts them on screen.
 */

import { IReservation, formatCountdown, formatTime } from './model';

/** The kernelspec names gpuhive gives reservations (server: kernels/specs.py). */
export const SPEC_PREFIX = 'gpuhive-r';
/** The server's kernel events (server: kernels/events.py). */
export const KERNEL_SCHEMA = 'https://events.jupyter.org/jupyter_gpuhive/kernel';
/** The comm `%gpureserve --kernel` opens to switch its notebook to a reservation's kernel. */
export const SWITCH_TARGET = 'gpuhive.kernel';

export const POLICY_LABELS: Record<string, string> = {
  warn: 'keep running',
  interrupt: 'interrupt the cell',
  shutdown: 'shut down',
  extend: 'extend if free'
};

/** `GET kernels`: one kernel on a reservation. */
export interface IKernelInfo {
  id: string;
  owner: string;
  reservation_id: number;
  host?: string | null;
  gpus: string[];
  state?: string | null;
  start?: string | null;
  end?: string | null;
  seconds_left?: number | null;
  policy: string;
  fallback: string;
  warned: boolean;
}

export interface IKernelList {
  kernels: IKernelInfo[];
  policies: string[];
  default: string;
  fallback: string;
  warning_minutes: number;
}

/** One event of the server's kernel schema. */
export interface IKernelEvent {
  schema_id?: string;
  kind?: string;
  kernel_id?: string;
  reservation_id?: number;
  owner?: string;
  message?: string;
  end?: string;
  policy?: string;
  action?: string;
  ok?: boolean;
}

/** The kernelspec name of a reservation. */
export function specName(reservationId: number): string {
  return `${SPEC_PREFIX}${reservationId}`;
}

/** The reservation a kernelspec name stands for, or null for any other kernel. */
export function reservationOfSpec(name: string | null | undefined): number | null {
  const found = /^gpuhive-r(\d+)$/.exec(name ?? '');
  return found ? Number(found[1]) : null;
}

/** Whether a notebook can be opened on a reservation now (it runs and is not cancelled). */
export function canOpenNotebook(r: IReservation, now: Date): boolean {
  const start = new Date(r.start).getTime();
  const end = new Date(r.end).getTime();
  return !r.cancelled_at && r.status !== 'cancelled' && start <= now.getTime() && now.getTime() < end;
}

/** Why a reservation's "Open a notebook here" is not offered yet (null: it is). */
export function notYetReason(r: IReservation, now: Date): string | null {
  if (canOpenNotebook(r, now)) {
    return null;
  }
  const start = new Date(r.start);
  if (start.getTime() > now.getTime()) {
    return `A kernel on these GPUs can start from ${formatTime(r.start, now)}.`;
  }
  return 'This reservation has ended.';
}

export type Urgency = 'ok' | 'soon' | 'ended';

export interface ICountdown {
  text: string;
  urgency: Urgency;
  title: string;
}

/**
 * The status bar's words for a notebook's GPUs: "gpu1:0,1 · 1h 05m left", urgent within
 * `warnMinutes` of the end, "reservation ended" after it.
 */
export function kernelCountdown(
  gpus: string[],
  end: string | null | undefined,
  now: Date,
  warnMinutes = 10,
  policy?: string
): ICountdown {
  const what = gpus.length ? compact(gpus) : 'GPUs';
  if (!end) {
    return { text: `${what}`, urgency: 'ok', title: `This notebook runs on ${what}.` };
  }
  const left = new Date(end).getTime() - now.getTime();
  const then = policy ? ` At the end: ${POLICY_LABELS[policy] ?? policy}.` : '';
  if (left <= 0) {
    return {
      text: `${what} · reservation ended`,
      urgency: 'ended',
      title: `The reservation of ${what} ended at ${formatTime(end, now)}.${then}`
    };
  }
  return {
    text: `${what} · ${formatCountdown(left)} left`,
    urgency: left <= warnMinutes * 60_000 ? 'soon' : 'ok',
    title: `This notebook's GPUs ${what} are its own until ${formatTime(end, now)}.${then}`
  };
}

/** "gpu1:0,1 gpu2:3" from ["gpu1:0", "gpu1:1", "gpu2:3"]. */
export function compact(gpus: string[]): string {
  const hosts = new Map<string, string[]>();
  for (const g of gpus) {
    const at = g.indexOf(':');
    const host = at < 0 ? g : g.slice(0, at);
    const index = at < 0 ? '' : g.slice(at + 1);
    hosts.set(host, [...(hosts.get(host) ?? []), index]);
  }
  return [...hosts.entries()].map(([h, ix]) => (ix.join(',') ? `${h}:${ix.join(',')}` : h)).join(' ');
}

export interface IKernelNotice {
  level: 'warning' | 'info' | 'error';
  message: string;
  /** Also write `line` into the running cell's output, when the kernel is busy. */
  line: string | null;
}

/**
 * What `me` sees of a kernel event: a notification (and, for a warning, a line for the running
 * cell), or null when it is not about `me` or a kernel of theirs open here.
 */
export function kernelNotice(
  event: IKernelEvent,
  me: string | null,
  openKernels: Set<string>,
  notebooks: Map<string, string> = new Map()
): IKernelNotice | null {
  if (event.schema_id !== KERNEL_SCHEMA || !event.kernel_id) {
    return null;
  }
  if (event.owner !== me && !openKernels.has(event.kernel_id)) {
    return null;
  }
  const message = nameKernel(event.message || 'Your kernel on reserved GPUs changed.', event.kernel_id, notebooks.get(event.kernel_id));
  switch (event.kind) {
    case 'warning':
      return { level: 'warning', message, line: `⚠ ${message}` };
    case 'extended':
      return { level: 'info', message, line: null };
    case 'extend-failed':
      return { level: 'warning', message, line: `⚠ ${message}` };
    case 'ended':
      return { level: event.ok === false ? 'error' : 'warning', message, line: null };
    default:
      return { level: 'info', message, line: null };
  }
}

/** A server message with the kernel named as people know it: its notebook, else a short id. */
export function nameKernel(message: string, kernelId: string, notebook?: string | null): string {
  const name = notebook ? `the kernel of ${notebook.split('/').pop()}` : `kernel ${kernelId.slice(0, 8)}`;
  return message.split(`kernel ${kernelId}`).join(name);
}

const ENDED_WORDS: Record<string, string> = {
  interrupt: 'cell interrupted',
  shutdown: 'kernel shut down',
  warn: 'kernel still running'
};

/** The status bar once the reservation ended: what happened to the kernel, not "Disconnected". */
export function endedStatus(event: IKernelEvent, gpus: string[]): ICountdown {
  const what = gpus.length ? compact(gpus) : 'GPUs';
  const verb = event.action === 'shutdown' ? 'shut the kernel down' : event.action === 'interrupt' ? 'interrupt the cell' : 'act';
  const done = event.ok === false ? `could not ${verb}` : ENDED_WORDS[event.action ?? ''] ?? 'ended';
  return {
    text: `${what} · reservation ${event.reservation_id ?? ''} ended, ${done}`.replace('  ', ' '),
    urgency: 'ended',
    title: event.message ?? `The reservation of ${what} ended.`
  };
}

/** What the switch comm carries (`%gpureserve --kernel`). */
export interface ISwitchRequest {
  kernel_name: string;
  reservation_id: number;
  display_name?: string;
}

/** The switch request in a comm's data, or null when it is not one. */
export function switchRequest(data: unknown): ISwitchRequest | null {
  if (!data || typeof data !== 'object') {
    return null;
  }
  const d = data as Record<string, unknown>;
  const name = typeof d.kernel_name === 'string' ? d.kernel_name : '';
  const rid = reservationOfSpec(name);
  if (rid === null || d.reservation_id !== rid) {
    return null;
  }
  return {
    kernel_name: name,
    reservation_id: rid,
    display_name: typeof d.display_name === 'string' ? d.display_name : undefined
  };
}

/** "Python on my reservation: …" for a reservation, as the server names its spec. */
export function defaultLabel(r: IReservation, now: Date): string {
  return `Python on my reservation: ${compact(r.gpus)} until ${formatTime(r.end, now)}`;
}
