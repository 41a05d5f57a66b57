/** A fake `fetch` for the client tests: canned replies by "METHOD url", and the calls made. */
import { Fetcher } from '../api';

export type Call = { url: string; method: string; body?: string; headers?: Record<string, string> };

export function fake(replies: Record<string, [number, unknown]>): { fetcher: Fetcher; calls: Call[] } {
  const calls: Call[] = [];
  const fetcher: Fetcher = async (url, init) => {
    calls.push({ url, ...init });
    const key = `${init.method} ${url.replace(/\?.*/, '')}`;
    const [status, data] = replies[key] ?? [404, '<html>Not Found</html>'];
    const text = typeof data === 'string' ? data : JSON.stringify(data);
    return { ok: status < 400, status, text: async () => text };
  };
  return { fetcher, calls };
}
