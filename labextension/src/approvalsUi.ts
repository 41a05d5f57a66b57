/**
 * Approvals in the sidebar (issue #46): "Awaiting my approval" lists the tentative bookings I
 * may answer, each with Approve and Decline (which asks for an optional reason); my own
 * tentative booking says it waits. Decisions and words come from approvals.ts.
 */

import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { HiveApi } from './api';
import { IApprovable, answerRequest, askText, awaitingMe, isTentative, tentativeText } from './approvals';
import { button, el, section } from './dom';
import { IReservation } from './model';
import type { IExtraSection } from './panel';

/** The badge and line under my own tentative booking (null: it does not wait). */
export function tentativeBadge(r: IReservation, now: Date): HTMLElement | null {
  const res = r as IApprovable;
  if (!isTentative(res)) {
    return null;
  }
  return el(
    'div',
    { class: 'jp-gpuhive-tentative' },
    el('span', { class: 'jp-gpuhive-badge jp-gpuhive-badge-tentative' }, 'tentative'),
    ' ',
    tentativeText(res, now)
  );
}

/** "Awaiting my approval": hidden unless a booking waits for my answer. */
export class ApprovalSection implements IExtraSection {
  constructor(private readonly api: HiveApi, private readonly changed: () => Promise<void> = async () => undefined) {
    this._list = el('ul', { class: 'jp-gpuhive-approvals', 'aria-label': 'Awaiting my approval' });
    this.node = section('Awaiting my approval', 'jp-gpuhive-section-approvals', this._list);
    this.node.hidden = true;
  }

  readonly node: HTMLElement;

  async refresh(): Promise<void> {
    try {
      const data = await this.api.request<{ reservations: IApprovable[] }>('GET', 'reservations');
      this._waiting = awaitingMe(data.reservations ?? []);
    } catch {
      return; // a transient error: keep the last list
    }
    this._draw(new Date());
  }

  tick(_now: Date): void {
    // nothing counts down here
  }

  private _draw(now: Date): void {
    this.node.hidden = this._waiting.length === 0;
    this._list.replaceChildren(...this._waiting.map(r => this._item(r, now)));
  }

  private _item(r: IApprovable, now: Date): HTMLElement {
    return el(
      'li',
      { class: 'jp-gpuhive-approval', 'data-reservation-id': String(r.id) },
      el('span', { class: 'jp-gpuhive-badge jp-gpuhive-badge-tentative' }, 'tentative'),
      ' ',
      el('span', { class: 'jp-gpuhive-approval-text' }, askText(r, now)),
      el(
        'div',
        { class: 'jp-gpuhive-approval-actions' },
        button('Approve', `Approve ${r.owner}'s booking '${r.title}'`, () => void this._answer(r, 'approve'), 'jp-mod-accept jp-gpuhive-approve'),
        button('Decline', `Decline ${r.owner}'s booking '${r.title}'`, () => void this._answer(r, 'decline'), 'jp-gpuhive-decline')
      )
    );
  }

  private async _answer(r: IApprovable, outcome: 'approve' | 'decline'): Promise<void> {
    let reason = '';
    if (outcome === 'decline') {
      const input = el('input', { type: 'text', class: 'jp-gpuhive-decline-reason', 'aria-label': 'Reason (optional)', placeholder: 'Reason (optional)' });
      const body = new Widget({ node: el('div', {}, el('p', {}, `Decline ${r.owner}'s booking '${r.title}'? Its GPUs become free.`), input) });
      const result = await showDialog({ title: 'Decline the booking', body, buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Decline' })] });
      if (!result.button.accept) {
        return;
      }
      reason = input.value;
    }
    const { path, body } = answerRequest(r.id, outcome, reason);
    try {
      await this.api.request('POST', path, body ? { body } : {});
    } catch (error) {
      await showErrorMessage(`Could not ${outcome} the booking`, (error as Error).message);
    }
    await this.refresh();
    await this.changed();
  }

  private _list: HTMLElement;
  private _waiting: IApprovable[] = [];
}
