import { HiveApi, HiveApiError } from '../api';
import {
  ISubscription,
  IntegrationsApi,
  buildSubscriptionRequest,
  feedText,
  formatHours,
  offerText,
  subscriptionText,
  subscriptionsToShow
} from '../integrations';
import { fake } from './fetcher';

// jest.config.js runs in UTC, so local times below are UTC times.
const NOW = new Date('2026-03-02T10:00:00Z'); // a Monday

function sub(extra: Partial<ISubscription> = {}): ISubscription {
  return {
    id: 7,
    owner: 'me',
    gpus: 2,
    host: 'gpu3',
    model: null,
    duration_s: 4 * 3600,
    deadline: '2026-03-06T18:00:00+00:00',
    channels: ['email', 'lab'],
    active: true,
    fired: 0,
    fired_at: null,
    offer: null,
    ...extra
  };
}

describe('buildSubscriptionRequest', () => {
  const form = { count: '2', host: 'gpu3', hours: '4', before: '' };
  it('builds the POST body without a deadline (GPUs free from now on)', () => {
    expect(buildSubscriptionRequest(form, NOW)).toEqual({ body: { gpus: 2, duration: '240m', host: 'gpu3' } });
  });
  it('leaves out an empty host and reads hours with a fraction', () => {
    expect(buildSubscriptionRequest({ ...form, host: '', hours: '1.5' }, NOW).body).toEqual({ gpus: 2, duration: '90m' });
  });
  it('turns a local "before" into an instant', () => {
    const made = buildSubscriptionRequest({ ...form, before: '2026-03-06T18:00' }, NOW);
    expect(made.body!.deadline).toBe('2026-03-06T18:00:00.000Z');
  });
  it('says what is wrong with the form', () => {
    expect(buildSubscriptionRequest({ ...form, count: '0' }, NOW).error).toBe('How many GPUs? A whole number from 1 to 64.');
    expect(buildSubscriptionRequest({ ...form, count: '2.5' }, NOW).error).toContain('whole number');
    expect(buildSubscriptionRequest({ ...form, count: '65' }, NOW).error).toContain('from 1 to 64');
    expect(buildSubscriptionRequest({ ...form, hours: '' }, NOW).error).toBe('For how many hours? A number such as 2 or 1.5.');
    expect(buildSubscriptionRequest({ ...form, hours: '-1' }, NOW).error).toContain('hours');
    expect(buildSubscriptionRequest({ ...form, before: 'soon' }, NOW).error).toBe("'soon' is not a date and time I can read.");
    expect(buildSubscriptionRequest({ ...form, before: '2026-03-02T12:00' }, NOW).error).toBe("'Before' leaves no room for 4h.");
  });
});

describe('the words', () => {
  it('formats hours', () => {
    expect([formatHours(4 * 3600), formatHours(5400), formatHours(45 * 60)]).toEqual(['4h', '1h 30m', '45m']);
  });
  it('describes a subscription with and without a deadline', () => {
    expect(subscriptionText(sub(), NOW)).toBe('2 GPUs on gpu3 for 4h, before Fri 18:00');
    const now = sub({ host: null, gpus: 1, starts_now: true, deadline: '2026-03-03T10:00:00+00:00' });
    expect(subscriptionText(now, NOW)).toBe('1 GPU for 4h, free now · watching until Tue 10:00');
    expect(subscriptionText(sub({ host: null, model: 'A100' }), NOW)).toContain('2 GPUs (A100) for 4h');
  });
  it('shows an offer only while it can still be booked', () => {
    const offer = { host: 'gpu3', gpus: ['gpu3:0', 'gpu3:1'], start: '2026-03-02T10:00:00+00:00', end: '2026-03-02T14:00:00+00:00' };
    const fired = sub({ active: false, fired: 1, offer });
    expect(offerText(fired, NOW)).toBe('Free: gpu3:0, gpu3:1 10:00–14:00');
    expect(offerText(fired, new Date('2026-03-02T14:00:00Z'))).toBeNull();
    expect(offerText(sub(), NOW)).toBeNull();
  });
  it('lists my active subscriptions and the fired ones I can still book', () => {
    const offer = { host: 'gpu3', gpus: ['gpu3:0'], start: '2026-03-02T09:00:00Z', end: '2026-03-02T11:00:00Z' };
    const list = [
      sub({ id: 1 }),
      sub({ id: 2, active: false, fired: 1, offer }),
      sub({ id: 3, active: false, fired: 1, offer: { ...offer, end: '2026-03-02T09:30:00Z' } }),
      sub({ id: 4, active: false }),
      sub({ id: 5, owner: 'bob' }) // an admin sees everyone's
    ];
    expect(subscriptionsToShow(list, 'me', NOW).map(s => s.id)).toEqual([1, 2]);
  });
  it('says whether I have a feed (its URL is never shown again)', () => {
    expect(feedText(null, NOW)).toContain('No calendar feed yet');
    expect(feedText({ personal: null, site: [] }, NOW)).toContain('No calendar feed yet');
    const mine = { id: 1, kind: 'user', owner: 'me', host: null, token_hint: '…abcd', created_at: '2026-03-02T09:15:00+00:00' };
    expect(feedText({ personal: mine, site: [] }, NOW)).toBe(
      'Your feed exists since 09:15 (URL ending …abcd.ics). Its URL is shown only when made: a new URL stops the old one.'
    );
  });
});

describe('IntegrationsApi', () => {
  const base = 'http://localhost/';
  it('reads, rotates and passes errors on for the feed', async () => {
    const made = { id: 2, kind: 'user', owner: 'me', host: null, token_hint: '…wxyz', created_at: 'c', url: 'http://localhost/gpuhive/api/calendar/t.ics' };
    const { fetcher, calls } = fake({
      'GET http://localhost/gpuhive/api/feeds': [200, { personal: null, site: [] }],
      'POST http://localhost/gpuhive/api/feeds/personal': [201, made]
    });
    const api = new IntegrationsApi(new HiveApi(base, fetcher));
    expect(await api.feeds()).toEqual({ personal: null, site: [] });
    expect((await api.rotateFeed()).url).toBe(made.url);
    expect(calls.map(c => c.method)).toEqual(['GET', 'POST']);
    const old = new IntegrationsApi(new HiveApi(base, fake({}).fetcher)); // a server without feeds
    await expect(old.feeds()).rejects.toEqual(new HiveApiError('Request failed (404): not found.', 404));
  });
  it('creates, lists, books and cancels subscriptions', async () => {
    const { fetcher, calls } = fake({
      'GET http://localhost/gpuhive/api/subscriptions': [200, { subscriptions: [sub()] }],
      'POST http://localhost/gpuhive/api/subscriptions': [201, sub()],
      'POST http://localhost/gpuhive/api/subscriptions/7/book': [409, { message: 'Those GPUs are not free for that time' }],
      'DELETE http://localhost/gpuhive/api/subscriptions/7': [200, { deleted: true }]
    });
    const api = new IntegrationsApi(new HiveApi(base, fetcher));
    expect((await api.subscribe({ gpus: 2, duration: '240m' })).id).toBe(7);
    expect(JSON.parse(calls[0].body!)).toEqual({ gpus: 2, duration: '240m' });
    expect((await api.subscriptions()).map(s => s.id)).toEqual([7]);
    await expect(api.book(7)).rejects.toThrow('Those GPUs are not free for that time');
    await api.unsubscribe(7);
    expect(calls[3]).toMatchObject({ method: 'DELETE', url: 'http://localhost/gpuhive/api/subscriptions/7' });
  });
});
