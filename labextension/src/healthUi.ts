/**
 * GPU health on the sidebar's GPU rows (health.ts decides, this draws): a note per finding
 * (failed or degraded with the reasons, drained with who and why) and, for admins, Drain or
 * End the drain in each whole GPU's row menu (rowMenu.ts).
 */

import { InputDialog, showErrorMessage } from '@jupyterlab/apputils';

import { HiveApi } from './api';
import { el } from './dom';
import { IGpuHealth, drainAction, fetchHealth, healthByGpu, healthNotes, setDrain } from './health';
import { IRowAction } from './rowMenu';

export class HealthRows {
  constructor(
    private readonly api: HiveApi,
    private readonly changed: () => void
  ) {}

  /** Fetch GET health (kept as it was on an error: the rows then show the last known). */
  async refresh(): Promise<void> {
    try {
      this._byGpu = healthByGpu(await fetchHealth(this.api));
    } catch {
      // an older server without GET health, or a transient error
    }
  }

  /** The health of one row's GPU, if known. */
  get(gpu: string): IGpuHealth | undefined {
    return this._byGpu.get(gpu);
  }

  /** The health of one row's GPU, if known (its state, for the row's data attribute). */
  state(gpu: string): string {
    return this._byGpu.get(gpu)?.state ?? 'ok';
  }

  /** The notes a GPU's row gets: its health, worst first, then its drain. */
  nodes(gpu: string): HTMLElement[] {
    return healthNotes(this._byGpu.get(gpu)).map(note =>
      el('div', { class: `jp-gpuhive-health jp-gpuhive-health-${note.kind}`, role: 'note' }, note.text)
    );
  }

  /** The admin actions of a GPU's row menu: drain, or end the drain (whole GPUs only). */
  actions(gpu: string, isSlice: boolean, admin: boolean): IRowAction[] {
    const action = drainAction(this._byGpu.get(gpu), admin, isSlice);
    if (action === 'drain') {
      return [{ label: 'Drain…', title: `Drain ${gpu} for maintenance (no new bookings; holders are told)`, run: () => void this._drain(gpu, true) }];
    }
    if (action === 'undrain') {
      return [{ label: 'End the drain', title: `End the drain of ${gpu}: it takes bookings again`, run: () => void this._drain(gpu, false) }];
    }
    return [];
  }

  private async _drain(gpu: string, drain: boolean): Promise<void> {
    let reason: string | undefined;
    if (drain) {
      const asked = await InputDialog.getText({
        title: `Drain ${gpu}`,
        label: 'Why (shown to users; optional)',
        placeholder: 'e.g. fan replacement',
        okLabel: 'Drain'
      });
      if (!asked.button.accept) {
        return;
      }
      reason = asked.value ?? undefined;
    }
    try {
      const now = await setDrain(this.api, gpu, drain, reason);
      this._byGpu.set(gpu, { ...(this._byGpu.get(gpu) ?? {}), ...now, gpu });
      this.changed();
    } catch (error) {
      await showErrorMessage(drain ? 'Could not drain the GPU' : 'Could not end the drain', (error as Error).message);
    }
  }

  private _byGpu = new Map<string, IGpuHealth>();
}
