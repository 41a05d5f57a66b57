/**
 * The sidebar panel: hosts and GPUs, my reservations, my jobs, quick reserve and the
 * notebook shortcuts. Plain DOM; all decisions come from model.ts, api.ts, reminders.ts.
 */

import { Clipboard, Notification, showErrorMessage } from '@jupyterlab/apputils';
import { Poll } from '@lumino/polling';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { HiveApi, LENGTHS, buildReservationRequest } from './api';
import { button, el, section, sendForm } from './dom';
import { EarliestSection } from './earliest';
import { GpuRows } from './gpuRows';
import { HealthRows } from './healthUi';
import { IntegrationSections } from './integrationsPanel';
import { isJobActive, jobStatusText, jobWaitText, jobsToShow } from './jobs';
import { IReclaimSent, loanView, pruneReclaims, reclaimedText } from './lending';
import {
  FALLBACK_SETUP,
  IGuidance,
  IHost,
  IJob,
  IMe,
  IReservation,
  activeReservations,
  formatTime,
  hostGoneText,
  isRunning,
  reservationCountdown,
  summarize,
  summaryText
} from './model';
import { RowMenu } from './rowMenu';
import { dueReminders } from './reminders';
import { WIDGETS, WidgetName, gpureserveCell, widgetCell } from './snippets';

/** Where the panel puts a code cell: the active notebook, else a new one. */
export type CellInserter = (code: string) => Promise<void>;

export interface IPanelOptions {
  api: HiveApi;
  insertCell: CellInserter;
  /** More for each of my reservations (e.g. "Open a notebook here"). */
  reservationExtras?: (r: IReservation, now: Date) => HTMLElement | null;
  /** More sections after my reservations, refreshed and ticked with the panel. */
  sections?: IExtraSection[];
  /** Poll interval in ms (the poll backs off on errors up to `maxInterval`). */
  interval?: number;
  maxInterval?: number;
}

/** A section another module adds (kernelsUi.ts: my kernels on reservations). */
export interface IExtraSection {
  node: HTMLElement;
  refresh(): Promise<void>;
  tick(now: Date): void;
}

export class GpuHivePanel extends Widget {
  constructor(options: IPanelOptions) {
    super();
    this.id = 'jupyter-gpuhive-panel';
    this.addClass('jp-gpuhive-panel');
    this.title.caption = 'GPU hive: GPUs, reservations and jobs';
    this._api = options.api;
    this._insertCell = options.insertCell;
    this._extras = options.reservationExtras ?? null;
    this._sections = options.sections ?? [];
    this._build();
    this._poll = new Poll({
      factory: () => this._refresh(),
      frequency: {
        interval: options.interval ?? 5000,
        backoff: true,
        max: options.maxInterval ?? 60_000
      },
      name: 'jupyter-gpuhive:panel',
      // Pause while the panel or the browser tab is hidden.
      standby: () => !this.isVisible || document.hidden
    });
    this._tick = window.setInterval(() => this._onTick(), 1000);
  }

  get poll(): Poll {
    return this._poll;
  }

  /** Refresh now (after an action, or on show). */
  async refresh(): Promise<void> {
    await this._poll.refresh();
    await this._poll.tick;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    window.clearInterval(this._tick);
    this._menu.node.remove();
    this._poll.dispose();
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this._poll.refresh();
  }

  // --- data --------------------------------------------------------------------------

  private async _refresh(): Promise<void> {
    try {
      if (!this._me) {
        this._me = await this._api.me();
      }
      const me = this._me.name;
      const [reply, reservations, jobs] = await Promise.all([
        this._api.hostsReply(),
        this._api.reservations(me),
        this._api.jobs(me).catch(() => this._jobs), // keep the last jobs on a transient error
        this._integrations.refresh(me), // the feed and GPU notifications (never throws)
        this._health.refresh(), // GET health (never throws)
        ...this._sections.map(x => x.refresh().catch(() => undefined))
      ]);
      this._hosts = reply.hosts;
      this._setup = reply.hosts.length ? null : (reply.setup ?? FALLBACK_SETUP);
      this._note = reply.note ?? '';
      this._reservations = reservations;
      pruneReclaims(this._reclaims, reservations);
      this._jobs = jobs;
      this._updatedAt = new Date();
      this._setStatus(`Updated ${formatTime(this._updatedAt.toISOString())}`, false);
      this._render();
    } catch (error) {
      this._setStatus(`Cannot reach gpuhive: ${(error as Error).message}`, true);
      throw error; // the poll backs off
    }
  }

  // --- layout ------------------------------------------------------------------------

