/** jupyter-gpuhive's JupyterLab plugin: the GPU hive sidebar panel. */

import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { LabIcon } from '@jupyterlab/ui-components';

import { Notification } from '@jupyterlab/apputils';

import { Fetcher, HiveApi } from './api';
import { ApprovalSection, tentativeBadge } from './approvalsUi';
import { IHiveEvent, ToastBoard, VIOLATION_SCHEMA, eventToast, openViolations } from './events';
import { IKernelEvent, KERNEL_SCHEMA } from './kernels';
import { KernelSection, KernelStatus, KernelStore, installSwitch, openNotebookButton, showKernelEvent } from './kernelsUi';
import { GpuHivePanel } from './panel';

const PLUGIN_ID = 'jupyter-gpuhive:panel';
const CMD_OPEN = 'gpuhive:open-panel';

export const gpuIcon = new LabIcon({
  name: 'jupyter-gpuhive:gpu',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">' +
    '<g class="jp-icon3" fill="#616161">' +
    '<path d="M4 7h14a2 2 0 0 1 2 2v1h2v2h-2v2h2v2h-2v1a2 2 0 0 1-2 2H4V7zm2 2v8h12V9H6z"/>' +
    '<path d="M8 11h3v4H8zm5 0h3v4h-3zM7 3h2v4H7zm4 0h2v4h-2zm4 0h2v4h-2z"/>' +
    '</g></svg>'
});

/** Insert `code` as a new cell below the active one of the current notebook, or open a new notebook with it. */
async function insertCell(app: JupyterFrontEnd, tracker: INotebookTracker | null, code: string): Promise<void> {
  let panel: NotebookPanel | null = tracker?.currentWidget ?? null;
  let fresh = false;
  if (!panel) {
    panel = (await app.commands.execute('notebook:create-new', { kernelName: 'python3' })) as NotebookPanel;
    fresh = true;
  }
  await panel.context.ready;
  const notebook = panel.content;
  const current = notebook.activeCell;
  if (fresh || !current || (current.model.type === 'code' && current.model.sharedModel.getSource() === '')) {
    // Reuse an empty code cell (the first cell of a new notebook).
  } else {
    NotebookActions.insertBelow(notebook);
  }
  const cell = notebook.activeCell;
  if (cell) {
    if (cell.model.type !== 'code') {
      NotebookActions.changeCellType(notebook, 'code');
    }
    notebook.activeCell!.model.sharedModel.setSource(code);
  }
  app.shell.activateById(panel.id);
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'GPU hive sidebar: which GPUs are free, what I hold, what is running.',
  autoStart: true,
  optional: [ILayoutRestorer, INotebookTracker, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    tracker: INotebookTracker | null,
    statusBar: IStatusBar | null
  ) => {
    const settings = ServerConnection.makeSettings();
    const fetcher: Fetcher = (url, init) =>
      ServerConnection.makeRequest(
        url,
        {
          method: init.method,
          body: init.body,
          headers: { ...(init.body ? { 'Content-Type': 'application/json' } : {}), ...init.headers }
        },
        settings
      );
    const api = new HiveApi(settings.baseUrl, fetcher);
    // Kernels on reservations: the sidebar's section, the status bar's countdown, the switch.
    const kernels = new KernelStore(api);
    // Approvals (#46): bookings that wait for my answer; my own tentative one says so.
    const approvals: ApprovalSection = new ApprovalSection(api, (): Promise<void> => panel.refresh());
    const panel = new GpuHivePanel({
      api,
      insertCell: code => insertCell(app, tracker, code),
      reservationExtras: (r, now) => tentativeBadge(r, now) ?? openNotebookButton(app, r, now),
      sections: [new KernelSection(kernels, tracker), approvals]
    });
    if (statusBar) {
      const status = new KernelStatus(kernels, tracker);
      statusBar.registerStatusItem('jupyter-gpuhive:kernel-countdown', {
        item: status,
        align: 'left',
        rank: 900,
        isActive: () => true // the item hides itself unless the notebook runs on a reservation
      });
    }
    if (tracker) {
      installSwitch(app, tracker);
    }
    panel.title.icon = gpuIcon;
    app.shell.add(panel, 'left', { rank: 900 });
    if (restorer) {
      restorer.add(panel, 'jupyter-gpuhive-panel');
    }
    // Someone on my GPUs (or my reservation idle): the server's event bus, filtered for me.
    const toasts = new ToastBoard({
      emit: (message, level) => Notification.emit(message, level, { autoClose: level === 'warning' ? false : 10000 }),
      update: (id, message, level) =>
        Notification.update({ id, message, type: level, autoClose: level === 'warning' ? false : 10000 })
    });
    // Who I am, asked now: the panel asks only once it is shown, and a window whose sidebar shows
    // something else would drop every event meant for me. The violations going on now are shown
    // at once (the server repeats an event only about once a minute), once per violation.
    let me: string | null = null;
    void (async () => {
      me = (await api.me()).name;
      for (const event of openViolations((await api.hostsReply()).hosts, me)) {
        const toast = eventToast(event, me);
        if (toast) {
          toasts.seed(event, toast);
        }
      }
    })().catch(error => console.warn('gpuhive: could not read the violations going on now', error));
    app.serviceManager.events.stream.connect((_, emission) => {
      const who = me ?? panel.me;
      if (emission.schema_id === KERNEL_SCHEMA) {
        showKernelEvent(emission as unknown as IKernelEvent, who, tracker, kernels);
        return;
      }
      const event = emission as unknown as IHiveEvent;
      const toast = eventToast(event, who);
      if (toast && event.schema_id === VIOLATION_SCHEMA) {
        toasts.show(event, toast); // one notice per violation, updated in place
      } else if (toast) {
        Notification.emit(toast.message, toast.level, { autoClose: 10000 });
      }
    });
    app.commands.addCommand(CMD_OPEN, {
      label: 'Show GPU hive',
      caption: 'Show the GPU hive sidebar',
      icon: gpuIcon,
      execute: () => app.shell.activateById(panel.id)
    });
  }
};

export default plugin;
