/**
 * Toasts from the server's event bus: gpuhive emits an event when someone runs on GPUs that
 * another user reserved (or leaves a reservation idle). Only the people concerned see it. A
 * window opened while a violation lasts shows it at once, from GET hosts (openViolations).
 */

import type { IHost } from './model';

export const VIOLATION_SCHEMA = 'https://events.jupyter.org/jupyter_gpuhive/violation';
/** GPUs an availability subscription asked for are free (docs/integrations.md). */
export const AVAILABILITY_SCHEMA = 'https://events.jupyter.org/jupyter_gpuhive/availability';

export interface IHiveEvent {
  schema_id?: string;
  kind?: string;
  message?: string;
  holder?: string | null;
  offender?: string | null;
  gpu?: string;
  host?: string;
  user?: string;
  /** The violation's id: every event of one violation carries the same. */
  violation?: number | null;
}

export interface IToast {
  level: 'warning' | 'info';
  message: string;
}

/** The toast `me` should see for an event of the bus, or null when it is not about them. */
export function eventToast(event: IHiveEvent, me: string | null | undefined): IToast | null {
  if (me && event.schema_id === AVAILABILITY_SCHEMA) {
    return event.user === me
      ? { level: 'info', message: event.message || 'GPUs you asked for are free.' }
      : null;
  }
  if (!me || event.schema_id !== VIOLATION_SCHEMA) {
    return null;
  }
  const where = event.gpu ? ` (${event.gpu})` : '';
  if (event.kind === 'gpu-health') {
    // A GPU of the holder's reservation failed or was drained; the message offers an alternative.
    return event.holder === me
      ? { level: 'warning', message: event.message || `A GPU of your reservation${where} failed.` }
      : null;
  }
  if (event.kind === 'idle') {
    return event.holder === me
      ? { level: 'info', message: event.message || `Your reserved GPUs${where} are idle.` }
      : null;
  }
  if (event.holder === me && event.offender && event.offender !== me) {
    return {
      level: 'warning',
      message: `${event.offender} is running on your reserved GPU${where}. ${event.message ?? ''}`.trim()
    };
  }
  if (event.offender === me) {
    return { level: 'warning', message: event.message || `Your process on ${event.gpu} breaks a reservation.` };
  }
  return null;
}

/** What shows notices: JupyterLab's Notification in the extension, a fake in the unit tests. */
export interface INotifier {
  emit(message: string, level: IToast['level']): string;
  /** Replace a notice's text; false when it is gone (the user dismissed it). */
  update(id: string, message: string, level: IToast['level']): boolean;
}

/** The notice an event belongs to: one per violation (its id), else per kind, GPU and people. */
export function toastKey(event: IHiveEvent): string {
  if (event.violation !== undefined && event.violation !== null) {
    return `violation ${event.violation}`;
  }
  return [event.schema_id, event.kind, event.gpu, event.offender, event.holder, event.user].join('|');
}

/**
 * One notice per violation: the server repeats a violation's event while it lasts (about once
 * a minute); the first shows a notice, a repeat with the same words changes nothing (so a
 * notice the user hid or dismissed stays so), and new words (the next ladder step) update the
 * notice in place, or show it again when it was dismissed.
 */
export class ToastBoard {
  constructor(private readonly notifier: INotifier) {}

  /** Show (or update) the notice of `event`. */
  show(event: IHiveEvent, toast: IToast): void {
    const key = toastKey(event);
    const known = this._shown.get(key);
    if (known && known.message === toast.message) {
      return; // the same again: the notice (shown, hidden or dismissed) says it already
    }
    if (known && this.notifier.update(known.id, toast.message, toast.level)) {
      known.message = toast.message;
      known.seeded = false;
      return;
    }
    if (known?.seeded) {
      known.message = toast.message; // dismissed before the server said it in its own words
      known.seeded = false;
      return;
    }
    this._shown.set(key, { id: this.notifier.emit(toast.message, toast.level), message: toast.message });
  }

  /**
   * Show the notice of a violation that was open when this window started (GET hosts): once.
   * The server's next event for it then updates the notice in place, or, when the user has
   * dismissed it meanwhile, is taken as said (the same violation, only in the server's words).
   */
  seed(event: IHiveEvent, toast: IToast): void {
    const key = toastKey(event);
    if (!this._shown.has(key)) {
      this._shown.set(key, { id: this.notifier.emit(toast.message, toast.level), message: toast.message, seeded: true });
    }
  }

  private _shown = new Map<string, { id: string; message: string; seeded?: boolean }>();
}

/**
 * The violations going on now that concern `me` (my processes on others' GPUs, others' on mine),
 * as the events the server sends for them: one per violation, from the processes GET hosts marks.
 */
export function openViolations(hosts: IHost[], me: string): IHiveEvent[] {
  const found = new Map<number, IHiveEvent>();
  for (const host of hosts) {
    for (const gpu of host.gpus.flatMap(g => [g, ...(g.slices ?? [])])) {
      for (const p of gpu.processes ?? []) {
        const v = p.violation;
        if (!v || v.id === null || v.id === undefined || found.has(v.id) || (p.user !== me && v.holder !== me)) {
          continue;
        }
        const program = (p.command ?? '').trim().split(/\s+/)[0]?.split('/').pop();
        const where = v.holder ? `a GPU reserved by ${v.holder}` : 'a GPU nobody reserved';
        found.set(v.id, {
          schema_id: VIOLATION_SCHEMA,
          kind: v.kind,
          holder: v.holder ?? null,
          offender: p.user,
          gpu: gpu.id,
          host: host.name,
          violation: v.id,
          message: p.user === me ? `Your process ${p.pid}${program ? ` (${program})` : ''} on GPU ${gpu.id} runs on ${where}.` : ''
        });
      }
    }
  }
  return [...found.values()];
}
