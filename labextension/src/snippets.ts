/** The code cells the panel inserts into a notebook. */

import { compactGpus } from './model';

export type WidgetName = 'calendar' | 'overview' | 'dashboard';

export const WIDGETS: { name: WidgetName; label: string }[] = [
  { name: 'calendar', label: 'Calendar' },
  { name: 'overview', label: 'Overview' },
  { name: 'dashboard', label: 'Dashboard' }
];

/** `from jupyter_gpuhive import widgets` + `widgets.calendar()` (or overview / dashboard). */
export function widgetCell(name: WidgetName): string {
  return `from jupyter_gpuhive import widgets\nwidgets.${name}()`;
}

/** A title quoted for the magic's argument parser. */
function quote(text: string): string {
  return `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

/** `%load_ext jupyter_gpuhive` + `%gpureserve gpu1:0,1 --for 2h [--title "..."]`. */
export function gpureserveCell(gpus: string[], duration: string, title = ''): string {
  const what = gpus.length ? compactGpus(gpus) : '1';
  const t = title.trim() ? ` --title ${quote(title.trim())}` : '';
  return `%load_ext jupyter_gpuhive\n%gpureserve ${what} --for ${duration.trim() || '1h'}${t}`;
}
