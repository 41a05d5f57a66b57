/**
 * GPU health in the sidebar, the pure part: GET health's answer by GPU, the words a row
 * shows (failed/degraded with the reasons, drained with who and why) and which rows an
 * admin may drain or undrain. No DOM here (healthUi.ts draws it).
 */

import { HiveApi } from './api';
import type { IGpuState } from './model';

/** One GPU or MIG slice as GET health reports it. */
export interface IGpuHealth {
  gpu: string;
  uuid?: string;
  host?: string;
  state: 'ok' | 'degraded' | 'failed' | string;
  reasons: string[];
  since?: string | null;
  drained: boolean;
  drained_by?: string | null;
  drain_reason?: string | null;
  bookable?: boolean;
}

/** What a GPU's row says about its health; null when it is ok and not drained. */
export interface IHealthNote {
  kind: 'failed' | 'degraded' | 'drained';
  text: string;
}

/** GET health's answer, by GPU ref ('host:index', a slice's own ref). */
export function healthByGpu(list: IGpuHealth[]): Map<string, IGpuHealth> {
  return new Map(list.map(h => [h.gpu, h]));
}

/** The notes a row shows: its health (worst first), then its drain. */
export function healthNotes(h: IGpuHealth | undefined): IHealthNote[] {
  if (!h) {
    return [];
  }
  const notes: IHealthNote[] = [];
  const reasons = (h.reasons ?? []).join('; ');
  if (h.state === 'failed') {
    notes.push({ kind: 'failed', text: `Failed: ${reasons || 'the health check failed'}. Not bookable.` });
  } else if (h.state === 'degraded') {
    notes.push({ kind: 'degraded', text: `Degraded: ${reasons || 'an admin should look'}.` });
  }
  if (h.drained) {
    const by = h.drained_by ? ` by ${h.drained_by}` : '';
    const why = h.drain_reason ? `: ${h.drain_reason}` : '';
    notes.push({ kind: 'drained', text: `Drained for maintenance${by}${why}. Not bookable.` });
  }
  return notes;
}

/**
 * A GPU's state with its health: a failed or drained GPU is never free, whatever its bookings
 * say (its badge, colour, the summary's count and its checkbox follow). A GPU whose host is down
 * stays down; who holds it still shows after the word.
 */
export function healthyState(state: IGpuState, h: IGpuHealth | undefined): IGpuState {
  const failed = h?.state === 'failed';
  if (!h || (!failed && !h.drained) || state.kind === 'down') {
    return state;
  }
  const held = ['mine', 'reserved', 'busy'].includes(state.kind) ? ` · ${state.label}` : '';
  const why = failed
    ? `failed: ${(h.reasons ?? []).join('; ') || 'the health check failed'}`
    : `drained for maintenance${h.drained_by ? ` by ${h.drained_by}` : ''}${h.drain_reason ? ` (${h.drain_reason})` : ''}`;
  return {
    kind: failed ? 'failed' : 'drained',
    label: `${failed ? 'failed' : 'drained'}${held}`,
    detail: `${h.gpu}: ${why}; it cannot be booked${held ? `; ${state.detail.replace(`${h.gpu}: `, '')}` : ''}`
  };
}

/** Whether a row in this state may be selected for booking (a checkbox's enabled state). */
export function selectable(state: IGpuState): boolean {
  return !['down', 'failed', 'drained'].includes(state.kind);
}

/** The drain action an admin gets on a row: whole GPUs only (a slice follows its GPU). */
export function drainAction(h: IGpuHealth | undefined, admin: boolean, isSlice: boolean): 'drain' | 'undrain' | null {
  if (!admin || isSlice || !h) {
    return null;
  }
  return h.drained ? 'undrain' : 'drain';
}

/** GET health: every GPU and slice (an empty list when the server has no health API). */
export async function fetchHealth(api: HiveApi): Promise<IGpuHealth[]> {
  const reply = await api.request<{ gpus?: IGpuHealth[] }>('GET', 'health');
  return reply.gpus ?? [];
}

/** POST health/drain (admins): drain a GPU with an optional reason, or end its drain. */
export function setDrain(api: HiveApi, gpu: string, drain: boolean, reason?: string): Promise<IGpuHealth> {
  const body: Record<string, unknown> = { gpu, drain };
  if (drain && reason && reason.trim()) {
    body.reason = reason.trim();
  }
  return api.request<IGpuHealth>('POST', 'health/drain', { body });
}
