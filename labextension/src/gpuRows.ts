/**
 * The sidebar's hosts and GPU rows: each row's state (its bookings, my jobs on it and its
 * health: a failed or drained GPU is never free), checkbox, usage, violations and health notes,
 * and for admins one "⋯" menu. Plain DOM; the decisions come from model.ts, health.ts, jobs.ts.
 */

import { el } from './dom';
import { selectable, healthyState } from './health';
import { HealthRows } from './healthUi';
import { jobsByGpu, myJobText } from './jobs';
import { IGpu, IGpuState, IGuidance, IHost, IJob, bookableUnits, formatUsage, gpuState, vendorLabel, violationNotes } from './model';
import { RowMenu } from './rowMenu';
import { shareState, shareText } from './shares';

/** What the rows are drawn from, besides the hosts. */
export interface IRowContext {
  me: string;
  admin: boolean;
  now: Date;
  jobs: IJob[] | null;
}

export class GpuRows {
  constructor(
    private readonly health: HealthRows,
    private readonly menu: RowMenu,
    private readonly selected: Set<string>,
    private readonly selectionChanged: () => void,
    private readonly guidance: (advice: IGuidance) => HTMLElement
  ) {}

  /** A GPU's state as its row shows it: for `me`, with my jobs and its health. */
  stateFor(ctx: IRowContext): (gpu: IGpu, host: IHost) => IGpuState {
    const mine = jobsByGpu(ctx.jobs);
    return (gpu, host) => {
      const job = mine.get(gpu.id);
      const state = shareState(gpuState(gpu, host.state, ctx.me, ctx.now, job ? myJobText(job) : ''), gpu, ctx.me, ctx.now);
      return healthyState(state, this.health.get(gpu.id));
    };
  }

  /** The hosts' nodes; GPUs that can no longer be selected leave the selection. */
  render(hosts: IHost[], ctx: IRowContext): HTMLElement[] {
    const stateOf = this.stateFor(ctx);
    const selectableNow = new Set<string>();
    const nodes = hosts.map(host => {
      const list = el('ul', { class: 'jp-gpuhive-gpus', 'aria-label': `GPUs of ${host.name}` });
      for (const gpu of bookableUnits(host.gpus)) {
        const state = stateOf(gpu, host);
        if (selectable(state)) {
          selectableNow.add(gpu.id);
        }
        list.append(this._row(gpu, state, ctx));
      }
      const problem = host.state === 'up' ? '' : host.error ? `: ${host.error}` : '';
      const vendor = vendorLabel(hosts, host);
      const name = vendor ? el('span', {}, host.name, el('span', { class: 'jp-gpuhive-host-vendor', title: `${vendor} GPUs` }, vendor)) : host.name;
      return el(
        'div',
        { class: `jp-gpuhive-host jp-gpuhive-host-${host.state}`, 'data-host': host.name },
        el('h4', {}, name, el('span', { class: 'jp-gpuhive-host-state', title: `${host.state}${problem}` }, host.state)),
        host.advice ? this.guidance(host.advice) : '',
        list
      );
    });
    for (const id of [...this.selected]) {
      if (!selectableNow.has(id)) {
        this.selected.delete(id);
      }
    }
    return nodes;
  }

  private _row(gpu: IGpu, state: IGpuState, ctx: IRowContext): HTMLElement {
    const can = selectable(state);
    const why = can ? '' : `${gpu.id} cannot be booked: ${state.detail.replace(`${gpu.id}: `, '')}`;
    const box = el('input', { type: 'checkbox', class: 'jp-gpuhive-select', 'aria-label': `Select ${gpu.id} (${state.label})` });
    box.checked = can && this.selected.has(gpu.id);
    box.disabled = !can;
    if (why) {
      box.title = why;
    }
    box.addEventListener('change', () => {
      if (box.checked) {
        this.selected.add(gpu.id);
      } else {
        this.selected.delete(gpu.id);
      }
      this.selectionChanged();
    });
    const label = el('label', { class: 'jp-gpuhive-gpu-label' }, box, el('span', { class: 'jp-gpuhive-gpu-id' }, gpu.profile ? `${gpu.id} (${gpu.profile})` : gpu.id));
    if (why) {
      label.title = why;
    }
    const actions = this.health.actions(gpu.id, gpu.kind === 'slice', ctx.admin);
    return el(
      'li',
      {
        class: `jp-gpuhive-gpu jp-gpuhive-state-${state.kind}`,
        'data-gpu': gpu.id,
        'data-state': state.kind,
        'data-kind': gpu.kind ?? 'gpu',
        'data-health': this.health.state(gpu.id),
        title: state.detail
      },
      label,
      el('span', { class: 'jp-gpuhive-badge', title: state.detail }, state.label),
      this.menu.button(gpu.id, actions) ?? '',
      el('span', { class: 'jp-gpuhive-usage' }, formatUsage(gpu)),
      ...(shareText(gpu, ctx.me) ? [el('div', { class: 'jp-gpuhive-shares' }, shareText(gpu, ctx.me))] : []),
      el('span', { class: 'jp-gpuhive-sr' }, state.detail),
      ...violationNotes(gpu, ctx.me).map(note => el('div', { class: 'jp-gpuhive-violation' }, note)),
      ...this.health.nodes(gpu.id)
    );
  }
}
