/**
 * The sidebar's "Earliest slot" section: ask the server's finder (POST reservations/search)
 * when N GPUs (NVLink-connected, on one NUMA node or one host) are free for some hours, list
 * the best slots, and book one with a click. The request and the words are pure functions here.
 */

import { HiveApi } from './api';
import { button, el, section, sendForm } from './dom';
import { IReservation, formatTime } from './model';

export const MAX_COUNT = 64;

/** One answer of the finder. */
export interface ISlot {
  start: string;
  end: string;
  gpus: string[];
  hosts: string[];
}

/** The form's fields as typed. */
export interface IEarliestForm {
  count: string;
  hours: string;
  nvlink: boolean;
  numa: boolean;
  sameHost: boolean;
}

/** The POST reservations/search body, or the reason in words why it cannot be sent. */
export function buildSearchRequest(form: IEarliestForm): { body?: Record<string, unknown>; error?: string } {
  const count = Number(form.count.trim());
  if (!Number.isInteger(count) || count < 1 || count > MAX_COUNT) {
    return { error: `How many GPUs? A whole number from 1 to ${MAX_COUNT}.` };
  }
  const hours = Number(form.hours.trim());
  if (!form.hours.trim() || !Number.isFinite(hours) || hours <= 0) {
    return { error: 'For how many hours? A number such as 8 or 1.5.' };
  }
  const body: Record<string, unknown> = { count, duration: `${Math.max(1, Math.round(hours * 60))}m`, limit: 5 };
  if (form.nvlink) {
    body.nvlink = true;
  }
  if (form.numa) {
    body.same_numa = true;
  }
  if (form.sameHost) {
    body.same_host = true;
  }
  return { body };
}

/** "gpu1:0, gpu1:1 · Tue 14:00–22:00" */
export function slotText(slot: ISlot, now: Date = new Date()): string {
  return `${slot.gpus.join(', ')} · ${formatTime(slot.start, now)}–${formatTime(slot.end, now)}`;
}

/** The section: the form, the answers, a Book button per answer. */
export class EarliestSection {
  readonly node: HTMLElement;

  /** `booked`: a reservation was made here (the panel then refreshes its lists). */
  constructor(
    private readonly api: HiveApi,
    private readonly booked: () => void = () => undefined
  ) {
    this._count = el('input', { type: 'number', min: '1', max: String(MAX_COUNT), value: '1', class: 'jp-gpuhive-earliest-count', 'aria-label': 'How many GPUs' });
    this._hours = el('input', { type: 'number', min: '0.25', step: '0.25', value: '2', class: 'jp-gpuhive-earliest-hours', 'aria-label': 'For how many hours' });
    this._nvlink = el('input', { type: 'checkbox', class: 'jp-gpuhive-earliest-nvlink' });
    this._numa = el('input', { type: 'checkbox', class: 'jp-gpuhive-earliest-numa' });
    this._sameHost = el('input', { type: 'checkbox', class: 'jp-gpuhive-earliest-host' });
    this._error = el('div', { class: 'jp-gpuhive-earliest-error', role: 'alert', 'aria-live': 'assertive' });
    this._list = el('ul', { class: 'jp-gpuhive-slots', 'aria-label': 'Earliest slots' });
    const find = button('Find', 'Find the earliest slots that fit', () => void this.find(), 'jp-mod-accept jp-gpuhive-earliest-find');
    const form = el(
      'form',
      { class: 'jp-gpuhive-form jp-gpuhive-earliest-form', 'aria-label': 'Find the earliest slot' },
      el('div', { class: 'jp-gpuhive-row' }, this._count, el('label', {}, 'GPUs for ', this._hours, ' h')),
      el(
        'div',
        { class: 'jp-gpuhive-row' },
        el('label', {}, this._nvlink, ' NVLink'),
        el('label', {}, this._numa, ' one NUMA node'),
        el('label', {}, this._sameHost, ' one host')
      ),
      el('div', { class: 'jp-gpuhive-row' }, find),
      this._error
    );
    form.addEventListener('submit', e => {
      e.preventDefault();
      void this.find();
    });
    this.node = section('Earliest slot', 'jp-gpuhive-section-earliest', el('div', {}, form, this._list));
  }

  /** Ask the finder with the form's values and list the answers. */
  async find(): Promise<void> {
    const form = {
      count: this._count.value,
      hours: this._hours.value,
      nvlink: this._nvlink.checked,
      numa: this._numa.checked,
      sameHost: this._sameHost.checked
    };
    await sendForm(
      buildSearchRequest(form),
      this._error,
      body => this.api.request<{ slots: ISlot[] }>('POST', 'reservations/search', { body }),
      found => this._show(found.slots ?? [])
    );
  }

  private _show(slots: ISlot[]): void {
    const now = new Date();
    this._list.replaceChildren(
      ...(slots.length
        ? slots.map(slot => {
            const text = slotText(slot, now);
            return el(
              'li',
              { class: 'jp-gpuhive-slot' },
              el('span', {}, text),
              button('Book', `Book ${text}`, () => void this._book(slot), 'jp-gpuhive-slot-book')
            );
          })
        : [el('li', { class: 'jp-gpuhive-empty' }, 'No slot fits before the booking horizon.')])
    );
  }

  private async _book(slot: ISlot): Promise<void> {
    const body = { title: 'earliest slot', gpus: slot.gpus, start: slot.start, end: slot.end };
    await sendForm<IReservation>({ body }, this._error, b => this.api.reserve(b), () => {
      this._list.replaceChildren(el('li', { class: 'jp-gpuhive-slot-booked' }, `Booked ${slotText(slot)}.`));
      this.booked();
    });
  }

  private _count: HTMLInputElement;
  private _hours: HTMLInputElement;
  private _nvlink: HTMLInputElement;
  private _numa: HTMLInputElement;
  private _sameHost: HTMLInputElement;
  private _error: HTMLElement;
  private _list: HTMLElement;
}
