/**
 * Reserved GPUs lent to preemptible jobs while their holder does not use them (#31): what the
 * sidebar says about a reservation's loans, and about a reclaim ("I need my GPUs now").
 */
import { ReclaimReply } from './api-types';
import { IReservation } from './model';

/** `POST reservations/{id}/reclaim`: the jobs told to save and stop, and when the GPUs are free. */
export type IReclaimed = ReclaimReply;

/** "lent to job 42 (preemptible) until you start", or '' when nothing is lent. */
export function lentText(r: Pick<IReservation, 'lent_to'>, mine = true): string {
  const ids = (r.lent_to ?? []).map(loan => String(loan.job));
  if (!ids.length) {
    return '';
  }
  const jobs = ids.length === 1 ? `job ${ids[0]}` : `jobs ${ids.join(', ')}`;
  return `lent to ${jobs} (preemptible) until ${mine ? 'you start' : 'its holder starts'}`;
}

/** What a reclaim did, in one sentence. */
export function reclaimedText(id: number, reply: IReclaimed, now: Date = new Date()): string {
  if (!reply.reclaimed.length) {
    return `Reservation ${id}: nothing was running on its GPUs; they are yours.`;
  }
  const jobs = reply.reclaimed.length === 1 ? `job ${reply.reclaimed[0]}` : `jobs ${reply.reclaimed.join(', ')}`;
  const left = reply.free_by ? Math.ceil((new Date(reply.free_by).getTime() - now.getTime()) / 1000) : NaN;
  const by = Number.isFinite(left) ? `your GPUs are free within ${Math.max(0, left)} s` : 'your GPUs are free soon';
  return `Reservation ${id}: preemptible ${jobs} told to save and stop; ${by}.`;
}
