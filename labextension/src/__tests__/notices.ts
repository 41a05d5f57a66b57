import { INotifier } from '../events';

/** A notice list like JupyterLab's: emit adds, update replaces, the user may dismiss. */
export class FakeNotices implements INotifier {
  shown = new Map<string, string>();
  emitted = 0;
  emit(message: string): string {
    const id = `n${++this.emitted}`;
    this.shown.set(id, message);
    return id;
  }
  update(id: string, message: string): boolean {
    if (!this.shown.has(id)) {
      return false;
    }
    this.shown.set(id, message);
    return true;
  }
}
