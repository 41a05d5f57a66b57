/**
 * GPU health on the sidebar's GPU rows (health.ts decides, this draws): a note per finding
 * (failed or degraded with the reasons, drained with who and why) and, for admins, a Drain or
 * Undrain button on each whole GPU.
 */

import { InputDialog, showErrorMessage } from '@jupyterlab/apputils';

import { HiveApi } from './api';
import { button, el } from './dom';
import { IGpuHealth, drainAction, fetchHealth, healthByGpu, healthNotes, setDrain } from './health';

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

  /** The health of one row's GPU, if known (its state, for the row's data attribute). */
  state(gpu: string): string {
    return this._byGpu.get(gpu)?.state ?? 'ok';
  }

  /** The nodes a GPU's row gets: its health notes and, for admins, the drain action. */
  nodes(gpu: string, isSlice: boolean, admin: boolean): HTMLElement[] {
    const h = this._byGpu.get(gpu);
    const out: HTMLElement[] = healthNotes(h).map(note =>
      el('div', { class: `jp-gpuhive-health jp-gpuhive-health-${note.kind}`, role: 'note' }, note.text)
    );
    const action = drainAction(h, admin, isSlice);
    if (action === 'drain') {
      out.push(button('Drain', `Drain ${gpu} for maintenance (no new bookings; holders are told)`, () => void this._drain(gpu, true), 'jp-gpuhive-drain'));
    } else if (action === 'undrain') {
      out.push(button('Undrain', `End the drain of ${gpu}: it takes bookings again`, () => void this._drain(gpu, false), 'jp-gpuhive-undrain'));
    }
    return out;
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
