/**
 * The sidebar's calendar feed and "notify me when GPUs free up": the shapes the API returns
 * (docs/integrations.md), the form's request body and the words the panel shows. No DOM, no
 * JupyterLab: unit-tested with jest.
 */

import { HiveApi } from './api';
import { formatTime } from './model';

/** A feed as `GET feeds` shows it: never its token, only the URL's last characters. */
export interface IFeed {
  id: number;
  kind: string;
  owner: string | null;
  host: string | null;
  token_hint: string;
  created_at: string;
  /** Only in the answer that made the feed (POST feeds/personal): shown this once. */
  url?: string;
}

export interface IFeedStatus {
  personal: IFeed | null;
  site: IFeed[];
}

/** The slot a subscription offered, and how to book exactly it. */
export interface IOffer {
  host: string;
  gpus: string[];
  start: string;
  end: string;
  magic?: string;
}

export interface ISubscription {
  id: number;
  owner: string;
  gpus: number;
  host: string | null;
  model: string | null;
  duration_s: number;
  deadline: string;
  /** Without a deadline: only GPUs free from now on count, and it watches for a day. */
  starts_now?: boolean;
  channels: string[];
  active: boolean;
  fired: number;
  fired_at: string | null;
  offer: IOffer | null;
}

/** The notify form as typed: strings, checked by `buildSubscriptionRequest`. */
export interface INotifyForm {
  count: string;
  host: string;
  hours: string;
  /** An `<input type="datetime-local">` value (local time), or '' for none. */
  before: string;
}

export const MAX_GPUS = 64;

/** The POST subscriptions body, or the reason in words why the form cannot be sent. */
export function buildSubscriptionRequest(
  form: INotifyForm,
  now: Date = new Date()
): { body?: Record<string, unknown>; error?: string } {
  const count = Number(form.count.trim());
  if (!Number.isInteger(count) || count < 1 || count > MAX_GPUS) {
    return { error: `How many GPUs? A whole number from 1 to ${MAX_GPUS}.` };
  }
  const hours = Number(form.hours.trim());
  if (!form.hours.trim() || !Number.isFinite(hours) || hours <= 0) {
    return { error: 'For how many hours? A number such as 2 or 1.5.' };
  }
  const minutes = Math.max(1, Math.round(hours * 60));
  const body: Record<string, unknown> = { gpus: count, duration: `${minutes}m` };
  if (form.host.trim()) {
    body.host = form.host.trim();
  }
  if (form.before.trim()) {
    const deadline = new Date(form.before.trim());
    if (isNaN(deadline.getTime())) {
      return { error: `'${form.before}' is not a date and time I can read.` };
    }
    if (deadline.getTime() < now.getTime() + minutes * 60_000) {
      return { error: `'Before' leaves no room for ${formatHours(minutes * 60)}.` };
    }
    body.deadline = deadline.toISOString();
  }
  return { body };
}

/** "4h", "1h 30m", "45m". */
export function formatHours(seconds: number): string {
  const m = Math.round(seconds / 60);
  const h = Math.floor(m / 60);
  const rest = m % 60;
  return h && rest ? `${h}h ${rest}m` : h ? `${h}h` : `${rest}m`;
}

/** "2 GPUs on gpu3 for 4h, free now · until Fri 18:00" */
export function subscriptionText(sub: ISubscription, now: Date = new Date()): string {
  const what = `${sub.gpus} GPU${sub.gpus === 1 ? '' : 's'}`;
  const where = sub.host ? ` on ${sub.host}` : sub.model ? ` (${sub.model})` : '';
  const when = sub.starts_now
    ? `free now · watching until ${formatTime(sub.deadline, now)}`
    : `before ${formatTime(sub.deadline, now)}`;
  return `${what}${where} for ${formatHours(sub.duration_s)}, ${when}`;
}

/** What a fired subscription offered, while the slot has not passed; null otherwise. */
export function offerText(sub: ISubscription, now: Date = new Date()): string | null {
  const offer = sub.offer;
  if (!offer || new Date(offer.end).getTime() <= now.getTime()) {
    return null;
  }
  return `Free: ${offer.gpus.join(', ')} ${formatTime(offer.start, now)}–${formatTime(offer.end, now)}`;
}

/** My subscriptions worth showing: the active ones and those whose offer can still be booked. */
export function subscriptionsToShow(list: ISubscription[], me: string, now: Date = new Date()): ISubscription[] {
  return list.filter(s => s.owner === me && (s.active || offerText(s, now) !== null));
}

/** The calendar feed's state in words (its URL is shown only when made). */
export function feedText(status: IFeedStatus | null, now: Date = new Date()): string {
  const mine = status?.personal;
  if (!mine) {
    return 'No calendar feed yet: make one to see your reservations in Google, Outlook or Apple Calendar.';
  }
  return `Your feed exists since ${formatTime(mine.created_at, now)} (URL ending ${mine.token_hint}.ics). Its URL is shown only when made: a new URL stops the old one.`;
}

/** The feed and subscription routes (the same HiveApi, so the same auth and errors). */
export class IntegrationsApi {
  constructor(private readonly api: HiveApi) {}

  feeds(): Promise<IFeedStatus> {
    return this.api.request<IFeedStatus>('GET', 'feeds');
  }

  /** Make or rotate my feed: the answer's `url` is shown only now; the old URL stops. */
  rotateFeed(): Promise<IFeed> {
    return this.api.request<IFeed>('POST', 'feeds/personal');
  }

  async subscriptions(): Promise<ISubscription[]> {
    const data = await this.api.request<{ subscriptions?: ISubscription[] }>('GET', 'subscriptions');
    return data.subscriptions ?? [];
  }

  subscribe(body: Record<string, unknown>): Promise<ISubscription> {
    return this.api.request<ISubscription>('POST', 'subscriptions', { body });
  }

  unsubscribe(id: number): Promise<unknown> {
    return this.api.request('DELETE', `subscriptions/${id}`);
  }

  /** Book exactly the slot a subscription offered (409 if someone took it first). */
  book(id: number): Promise<{ id: number; gpus: string[]; end: string }> {
    return this.api.request('POST', `subscriptions/${id}/book`);
  }
}
