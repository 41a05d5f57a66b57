/**
 * The sidebar's "Calendar feed" and "Notify me when GPUs free up" sections: make or rotate my
 * feed URL and copy it; ask to be told when N GPUs are free for some hours, list and cancel
 * those requests, book what one offered. Plain DOM; words and bodies come from integrations.ts.
 */

import { Clipboard, Dialog, Notification, showDialog } from '@jupyterlab/apputils';

import { HiveApi, HiveApiError } from './api';
import { button, el, section, sendForm } from './dom';
import {
  IFeedStatus,
  ISubscription,
  IntegrationsApi,
  MAX_GPUS,
  buildSubscriptionRequest,
  feedText,
  offerText,
  subscriptionText,
  subscriptionsToShow
} from './integrations';

export class IntegrationSections {
  /** The sections, in the order the panel shows them. */
  readonly nodes: HTMLElement[];

  /** `booked`: a reservation was made here (the panel then refreshes its lists). */
  constructor(api: HiveApi, booked: () => void = () => undefined) {
    this._api = new IntegrationsApi(api);
    this._booked = booked;

    this._feedText = el('p', { class: 'jp-gpuhive-feed-status' });
    this._feedUrl = el('div', { class: 'jp-gpuhive-feed-url' });
    this._feedUrl.hidden = true;
    this._feedError = el('div', { class: 'jp-gpuhive-feed-error', role: 'alert', 'aria-live': 'assertive' });
    this._rotate = button('New feed URL', 'Make a new calendar feed URL', () => void this._rotateFeed(), 'jp-gpuhive-feed-rotate');
    const feed = el('div', {}, this._feedText, this._feedUrl, el('div', { class: 'jp-gpuhive-row' }, this._rotate), this._feedError);
    this._feedSection = section('Calendar feed', 'jp-gpuhive-section-feed', feed);

    this._count = el('input', { type: 'number', min: '1', max: String(MAX_GPUS), value: '1', class: 'jp-gpuhive-notify-count', 'aria-label': 'How many GPUs' });
    this._host = el('select', { class: 'jp-gpuhive-notify-host', 'aria-label': 'On which host' });
    this._host.append(el('option', { value: '' }, 'any host'));
    this._hours = el('input', { type: 'number', min: '0.25', step: '0.25', value: '2', class: 'jp-gpuhive-notify-hours', 'aria-label': 'For how many hours' });
    this._before = el('input', { type: 'datetime-local', class: 'jp-gpuhive-notify-before', 'aria-label': 'Free before (optional)' });
    this._notifyError = el('div', { class: 'jp-gpuhive-notify-error', role: 'alert', 'aria-live': 'assertive' });
    const submit = button('Notify me', 'Notify me when these GPUs are free', () => void this._subscribe(), 'jp-mod-accept jp-gpuhive-notify');
    const form = el(
      'form',
      { class: 'jp-gpuhive-form jp-gpuhive-notify-form', 'aria-label': 'Notify me when GPUs free up' },
      el('div', { class: 'jp-gpuhive-row' }, this._count, el('label', {}, 'GPUs on ', this._host)),
      el('div', { class: 'jp-gpuhive-row' }, el('label', {}, 'for ', this._hours, ' h')),
      el('div', { class: 'jp-gpuhive-row' }, el('label', {}, 'before ', this._before)),
      el('div', { class: 'jp-gpuhive-hint' }, 'Without "before": GPUs free from now on, watched for 24 hours.'),
      el('div', { class: 'jp-gpuhive-row' }, submit),
      this._notifyError
    );
    form.addEventListener('submit', e => {
      e.preventDefault();
      void this._subscribe();
    });
    this._subsNode = el('ul', { class: 'jp-gpuhive-subscriptions', 'aria-label': 'My GPU notifications' });
    this._notifySection = section('Notify me when GPUs free up', 'jp-gpuhive-section-notify', el('div', {}, form, this._subsNode));
    this.nodes = [this._feedSection, this._notifySection];
  }

  /** The hosts the form offers (kept selection); with none, the notify section hides. */
  setHosts(names: string[]): void {
    const key = names.join('\n');
    if (key !== this._hostKey) {
      this._hostKey = key;
      const chosen = this._host.value;
      this._host.replaceChildren(el('option', { value: '' }, 'any host'), ...names.map(n => el('option', { value: n }, n)));
      this._host.value = names.includes(chosen) ? chosen : '';
    }
    this._hasHosts = names.length > 0;
    this._notifySection.hidden = !this._available || !this._hasHosts;
  }

  /** Fetch my feed and subscriptions; never throws (a server without them hides the sections). */
  async refresh(me: string): Promise<void> {
    this._me = me;
    try {
      const [feeds, subscriptions] = await Promise.all([this._api.feeds(), this._api.subscriptions()]);
      this._available = true;
      this._feeds = feeds;
      this._subscriptions = subscriptions;
    } catch (error) {
      this._available = !(error instanceof HiveApiError && error.status === 404);
    }
    this._render();
  }

