/**
 * Toasts from the server's event bus: gpuhive emits an event when someone runs on GPUs that
 * another user reserved (or leaves a reservation idle). Only the people concerned see it.
 */

export const VIOLATION_SCHEMA = 'https://events.jupyter.org/jupyter_gpuhive/violation';
/** GPUs an availability subscription asked for are free (docs/integrations.md). */
export const AVAILABILITY_SCHEMA = 'https://events.jupyter.org/jupyter_gpuhive/availability';

export interface IHiveEvent {
  schema_id?: string;
  kind?: string;
  message?: string;
  holder?: string | null;
  offender?: string | null;
  gpu?: string;
  host?: string;
  user?: string;
}

export interface IToast {
  level: 'warning' | 'info';
  message: string;
}

/** The toast `me` should see for an event of the bus, or null when it is not about them. */
export function eventToast(event: IHiveEvent, me: string | null | undefined): IToast | null {
  if (me && event.schema_id === AVAILABILITY_SCHEMA) {
    return event.user === me
      ? { level: 'info', message: event.message || 'GPUs you asked for are free.' }
      : null;
  }
  if (!me || event.schema_id !== VIOLATION_SCHEMA) {
    return null;
  }
  const where = event.gpu ? ` (${event.gpu})` : '';
  if (event.kind === 'idle') {
    return event.holder === me
      ? { level: 'info', message: event.message || `Your reserved GPUs${where} are idle.` }
      : null;
  }
  if (event.holder === me && event.offender && event.offender !== me) {
    return {
      level: 'warning',
      message: `${event.offender} is running on your reserved GPU${where}. ${event.message ?? ''}`.trim()
    };
  }
  if (event.offender === me) {
    return { level: 'warning', message: event.message || `Your process on ${event.gpu} breaks a reservation.` };
  }
  return null;
}