  private _build(): void {
    const root = this.node;
    this._health = new HealthRows(this._api, () => this._render());
    this._menu = new RowMenu();
    this._gpus = new GpuRows(this._health, this._menu, this._selected, () => this._renderSelection(), g => this._guidance(g, 'advice'));
    // Scrolling the panel moves the rows away from an open menu: close it.
    root.addEventListener('scroll', () => this._menu.close(false), { passive: true });
    root.setAttribute('role', 'region');
    root.setAttribute('aria-label', 'GPU hive');

    const refresh = button('⟳', 'Refresh now', () => void this.refresh(), 'jp-gpuhive-refresh');
    this._summary = el('div', { class: 'jp-gpuhive-summary', 'aria-live': 'polite' });
    this._status = el('div', { class: 'jp-gpuhive-status' });
    root.append(el('header', { class: 'jp-gpuhive-header' }, el('h2', {}, 'GPU hive'), refresh), this._summary, this._status);

    // The site's note (a demo says what it holds), when there is one.
    this._noteNode = el('div', { class: 'jp-gpuhive-note', role: 'note' });
    this._noteNode.hidden = true;
    root.append(this._noteNode);

    // With no hosts: the first steps, with copy buttons (hidden otherwise).
    this._setupNode = el('section', { class: 'jp-gpuhive-section jp-gpuhive-section-setup', 'aria-label': 'Set up gpuhive' });
    this._setupNode.hidden = true;
    root.append(this._setupNode);

    this._hostsNode = el('div', { class: 'jp-gpuhive-hosts' });
    this._gpusSection = section('GPUs', 'jp-gpuhive-section-gpus', this._hostsNode);
    root.append(this._gpusSection);

    // Quick reserve: a form kept across renders.
    this._selectedNode = el('div', { class: 'jp-gpuhive-selected' }, 'No GPUs selected');
    this._length = el('select', { class: 'jp-gpuhive-length', 'aria-label': 'Reservation length' });
    for (const l of LENGTHS) {
      this._length.append(el('option', { value: l }, l));
    }
    this._length.value = '2h';
    this._titleInput = el('input', {
      class: 'jp-gpuhive-title',
      type: 'text',
      placeholder: 'Title',
      'aria-label': 'Reservation title',
      maxlength: '200'
    });
    this._formError = el('div', { class: 'jp-gpuhive-error', role: 'alert', 'aria-live': 'assertive' });
    const reserve = button('Reserve', 'Reserve the selected GPUs now', () => void this._reserve(), 'jp-mod-accept jp-gpuhive-reserve');
    const magic = button('%gpureserve', 'Insert a %gpureserve cell for the selected GPUs', () => void this._insertGpureserve(), 'jp-gpuhive-insert-magic');
    const form = el(
      'form',
      { class: 'jp-gpuhive-form', 'aria-label': 'Quick reserve' },
      this._selectedNode,
      el('div', { class: 'jp-gpuhive-row' }, el('label', {}, 'for ', this._length), this._titleInput),
      el('div', { class: 'jp-gpuhive-row' }, reserve, magic),
      this._formError
    );
    form.addEventListener('submit', e => {
      e.preventDefault();
      void this._reserve();
    });
    this._reserveSection = section('Quick reserve', 'jp-gpuhive-section-reserve', form);
    root.append(this._reserveSection);

    this._reservationsNode = el('ul', { class: 'jp-gpuhive-reservations', 'aria-label': 'My reservations' });
    root.append(section('My reservations', 'jp-gpuhive-section-reservations', this._reservationsNode));
    root.append(...this._sections.map(x => x.node));

    this._jobsNode = el('ul', { class: 'jp-gpuhive-jobs', 'aria-label': 'My jobs' });
    this._jobsSection = section('My jobs', 'jp-gpuhive-section-jobs', this._jobsNode);
    this._jobsSection.hidden = true; // until the server answers with a jobs list
    root.append(this._jobsSection);

    const tools = el('div', { class: 'jp-gpuhive-row jp-gpuhive-tools' });
    for (const w of WIDGETS) {
      tools.append(
        button(w.label, `Insert a ${w.label.toLowerCase()} cell into the notebook`, () => void this._insertWidget(w.name), `jp-gpuhive-open-${w.name}`)
      );
    }
    root.append(section('In a notebook', 'jp-gpuhive-section-tools', tools));

    // The calendar feed and "notify me when GPUs free up" (integrationsPanel.ts).
    this._integrations = new IntegrationSections(this._api, () => void this.refresh());
    root.append(...this._integrations.nodes);
    // The earliest slot that fits, from the server's finder (earliest.ts).
    root.append(new EarliestSection(this._api, () => void this.refresh()).node);
    // The menu pops up over everything: in the page's body (a side panel contains what it holds).
    document.body.append(this._menu.node);
  }

  private _setStatus(text: string, error: boolean): void {
    this._status.textContent = text;
    this._status.classList.toggle('jp-gpuhive-status-error', error);
  }

  // --- rendering ---------------------------------------------------------------------

