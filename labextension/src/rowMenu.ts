/**
 * The admin menu of a GPU's row: one small "⋯" button per row opens a short list of actions
 * (drain, end the drain), so admin actions never take a row of their own. One popup for the
 * whole panel, kept outside the rows the poll redraws; Escape, a click elsewhere or scrolling
 * closes it.
 */

import { el } from './dom';

/** One action of the menu. */
export interface IRowAction {
  label: string;
  /** The accessible name and tooltip: what it does. */
  title: string;
  run: () => void;
}

export class RowMenu {
  /** The popup (append it once to the panel). */
  readonly node: HTMLElement = el('div', { class: 'jp-gpuhive-rowmenu', role: 'menu' });

  constructor() {
    this.node.hidden = true;
    this.node.addEventListener('keydown', e => {
      if (e.key === 'Escape') {
        e.preventDefault();
        this.close(true);
      }
    });
    document.addEventListener('mousedown', e => {
      if (!this.node.hidden && !this.node.contains(e.target as Node) && e.target !== this._anchor) {
        this.close(false);
      }
    });
  }

  /** The "⋯" button of a row (none when there is nothing to offer). */
  button(what: string, actions: IRowAction[]): HTMLButtonElement | null {
    if (!actions.length) {
      return null;
    }
    const name = `Admin actions for ${what}`;
    const b = el('button', { type: 'button', class: 'jp-gpuhive-button jp-gpuhive-rowmenu-button', 'aria-label': name, title: name, 'aria-haspopup': 'menu', 'aria-expanded': 'false' }, '⋯');
    b.addEventListener('click', () => (this._anchor === b && !this.node.hidden ? this.close(true) : this.open(b, actions)));
    return b;
  }

  /** Open the menu under `anchor` with `actions`, focusing the first. */
  open(anchor: HTMLElement, actions: IRowAction[]): void {
    this.close(false);
    this._anchor = anchor;
    anchor.setAttribute('aria-expanded', 'true');
    this.node.replaceChildren(
      ...actions.map(a => {
        const item = el('button', { type: 'button', role: 'menuitem', class: 'jp-gpuhive-rowmenu-item', 'aria-label': a.title, title: a.title }, a.label);
        item.addEventListener('click', () => {
          this.close(false);
          a.run();
        });
        return item;
      })
    );
    const box = anchor.getBoundingClientRect();
    this.node.style.top = `${box.bottom + 2}px`;
    this.node.style.right = `${Math.max(0, document.documentElement.clientWidth - box.right)}px`;
    this.node.hidden = false;
    (this.node.firstElementChild as HTMLElement | null)?.focus();
  }

  /** Close the menu (`refocus`: back to its button, as after Escape). */
  close(refocus: boolean): void {
    if (this.node.hidden) {
      return;
    }
    this.node.hidden = true;
    this._anchor?.setAttribute('aria-expanded', 'false');
    if (refocus && this._anchor?.isConnected) {
      this._anchor.focus();
    }
  }

  private _anchor: HTMLElement | null = null;
}
