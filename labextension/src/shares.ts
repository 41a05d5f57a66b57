/**
 * Shares of a GPU in the sidebar (#44): who holds which share of a shareable GPU now, how much
 * memory each holder's processes use there, and what is left. GET hosts lists the shares of
 * each shareable GPU (`shares`); the processes' owners are their UNIX users (gpuhive's user
 * names unless the site maps them).
 */

import { IGpu, IGpuState, formatMemory, formatTime } from './model';

/** One share held now of a GPU (GET hosts' `shares`). */
export interface IShare {
  owner: string;
  share: number;
  memory_mib?: number | null;
  title?: string;
  end?: string;
}

/** The GPU's shares held now, when the server lists them. */
export function sharesOf(gpu: IGpu): IShare[] {
  return ((gpu as IGpu & { shares?: IShare[] | null }).shares ?? []).filter(s => s.share < 1);
}

/** "Shares: you 0.25 (20.0 GiB) uses 6.0 GiB · bob 0.5 (40.0 GiB) uses 41.0 GiB, over · free 0.25", or '' without shares. */
export function shareText(gpu: IGpu, me: string): string {
  const held = sharesOf(gpu);
  if (!held.length) {
    return '';
  }
  const owners = new Map<string, { share: number; mib: number | null }>();
  for (const s of held) {
    const had = owners.get(s.owner) ?? { share: 0, mib: 0 };
    const mib = had.mib === null || s.memory_mib === null || s.memory_mib === undefined ? null : had.mib + s.memory_mib;
    owners.set(s.owner, { share: had.share + s.share, mib });
  }
  const used = new Map<string, number>();
  for (const p of gpu.processes ?? []) {
    if (p.user) {
      used.set(p.user, (used.get(p.user) ?? 0) + (p.used_memory_mib ?? 0));
    }
  }
  const order = [...owners.keys()].sort((a, b) => Number(a !== me) - Number(b !== me) || a.localeCompare(b));
  const parts = order.map(owner => {
    const { share, mib } = owners.get(owner)!;
    const size = mib ? ` (${formatMemory(mib)})` : '';
    const use = used.get(owner) ?? 0;
    const over = mib && use > mib ? ', over its share' : '';
    return `${owner === me ? 'you' : owner} ${+share.toFixed(4)}${size} uses ${formatMemory(use)}${over}`;
  });
  const free = Math.max(0, 1 - [...owners.values()].reduce((sum, o) => sum + o.share, 0));
  return `Shares: ${parts.join(' · ')} · free ${+free.toFixed(4)}`;
}

/**
 * A shared GPU's state for me: when I hold a share of it now, it is mine ("my share until
 * 18:00"), whichever holder's booking the server names as the GPU's `reservation` (before, a GPU
 * whose half I held read "bob until …" when bob's quarter was the one named).
 */
export function shareState(state: IGpuState, gpu: IGpu, me: string, now: Date = new Date()): IGpuState {
  const mine = sharesOf(gpu).filter(s => s.owner === me);
  if (state.kind !== 'reserved' || !mine.length) {
    return state;
  }
  const ends = mine.map(s => s.end ?? '').filter(e => e).sort();
  const until = ends.length ? formatTime(ends[ends.length - 1], now) : '';
  const part = +mine.reduce((sum, s) => sum + s.share, 0).toFixed(4);
  const others = [...new Set(sharesOf(gpu).filter(s => s.owner !== me).map(s => s.owner))];
  const label = until ? `my share until ${until}` : 'my share';
  const too = others.length ? `; ${others.join(', ')} hold${others.length === 1 ? 's' : ''} a share too` : '';
  const detail = `${gpu.id}: shared: you hold ${part} of it${until ? ` until ${until}` : ''}${too}`;
  return { kind: 'mine', label, detail };
}
