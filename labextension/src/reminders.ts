/**
 * Client-side reminders derived from my reservations: "has started" and "ends in 10
 * minutes". Each fires once, when its moment falls between two checks. (Violations on my
 * GPUs arrive from the server's event bus instead: see events.ts.)
 */

import { IReservation, formatTime } from './model';

export const ENDS_SOON_MS = 10 * 60_000;

export interface IReminder {
  key: string;
  kind: 'started' | 'ends-soon';
  message: string;
}

/**
 * The reminders whose moment lies in (since, now]. A reservation created within a minute of
 * its start (a quick reservation made here) gets no "started" toast: its owner just made it.
 * `fired` holds keys already shown and is updated.
 */
export function dueReminders(
  reservations: IReservation[],
  since: Date,
  now: Date,
  fired: Set<string>
): IReminder[] {
  const out: IReminder[] = [];
  const lo = since.getTime();
  const hi = now.getTime();
  const within = (t: number) => t > lo && t <= hi;
  for (const r of reservations) {
    if (r.cancelled_at || r.status === 'cancelled') {
      continue;
    }
    const start = new Date(r.start).getTime();
    const end = new Date(r.end).getTime();
    const created = r.created_at ? new Date(r.created_at).getTime() : -Infinity;
    const gpus = r.gpus.join(', ');
    const startedKey = `${r.id}:started:${r.start}`;
    if (within(start) && created < start - 60_000 && !fired.has(startedKey)) {
      fired.add(startedKey);
      out.push({
        key: startedKey,
        kind: 'started',
        message: `Your reservation '${r.title}' on ${gpus} has started (until ${formatTime(r.end, now)}).`
      });
    }
    const soonKey = `${r.id}:ends-soon:${r.end}`;
    if (within(end - ENDS_SOON_MS) && end > hi && !fired.has(soonKey)) {
      fired.add(soonKey);
      out.push({
        key: soonKey,
        kind: 'ends-soon',
        message: `Your reservation '${r.title}' on ${gpus} ends in 10 minutes (${formatTime(r.end, now)}).`
      });
    }
  }
  return out;
}
