/**
 * Kernels on reservations in JupyterLab: the status-bar countdown of the current notebook's
 * GPUs, the sidebar's "My kernels on reservations" section, "Open a notebook here", the
 * switch `%gpureserve --kernel` asks for, and the server's warnings (a notification, and a
 * line in the running cell). Decisions come from kernels.ts.
 */

import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import type { ICodeCellModel } from '@jupyterlab/cells';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Kernel } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { HiveApi } from './api';
import { button, el, section } from './dom';
import {
  IKernelEvent,
  IKernelInfo,
  IKernelList,
  ISwitchRequest,
  POLICY_LABELS,
  SWITCH_TARGET,
  canOpenNotebook,
  endedStatus,
  kernelCountdown,
  kernelNotice,
  notYetReason,
  reservationOfSpec,
  specName,
  switchRequest
} from './kernels';
import { IReservation } from './model';

/** My kernels on reservations, fetched from `GET kernels` (kept between fetches). */
export class KernelStore {
  constructor(private readonly api: HiveApi) {}

  list: IKernelList | null = null;
  private _listeners: (() => void)[] = [];

  onChange(fn: () => void): void {
    this._listeners.push(fn);
  }

  async refresh(): Promise<void> {
    try {
      this.list = await this.api.request<IKernelList>('GET', 'kernels');
    } catch {
      return; // an old server, or a transient error: keep the last list
    }
    for (const fn of this._listeners) {
      fn();
    }
  }

  info(kernelId: string | null | undefined): IKernelInfo | null {
    return this.list?.kernels.find(k => k.id === kernelId) ?? null;
  }

  /** Remember what a kernel event said, and the kernel's GPUs while they are still known. */
  noteEvent(event: IKernelEvent): void {
    if (event.kind === 'ended' && event.kernel_id) {
      this._ended.set(event.kernel_id, { event, gpus: this.info(event.kernel_id)?.gpus ?? [] });
    }
  }

  /** How the reservation of `kernelId` ended, once it has. */
  ended(kernelId: string | null | undefined): { event: IKernelEvent; gpus: string[] } | null {
    return (kernelId && this._ended.get(kernelId)) || null;
  }

  private _ended = new Map<string, { event: IKernelEvent; gpus: string[] }>();

  async choose(kernelId: string, policy: string, fallback?: string): Promise<void> {
    await this.api.request('PUT', `kernels/${encodeURIComponent(kernelId)}/policy`, {
      body: fallback ? { policy, fallback } : { policy }
    });
    await this.refresh();
  }
}

/** The current notebook's kernel, when it runs on a reservation. */
function currentKernel(tracker: INotebookTracker | null): Kernel.IKernelConnection | null {
  const kernel = tracker?.currentWidget?.sessionContext.session?.kernel ?? null;
  return kernel && reservationOfSpec(kernel.name) !== null ? kernel : null;
}

/** The status-bar item: "gpu1:0,1 · 1h 05m left" for the current notebook's GPUs. */
export class KernelStatus extends Widget {
  constructor(
    private readonly store: KernelStore,
    private readonly tracker: INotebookTracker | null
  ) {
    super();
    this.addClass('jp-gpuhive-kernel-status');
    this.node.setAttribute('role', 'timer');
    this.node.setAttribute('aria-label', "How long this notebook's GPUs are its own");
    this._timer = window.setInterval(() => this.update(), 1000);
    store.onChange(() => this.update());
    tracker?.currentChanged.connect(() => {
      void this.store.refresh();
      this.update();
    });
  }

  /** Whether the status bar shows the item (a notebook on a reservation is current). */
  get active(): boolean {
    return currentKernel(this.tracker) !== null || this._endedHere() !== null;
  }

  /** How the current notebook's reservation ended, even once its kernel is gone. */
  private _endedHere(): { event: IKernelEvent; gpus: string[] } | null {
    const widget = this.tracker?.currentWidget;
    const kernel = currentKernel(this.tracker);
    if (widget && kernel) {
      this._last.set(widget.context.path, kernel.id);
    }
    return this.store.ended(kernel?.id ?? (widget ? this._last.get(widget.context.path) : null));
  }

  dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  protected onUpdateRequest(): void {
    const kernel = currentKernel(this.tracker);
    const ended = this._endedHere();
    this.node.hidden = kernel === null && ended === null;
    if (!kernel && !ended) {
      return;
    }
    const info = kernel ? this.store.info(kernel.id) : null;
    const warn = this.store.list?.warning_minutes ?? 10;
    const shown = ended
      ? endedStatus(ended.event, info?.gpus ?? ended.gpus)
      : kernelCountdown(info?.gpus ?? [], info?.end, new Date(), warn, info?.policy);
    this.node.textContent = shown.text;
    this.node.title = shown.title;
    this.node.dataset.urgency = shown.urgency;
    void this._later(info ? 30_000 : 5000);
  }

  private async _later(wait: number): Promise<void> {
    // A kernel that just started is not listed yet (ask again every 5 s); a listed one's end
    // may move (extended, ended early): every 30 s, even while the sidebar is hidden.
    const now = Date.now();
    if (now - this._asked > wait) {
      this._asked = now;
      await this.store.refresh();
    }
  }

  private _timer: number;
  private _asked = 0;
  private _last = new Map<string, string>(); // notebook path → its last kernel on a reservation
}

/** The sidebar's "My kernels on reservations" section, with each kernel's end policy. */
export class KernelSection {
  readonly node: HTMLElement;

  constructor(
    private readonly store: KernelStore,
    private readonly tracker: INotebookTracker | null
  ) {
    this._list = el('ul', { class: 'jp-gpuhive-kernels', 'aria-label': 'My kernels on reservations' });
    this.node = section('My kernels on reservations', 'jp-gpuhive-section-kernels', this._list);
    store.onChange(() => this.render());
  }

  async refresh(): Promise<void> {
    await this.store.refresh();
  }

  render(): void {
    const list = this.store.list;
    const kernels = list?.kernels ?? [];
    this.node.hidden = list === null;
    this._list.replaceChildren(
      ...(kernels.length
        ? kernels.map(k => this._item(k, list!))
        : [el('li', { class: 'jp-gpuhive-empty' }, 'No kernels on reservations')])
    );
    this.tick(new Date());
  }

  tick(now: Date): void {
    const warn = this.store.list?.warning_minutes ?? 10;
    for (const node of this._list.querySelectorAll<HTMLElement>('.jp-gpuhive-kernel-countdown')) {
      const shown = kernelCountdown([], node.dataset.end, now, warn);
      node.textContent = shown.text.replace(/^GPUs · /, '');
      node.dataset.urgency = shown.urgency;
    }
  }

  private _item(k: IKernelInfo, list: IKernelList): HTMLElement {
    const open = this._notebookOf(k.id);
    const policy = el('select', { class: 'jp-gpuhive-kernel-policy', 'aria-label': `At the end of reservation ${k.reservation_id}` });
    for (const p of list.policies) {
      policy.append(el('option', { value: p }, POLICY_LABELS[p] ?? p));
    }
    policy.value = k.policy;
    policy.addEventListener('change', () => void this._choose(k, policy.value));
    return el(
      'li',
      { class: 'jp-gpuhive-kernel', 'data-kernel-id': k.id, 'data-reservation-id': String(k.reservation_id) },
      el('div', { class: 'jp-gpuhive-kernel-where' }, `${k.host ?? ''} ${k.gpus.join(', ')}`.trim()),
      el('div', { class: 'jp-gpuhive-kernel-notebook' }, open ?? `kernel ${k.id.slice(0, 8)}`),
      el('div', { class: 'jp-gpuhive-row' }, el('span', { class: 'jp-gpuhive-kernel-countdown', 'data-end': k.end ?? '' }, ''),
        el('label', {}, 'at the end: ', policy))
    );
  }

  private _notebookOf(kernelId: string): string | null {
    let found: string | null = null;
    this.tracker?.forEach(panel => {
      if (panel.sessionContext.session?.kernel?.id === kernelId) {
        found = panel.context.path;
      }
    });
    return found;
  }

  private async _choose(k: IKernelInfo, policy: string): Promise<void> {
    try {
      await this.store.choose(k.id, policy);
      Notification.info(`At the end of reservation ${k.reservation_id} this kernel will: ${POLICY_LABELS[policy] ?? policy}.`, { autoClose: 4000 });
    } catch (error) {
      Notification.error(`Could not change the end policy: ${(error as Error).message}`);
      this.render();
    }
  }

  private _list: HTMLElement;
}