  private _render(): void {
    const now = new Date();
    this._feedSection.hidden = !this._available;
    this._notifySection.hidden = !this._available || !this._hasHosts;
    this._feedText.textContent = feedText(this._feeds, now);
    this._rotate.textContent = this._feeds?.personal ? 'New feed URL' : 'Make feed URL';
    const shown = subscriptionsToShow(this._subscriptions, this._me, now);
    this._subsNode.replaceChildren(
      ...(shown.length ? shown.map(s => this._subscriptionItem(s, now)) : [el('li', { class: 'jp-gpuhive-empty' }, 'No GPU notifications')])
    );
  }

  private _subscriptionItem(sub: ISubscription, now: Date): HTMLElement {
    const text = subscriptionText(sub, now);
    const offered = offerText(sub, now);
    const item = el(
      'li',
      { class: `jp-gpuhive-subscription${sub.active ? '' : ' jp-mod-fired'}`, 'data-subscription-id': String(sub.id) },
      el('div', { class: 'jp-gpuhive-sub-text' }, text),
      el('div', { class: 'jp-gpuhive-sub-channels' }, `by ${sub.channels.join(', ')}`)
    );
    const actions = el('div', { class: 'jp-gpuhive-row' });
    if (offered) {
      item.append(el('div', { class: 'jp-gpuhive-sub-offer' }, offered));
      actions.append(button('Book it', `Book it: ${offered}`, () => void this._book(sub), 'jp-mod-accept jp-gpuhive-book'));
    }
    const verb = sub.active ? 'Cancel' : 'Dismiss';
    actions.append(button(verb, `${verb} the notification: ${text}`, () => void this._unsubscribe(sub), 'jp-gpuhive-unsubscribe'));
    item.append(actions);
    return item;
  }

  // --- actions -----------------------------------------------------------------------

  private async _rotateFeed(): Promise<void> {
    if (this._feeds?.personal) {
      const answer = await showDialog({
        title: 'Make a new calendar feed URL?',
        body: 'Calendars subscribed to your current feed URL stop updating (it answers 404); subscribe them to the new one.',
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'New URL' })]
      });
      if (!answer.button.accept) {
        return;
      }
    }
    this._feedError.textContent = '';
    try {
      const made = await this._api.rotateFeed();
      const url = made.url ?? '';
      const copy = button('Copy', 'Copy the calendar feed URL', () => {
        Clipboard.copyToSystem(url);
        copy.textContent = 'Copied';
        window.setTimeout(() => (copy.textContent = 'Copy'), 1500);
      }, 'jp-gpuhive-copy');
      this._feedUrl.replaceChildren(
        el('div', { class: 'jp-gpuhive-command' }, el('code', { class: 'jp-gpuhive-feed-link' }, url), copy),
        el('div', { class: 'jp-gpuhive-hint' }, 'Shown only now: add it to your calendar as a subscription "from URL". Keep it secret.')
      );
      this._feedUrl.hidden = false;
      this._feeds = { personal: made, site: this._feeds?.site ?? [] };
      this._render();
    } catch (error) {
      this._feedError.textContent = (error as Error).message;
    }
  }

  private async _subscribe(): Promise<void> {
    const req = buildSubscriptionRequest({
      count: this._count.value,
      host: this._host.value,
      hours: this._hours.value,
      before: this._before.value
    });
    await sendForm(req, this._notifyError, body => this._api.subscribe(body), async made => {
      Notification.info(`GPU notification made: ${subscriptionText(made)}.`, { autoClose: 5000 });
      await this.refresh(this._me);
    });
  }


  private async _unsubscribe(sub: ISubscription): Promise<void> {
    try {
      await this._api.unsubscribe(sub.id);
    } catch (error) {
      this._notifyError.textContent = (error as Error).message;
    }
    await this.refresh(this._me);
  }

  /** Book what a subscription offered; one that fired for good is then removed. */
  private async _book(sub: ISubscription): Promise<void> {
    try {
      const made = await this._api.book(sub.id);
      Notification.success(`Booked ${made.gpus.join(', ')} (reservation ${made.id}).`, { autoClose: 5000 });
      if (!sub.active) {
        await this._api.unsubscribe(sub.id); // it fired once and its offer is now mine: done
      }
      this._booked();
    } catch (error) {
      this._notifyError.textContent = (error as Error).message;
    }
    await this.refresh(this._me);
  }

  private _api: IntegrationsApi;
  private _booked: () => void;
  private _me = '';
  private _available = true;
  private _hasHosts = false;
  private _hostKey = '';
  private _feeds: IFeedStatus | null = null;
  private _subscriptions: ISubscription[] = [];
  private _feedSection: HTMLElement;
  private _feedText: HTMLElement;
  private _feedUrl: HTMLElement;
  private _feedError: HTMLElement;
  private _rotate: HTMLButtonElement;
  private _notifySection: HTMLElement;
  private _count: HTMLInputElement;
  private _host: HTMLSelectElement;
  private _hours: HTMLInputElement;
  private _before: HTMLInputElement;
  private _notifyError: HTMLElement;
  private _subsNode: HTMLElement;
}