  private _render(): void {
    const me = this._me?.name ?? '';
    const now = new Date();
    const ctx = { me, admin: Boolean(this._me?.admin), now, jobs: this._jobs };
    this._summary.textContent = this._setup ? 'No GPU hosts configured' : summaryText(summarize(this._hosts, me, now, this._gpus.stateFor(ctx)));
    this._noteNode.textContent = this._note;
    this._noteNode.hidden = !this._note;
    this._setupNode.hidden = !this._setup;
    this._setupNode.replaceChildren(...(this._setup ? [this._guidance(this._setup, 'setup')] : []));
    this._gpusSection.hidden = this._reserveSection.hidden = Boolean(this._setup);
    this._integrations.setHosts(this._setup ? [] : this._hosts.map(h => h.name));
    this._hostsNode.replaceChildren(...this._gpus.render(this._hosts, ctx));
    this._renderSelection();

    // My reservations.
    const mine = activeReservations(this._reservations, now);
    this._reservationsNode.replaceChildren(
      ...(mine.length
        ? mine.map(r => this._reservationItem(r, now))
        : [el('li', { class: 'jp-gpuhive-empty' }, 'No current or upcoming reservations')])
    );

    // My jobs (hidden when the server has no jobs API).
    this._jobsSection.hidden = this._jobs === null;
    if (this._jobs !== null) {
      this._jobsNode.replaceChildren(
        ...(this._jobs.length ? jobsToShow(this._jobs).map(j => this._jobItem(j)) : [el('li', { class: 'jp-gpuhive-empty' }, 'No jobs')])
      );
    }
  }

  private _reservationItem(r: IReservation, now: Date): HTMLElement {
    const running = isRunning(r, now);
    const verb = running ? 'End now' : 'Cancel';
    const action = button(verb, `${verb}: reservation '${r.title}'`, () => void this._cancel(r), 'jp-gpuhive-cancel');
    const countdown = el('span', { class: 'jp-gpuhive-countdown', 'data-start': r.start, 'data-end': r.end }, reservationCountdown(r, now));
    const loan = loanView(r, this._reclaims, now);
    return el(
      'li',
      { class: `jp-gpuhive-reservation${running ? ' jp-mod-running' : ''}`, 'data-reservation-id': String(r.id) },
      el('div', { class: 'jp-gpuhive-res-title' }, r.title),
      el('div', { class: 'jp-gpuhive-res-gpus' }, r.gpus.join(', ')),
      el('div', { class: 'jp-gpuhive-res-time' }, `${formatTime(r.start, now)}–${formatTime(r.end, now)} · `, countdown),
      r.flagged ? el('div', { class: 'jp-gpuhive-flag' }, `⚠ ${r.flag_reason ?? 'no longer allowed by the access rules'}`) : '',
      r.hosts_gone?.length ? el('div', { class: 'jp-gpuhive-flag jp-gpuhive-host-gone' }, hostGoneText(r.hosts_gone)) : '',
      loan.text ? el('div', { class: 'jp-gpuhive-lent' }, loan.text) : '',
      action,
      loan.reclaim
        ? button('I need my GPUs now', `Stop the preemptible jobs on reservation '${r.title}'`, () => void this._reclaim(r), 'jp-gpuhive-reclaim')
        : '',
      this._extras?.(r, now) ?? ''
    );
  }

  private _jobItem(job: IJob): HTMLElement {
    const item = el(
      'li',
      { class: `jp-gpuhive-job jp-gpuhive-job-${String(job.status).toLowerCase()}`, 'data-job-id': String(job.id) },
      el('span', { class: 'jp-gpuhive-job-name' }, job.name || `job ${job.id}`),
      el('span', { class: 'jp-gpuhive-badge', title: jobStatusText(job) }, jobStatusText(job)),
      jobWaitText(job) ? el('div', { class: 'jp-gpuhive-job-wait' }, jobWaitText(job)) : ''
    );
    if (isJobActive(job)) {
      item.append(button('Stop', `Stop job '${job.name}'`, () => void this._stopJob(job), 'jp-gpuhive-stop'));
    }
    return item;
  }

  /** Guidance as a message, numbered steps and, for each command, a copy button. */
  private _guidance(guide: IGuidance, kind: 'setup' | 'advice'): HTMLElement {
    const steps = guide.steps.map(step => {
      const item = el('li', { class: 'jp-gpuhive-step' }, el('span', {}, step.text));
      const command = step.command;
      if (command) {
        const copy = button('Copy', `Copy: ${command}`, () => {
          Clipboard.copyToSystem(command);
          copy.textContent = 'Copied';
          window.setTimeout(() => (copy.textContent = 'Copy'), 1500);
        }, 'jp-gpuhive-copy');
        item.append(el('div', { class: 'jp-gpuhive-command' }, el('code', {}, command), copy));
      }
      return item;
    });
    return el(
      'div',
      { class: `jp-gpuhive-guidance jp-gpuhive-${kind}`, role: 'note' },
      el('p', { class: 'jp-gpuhive-guidance-message' }, guide.message),
      el('ol', {}, ...steps),
      guide.note ? el('p', { class: 'jp-gpuhive-guidance-note' }, guide.note) : ''
    );
  }

