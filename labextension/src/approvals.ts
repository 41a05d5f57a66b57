/**
 * Approvals (issue #46): a booking above its hosts' threshold is tentative until one of their
 * group's administrators (or a site admin) approves it. What the sidebar shows of it, and which
 * bookings wait for my answer; approvalsUi.ts draws them. Plain functions, tested by jest.
 */

import { IReservation, formatTime } from './model';

/** A reservation as `GET reservations` sends it, with the approval fields. */
export interface IApprovable extends IReservation {
  tentative?: boolean;
  tentative_until?: string | null;
  may_approve?: boolean;
}

/** Whether it waits for approval (and was not cancelled meanwhile). */
export function isTentative(r: IApprovable): boolean {
  return Boolean(r.tentative) && r.status !== 'cancelled';
}

/** The line under my own tentative booking: what it waits for, until when. */
export function tentativeText(r: IApprovable, now: Date = new Date()): string {
  const until = r.tentative_until ? ` (held until ${formatTime(r.tentative_until, now)})` : '';
  return `Tentative: waits for an administrator's approval${until}. No job or kernel can run on it yet.`;
}

/** The bookings I may answer, soonest first. */
export function awaitingMe(list: IApprovable[]): IApprovable[] {
  return list.filter(r => isTentative(r) && r.may_approve).sort((a, b) => a.start.localeCompare(b.start));
}

/** One line on a booking that waits for my answer. */
export function askText(r: IApprovable, now: Date = new Date()): string {
  const count = r.gpus.length === 1 ? '1 GPU' : `${r.gpus.length} GPUs`;
  return `${r.owner}: ${r.title} · ${count} (${r.gpus.join(', ')}) · ${formatTime(r.start, now)}–${formatTime(r.end, now)}`;
}

/** The POST that answers a booking: approve or decline (with the reason, if one was given). */
export function answerRequest(
  id: number,
  outcome: 'approve' | 'decline',
  reason = ''
): { path: string; body?: Record<string, string> } {
  const path = `reservations/${encodeURIComponent(String(id))}/${outcome}`;
  return reason.trim() ? { path, body: { reason: reason.trim() } } : { path };
}
