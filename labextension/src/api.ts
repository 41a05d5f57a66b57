/**
 * Talking to the gpuhive REST API under `{base_url}gpuhive/api/`: URL and body building,
 * error extraction, and a small client over an injected `fetch` (ServerConnection in the
 * extension, a fake in the unit tests). No JupyterLab imports here.
 */

import { IReclaimed } from './lending';
import { IHost, IHostsReply, IJob, IMe, IReservation } from './model';

export const API_PREFIX = 'gpuhive/api/';

/** Lengths offered by quick reserve (the server accepts e.g. 90m, 2h, 1d). */
export const LENGTHS = ['30m', '1h', '2h', '4h', '8h', '1d'];

const DURATION = /^\s*\d+(\.\d+)?\s*(m|min|h|d)\s*$/i;

/** An error that carries the server's message in words. */
export class HiveApiError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
    this.name = 'HiveApiError';
  }
}

/** `{base}gpuhive/api/{path}?{query}`, skipping empty query values. */
export function apiUrl(
  baseUrl: string,
  path: string,
  query: Record<string, string | undefined> = {}
): string {
  const base = baseUrl.endsWith('/') ? baseUrl : baseUrl + '/';
  const params = Object.entries(query)
    .filter(([, v]) => v !== undefined && v !== '')
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v as string)}`)
    .join('&');
  const clean = path.replace(/^\/+/, '');
  return `${base}${API_PREFIX}${clean}${params ? '?' + params : ''}`;
}

export interface IQuickReserve {
  gpus: string[];
  duration: string;
  title: string;
}

/**
 * The POST body for a reservation starting now, or an error message in words when the form
 * cannot be sent.
 */
export function buildReservationRequest(form: IQuickReserve): { body?: Record<string, unknown>; error?: string } {
  if (!form.gpus.length) {
    return { error: 'Select at least one GPU to reserve.' };
  }
  const duration = form.duration.trim();
  if (!DURATION.test(duration)) {
    return { error: `'${form.duration}' is not a length I can read; use e.g. 30m, 2h or 1d.` };
  }
  const title = form.title.trim() || 'Quick reservation';
  return { body: { title, gpus: [...form.gpus], duration } };
}

function statusWords(status: number, statusText?: string): string {
  const words: Record<number, string> = {
    400: 'the request was malformed',
    401: 'you are not logged in',
    403: 'that is not allowed',
    404: 'not found',
    409: 'it conflicts with another reservation',
    422: 'the values were not accepted',
    500: 'the server failed'
  };
  return statusText || words[status] || 'the request failed';
}

/** The server's `{"message": ...}` in words, or a sentence built from the status. */
export function errorMessage(status: number, body: string, statusText?: string): string {
  const text = (body || '').trim();
  if (text) {
    try {
      const data = JSON.parse(text);
      if (data && typeof data === 'object') {
        for (const key of ['message', 'reason', 'error']) {
          const value = (data as Record<string, unknown>)[key];
          if (typeof value === 'string' && value.trim()) {
            return value.trim();
          }
        }
      }
    } catch {
      // Not JSON (an HTML error page): fall through to the status.
    }
  }
  return `Request failed (${status}): ${statusWords(status, statusText)}.`;
}

/** The parts of a fetch Response the client reads. */
export interface IResponseLike {
  ok: boolean;
  status: number;
  statusText?: string;
  headers?: { get(name: string): string | null };
  text(): Promise<string>;
}

export type FetchInit = { method: string; body?: string; headers?: Record<string, string> };
export type Fetcher = (url: string, init: FetchInit) => Promise<IResponseLike>;

/** A new Idempotency-Key: 32 random hex digits (crypto.randomUUID needs a secure context). */
export function newIdempotencyKey(): string {
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, b => b.toString(16).padStart(2, '0')).join('');
}

/** Seconds a busy answer (503, or 409 for a key still in use) asks to wait; null: do not retry. */
export function retryAfter(response: IResponseLike): number | null {
  if (response.status !== 503 && response.status !== 409) {
    return null;
  }
  const value = Number(response.headers?.get('Retry-After') ?? NaN);
  return Number.isFinite(value) && value >= 0 ? Math.min(value, 10) : null;
}

/**
 * A thin client; `fetcher` adds the server's auth (ServerConnection.makeRequest). Every POST
 * carries a new Idempotency-Key, and a busy answer with Retry-After is asked again (same key,
 * up to `retries` times): a booking is never made twice.
 */
export class HiveApi {
  retries = 2;

  constructor(
    private readonly baseUrl: string,
    private readonly fetcher: Fetcher
  ) {}

  async request<T>(
    method: string,
    path: string,
    options: { query?: Record<string, string | undefined>; body?: unknown } = {}
  ): Promise<T> {
    const url = apiUrl(this.baseUrl, path, options.query);
    const init: FetchInit = { method };
    if (options.body !== undefined) {
      init.body = JSON.stringify(options.body);
    }
    if (method === 'POST') {
      init.headers = { 'Idempotency-Key': newIdempotencyKey() };
    }
    let response = await this.fetcher(url, init);
    for (let attempt = 0; attempt < this.retries; attempt++) {
      const wait = retryAfter(response);
      if (wait === null) {
        break;
      }
      await new Promise(resolve => setTimeout(resolve, wait * 1000));
      response = await this.fetcher(url, init);
    }
    const text = await response.text();
    if (!response.ok) {
      throw new HiveApiError(errorMessage(response.status, text, response.statusText), response.status);
    }
    return (text ? JSON.parse(text) : {}) as T;
  }

  me(): Promise<IMe> {
    return this.request<IMe>('GET', 'me');
  }

  async hosts(): Promise<IHost[]> {
    return (await this.hostsReply()).hosts;
  }

  /** The hosts and, when there are none, the server's first steps (`setup`). */
  async hostsReply(): Promise<IHostsReply> {
    const reply = await this.request<IHostsReply>('GET', 'hosts');
    return { hosts: reply.hosts ?? [], setup: reply.setup ?? null, note: reply.note ?? null };
  }

  async reservations(user: string): Promise<IReservation[]> {
    const data = await this.request<{ reservations: IReservation[] }>('GET', 'reservations', {
      query: { user }
    });
    return data.reservations ?? [];
  }

  reserve(body: Record<string, unknown>): Promise<IReservation> {
    return this.request<IReservation>('POST', 'reservations', { body });
  }

  /** Cancel an upcoming reservation, or end a running one now. */
  cancel(id: number): Promise<IReservation> {
    return this.request<IReservation>('DELETE', `reservations/${id}`);
  }

  /** My jobs, or `null` when the server has no jobs API (404): the panel then hides the section. */
  async jobs(user: string): Promise<IJob[] | null> {
    try {
      const data = await this.request<{ jobs?: IJob[] }>('GET', 'jobs', { query: { user } });
      return data.jobs ?? [];
    } catch (error) {
      if (error instanceof HiveApiError && error.status === 404) {
        return null;
      }
      throw error;
    }
  }

  /** "I need my GPUs now": stop the preemptible jobs on reservation `id`'s GPUs. */
  reclaim(id: number): Promise<IReclaimed> {
    return this.request<IReclaimed>('POST', `reservations/${encodeURIComponent(String(id))}/reclaim`);
  }

  stopJob(id: number | string): Promise<unknown> {
    return this.request('POST', `jobs/${encodeURIComponent(String(id))}/stop`);
  }
}