  private _renderSelection(): void {
    const ids = [...this._selected].sort();
    this._selectedNode.textContent = ids.length ? `Selected: ${ids.join(', ')}` : 'No GPUs selected';
  }

  private _onTick(): void {
    const now = new Date();
    // Reminders from the reservations last fetched, once per 15 s, even while hidden.
    if (now.getTime() - this._lastReminder.getTime() >= 15_000) {
      for (const r of dueReminders(this._reservations, this._lastReminder, now, this._fired)) {
        Notification.info(r.message, { autoClose: r.kind === 'ends-soon' ? false : 8000 });
      }
      this._lastReminder = now;
    }
    if (!this.isVisible) {
      return;
    }
    for (const x of this._sections) {
      x.tick(now);
    }
    for (const node of this._reservationsNode.querySelectorAll<HTMLElement>('.jp-gpuhive-countdown')) {
      node.textContent = reservationCountdown(
        { id: 0, owner: '', title: '', start: node.dataset.start!, end: node.dataset.end! },
        now
      );
    }
  }

  // --- actions -----------------------------------------------------------------------

  private async _reserve(): Promise<void> {
    const req = buildReservationRequest({
      gpus: [...this._selected].sort(),
      duration: this._length.value,
      title: this._titleInput.value
    });
    await sendForm(req, this._formError, body => this._api.reserve(body), async made => {
      this._selected.clear();
      this._titleInput.value = '';
      Notification.success(`Reserved ${made.gpus.join(', ')} until ${formatTime(made.end)} ('${made.title}').`, { autoClose: 5000 });
      await this.refresh();
    });
  }

  private async _cancel(r: IReservation): Promise<void> {
    try {
      await this._api.cancel(r.id);
      await this.refresh();
    } catch (error) {
      await showErrorMessage('Could not change the reservation', (error as Error).message);
    }
  }

  private async _reclaim(r: IReservation): Promise<void> {
    try {
      const reply = await this._api.reclaim(r.id);
      this._reclaims.set(r.id, { ...reply, at: Date.now() });
      this._render(); // at once: the row no longer offers what was just done
      Notification.success(reclaimedText(r.id, reply), { autoClose: 8000 });
      await this.refresh();
    } catch (error) {
      await showErrorMessage('Could not take the GPUs back', (error as Error).message);
    }
  }

  private async _stopJob(job: IJob): Promise<void> {
    try {
      await this._api.stopJob(job.id);
      await this.refresh();
    } catch (error) {
      await showErrorMessage('Could not stop the job', (error as Error).message);
    }
  }

  private async _insertWidget(name: WidgetName): Promise<void> {
    await this._insertCell(widgetCell(name));
  }

  private async _insertGpureserve(): Promise<void> {
    await this._insertCell(gpureserveCell([...this._selected].sort(), this._length.value, this._titleInput.value));
  }

  private _api: HiveApi;
  private _insertCell: CellInserter;
  private _extras: ((r: IReservation, now: Date) => HTMLElement | null) | null;
  private _sections: IExtraSection[];
  private _poll: Poll;
  private _tick: number;
  private _me: IMe | null = null;

  /** The user this panel shows (null until the server answered). */
  get me(): string | null {
    return this._me?.name ?? null;
  }
  private _hosts: IHost[] = [];
  private _setup: IGuidance | null = null;
  private _note = '';
  private _noteNode!: HTMLElement;
  private _setupNode!: HTMLElement;
  private _gpusSection!: HTMLElement;
  private _reserveSection!: HTMLElement;
  private _reservations: IReservation[] = [];
  private _jobs: IJob[] | null = null;
  private _updatedAt: Date | null = null;
  private _selected = new Set<string>();
  private _fired = new Set<string>();
  private _lastReminder = new Date();
  private _summary!: HTMLElement;
  private _status!: HTMLElement;
  private _hostsNode!: HTMLElement;
  private _selectedNode!: HTMLElement;
  private _length!: HTMLSelectElement;
  private _titleInput!: HTMLInputElement;
  private _formError!: HTMLElement;
  private _reservationsNode!: HTMLElement;
  private _jobsNode!: HTMLElement;
  private _jobsSection!: HTMLElement;
  private _integrations!: IntegrationSections;
  private _health!: HealthRows;
  private _menu!: RowMenu;
  private _gpus!: GpuRows;
  private _reclaims = new Map<number, IReclaimSent>();
}
