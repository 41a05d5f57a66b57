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

/** A reclaim this window sent: its answer and when the answer came (ms). */
export interface IReclaimSent extends IReclaimed {
  at: number;
}

/** What a reservation's loan line says now, and whether "I need my GPUs now" is offered. */
export interface ILoanView {
  text: string;
  reclaim: boolean;
}

/**
 * A reservation's loan line, with the reclaims this window sent: as soon as a reclaim is
 * answered, the jobs it stopped read "told to save and stop" and the button goes, even while the
 * server still lists them as borrowers (until they are gone); a new borrower shows as lent again.
 */
export function loanView(r: Pick<IReservation, 'id' | 'lent_to'>, sent: Map<number, IReclaimSent>, now: Date = new Date()): ILoanView {
  const loans = r.lent_to ?? [];
  const reclaim = sent.get(r.id);
  const stopping = reclaim ? loans.filter(loan => reclaim.reclaimed.includes(loan.job)) : [];
  if (!reclaim || !stopping.length || stopping.length < loans.length) {
    const text = lentText(r);
    return { text, reclaim: Boolean(text) };
  }
  const ids = stopping.map(loan => String(loan.job));
  const jobs = ids.length === 1 ? `job ${ids[0]}` : `jobs ${ids.join(', ')}`;
  const left = Math.ceil((new Date(reclaim.free_by).getTime() - now.getTime()) / 1000);
  const by = Number.isFinite(left) && left > 0 ? `free within ${left} s` : 'free any moment now';
  return { text: `taking your GPUs back: ${jobs} told to save and stop; ${by}`, reclaim: false };
}

/** The reclaims still worth remembering: those whose jobs the reservations still list. */
export function pruneReclaims(sent: Map<number, IReclaimSent>, reservations: Pick<IReservation, 'id' | 'lent_to'>[]): void {
  for (const [id, reclaim] of sent) {
    const r = reservations.find(x => x.id === id);
    if (!r || !(r.lent_to ?? []).some(loan => reclaim.reclaimed.includes(loan.job))) {
      sent.delete(id);
    }
  }
}