/** "Open a notebook here" on one of my reservations (disabled until it runs). */
export function openNotebookButton(app: JupyterFrontEnd, r: IReservation, now: Date): HTMLElement {
  const why = notYetReason(r, now);
  const b = button('Open a notebook here', why ?? `Open a notebook whose kernel runs on ${r.gpus.join(', ')}`, () => void openNotebookOn(app, r.id), 'jp-gpuhive-open-notebook');
  b.disabled = !canOpenNotebook(r, now);
  return b;
}

/** A new notebook whose kernel runs on reservation `id`. */
export async function openNotebookOn(app: JupyterFrontEnd, id: number): Promise<void> {
  try {
    await app.serviceManager.kernelspecs.refreshSpecs();
    await app.commands.execute('notebook:create-new', { kernelName: specName(id) });
  } catch (error) {
    Notification.error(`Could not open a notebook on reservation ${id}: ${(error as Error).message}`);
  }
}

/** Listen on every notebook's kernel for `%gpureserve --kernel`'s switch request. */
export function installSwitch(app: JupyterFrontEnd, tracker: INotebookTracker): void {
  const register = (panel: NotebookPanel) => {
    const hook = () => {
      const kernel = panel.sessionContext.session?.kernel;
      kernel?.registerCommTarget(SWITCH_TARGET, (comm, msg) => {
        const wanted = switchRequest(msg.content.data);
        comm.close();
        if (wanted) {
          // Not awaited: the kernel's messages wait for this handler, and the switch waits
          // until the cell that asked is done (its output arrives first).
          void switchOnceIdle(app, panel, kernel, wanted);
        }
      });
    };
    panel.sessionContext.kernelChanged.connect(hook);
    void panel.sessionContext.ready.then(hook);
  };
  tracker.widgetAdded.connect((_, panel) => register(panel));
  tracker.forEach(register);
}

async function switchOnceIdle(
  app: JupyterFrontEnd,
  panel: NotebookPanel,
  kernel: Kernel.IKernelConnection,
  wanted: ISwitchRequest
): Promise<void> {
  await idle(kernel);
  try {
    await app.serviceManager.kernelspecs.refreshSpecs();
    await panel.sessionContext.changeKernel({ name: wanted.kernel_name });
    Notification.info(`This notebook now runs on reservation ${wanted.reservation_id}.`, { autoClose: 6000 });
  } catch (error) {
    Notification.error(`Could not switch to the kernel on reservation ${wanted.reservation_id}: ${(error as Error).message}`);
  }
}

/** Resolves when `kernel` is idle (at once when it is). */
function idle(kernel: Kernel.IKernelConnection): Promise<void> {
  return new Promise(resolve => {
    if (kernel.status === 'idle') {
      resolve();
      return;
    }
    const check = (_: unknown, status: Kernel.Status) => {
      if (status === 'idle' || status === 'dead') {
        kernel.statusChanged.disconnect(check);
        resolve();
      }
    };
    kernel.statusChanged.connect(check);
  });
}

/** A kernel event from the server's bus: a notification, and a line in the running cell. */
export function showKernelEvent(event: IKernelEvent, me: string | null, tracker: INotebookTracker | null, store: KernelStore): void {
  const open = new Set<string>();
  const notebooks = new Map<string, string>();
  tracker?.forEach(panel => {
    const id = panel.sessionContext.session?.kernel?.id;
    if (id) {
      open.add(id);
      notebooks.set(id, panel.context.path);
    }
  });
  const notice = kernelNotice(event, me, open, notebooks);
  store.noteEvent(event);
  if (!notice) {
    return;
  }
  Notification.emit(notice.message, notice.level, { autoClose: notice.level === 'info' ? 8000 : false });
  void store.refresh();
  if (notice.line) {
    tracker?.forEach(panel => {
      const kernel = panel.sessionContext.session?.kernel;
      if (kernel && kernel.id === event.kernel_id && kernel.status === 'busy') {
        writeToRunningCell(panel, notice.line!);
      }
    });
  }
}

/** Append a stderr line to the output of the notebook's running cell(s). */
export function writeToRunningCell(panel: NotebookPanel, line: string): boolean {
  let wrote = false;
  for (const cell of panel.content.widgets) {
    const model = cell.model as ICodeCellModel;
    if (model.type === 'code' && model.executionState === 'running') {
      model.outputs.add({ output_type: 'stream', name: 'stderr', text: `${line}\n` });
      wrote = true;
    }
  }
  return wrote;
}
