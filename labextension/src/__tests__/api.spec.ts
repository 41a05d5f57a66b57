import { Fetcher, HiveApi, HiveApiError, apiUrl, buildReservationRequest, errorMessage } from '../api';
import { fake } from './fetcher';

describe('apiUrl', () => {
  it('joins base, prefix, path and query', () => {
    expect(apiUrl('http://h/base/', 'reservations', { user: 'a b', start: undefined, x: '' })).toBe(
      'http://h/base/gpuhive/api/reservations?user=a%20b'
    );
    expect(apiUrl('/lab', '/hosts')).toBe('/lab/gpuhive/api/hosts');
  });
});

describe('buildReservationRequest', () => {
  it('builds the POST body', () => {
    expect(buildReservationRequest({ gpus: ['gpu1:0', 'gpu1:1'], duration: ' 2h ', title: ' sweep ' })).toEqual({
      body: { title: 'sweep', gpus: ['gpu1:0', 'gpu1:1'], duration: '2h' }
    });
  });
  it('gives a default title', () => {
    expect(buildReservationRequest({ gpus: ['gpu1:0'], duration: '30m', title: '' }).body!.title).toBe('Quick reservation');
  });
  it('says what is missing', () => {
    expect(buildReservationRequest({ gpus: [], duration: '2h', title: '' }).error).toBe('Select at least one GPU to reserve.');
    expect(buildReservationRequest({ gpus: ['gpu1:0'], duration: 'forever', title: '' }).error).toContain("'forever'");
  });
});

describe('errorMessage', () => {
  it("takes the server's message", () => {
    expect(errorMessage(409, '{"message": "Those GPUs are not free", "conflicts": []}')).toBe('Those GPUs are not free');
    expect(errorMessage(400, '{"reason": "bad"}')).toBe('bad');
  });
  it('falls back to words for the status', () => {
    expect(errorMessage(404, '<html>404</html>')).toBe('Request failed (404): not found.');
    expect(errorMessage(500, '', 'Internal Server Error')).toBe('Request failed (500): Internal Server Error.');
    expect(errorMessage(418, '{}')).toBe('Request failed (418): the request failed.');
  });
});

describe('HiveApi', () => {
  const base = 'http://localhost/';
  it('lists and creates reservations', async () => {
    const made = { id: 3, owner: 'me', title: 't', start: 's', end: 'e', gpus: ['gpu1:0'], status: 'active' };
    const { fetcher, calls } = fake({
      'GET http://localhost/gpuhive/api/reservations': [200, { reservations: [made] }],
      'POST http://localhost/gpuhive/api/reservations': [201, made]
    });
    const api = new HiveApi(base, fetcher);
    expect(await api.reservations('me')).toEqual([made]);
    expect(calls[0].url).toBe('http://localhost/gpuhive/api/reservations?user=me');
    expect(await api.reserve({ title: 't', gpus: ['gpu1:0'], duration: '1h' })).toEqual(made);
    expect(JSON.parse(calls[1].body!)).toEqual({ title: 't', gpus: ['gpu1:0'], duration: '1h' });
  });
  it("raises the server's message with the status", async () => {
    const { fetcher } = fake({ 'POST http://localhost/gpuhive/api/reservations': [409, { message: 'gpu1:0 is reserved by bob' }] });
    const api = new HiveApi(base, fetcher);
    await expect(api.reserve({})).rejects.toEqual(new HiveApiError('gpu1:0 is reserved by bob', 409));
  });
  it('cancels by id with DELETE', async () => {
    const { fetcher, calls } = fake({ 'DELETE http://localhost/gpuhive/api/reservations/5': [200, { id: 5 }] });
    await new HiveApi(base, fetcher).cancel(5);
    expect(calls[0]).toMatchObject({ method: 'DELETE', url: 'http://localhost/gpuhive/api/reservations/5' });
  });
  it('treats a missing jobs API (404) as "no jobs section"', async () => {
    const { fetcher } = fake({});
    expect(await new HiveApi(base, fetcher).jobs('me')).toBeNull();
  });
  it('lists and stops jobs', async () => {
    const { fetcher, calls } = fake({
      'GET http://localhost/gpuhive/api/jobs': [200, { jobs: [{ id: 1, name: 'train', status: 'running' }] }],
      'POST http://localhost/gpuhive/api/jobs/1/stop': [200, {}]
    });
    const api = new HiveApi(base, fetcher);
    expect(await api.jobs('me')).toEqual([{ id: 1, name: 'train', status: 'running' }]);
    await api.stopJob(1);
    expect(calls[1]).toMatchObject({ method: 'POST', url: 'http://localhost/gpuhive/api/jobs/1/stop' });
  });
  it("gives the hosts with the server's first steps and advice", async () => {
    const setup = { message: 'No GPU hosts are configured yet.', steps: [{ text: 'Add one:', command: 'jupyter gpuhive hosts add gpu1 x' }] };
    const down = { name: 'gpu1', state: 'down', gpus: [], advice: { message: 'gpu1 is down', steps: [{ text: 'Trust it:', command: 'jupyter gpuhive trust gpu1' }] } };
    const empty = fake({ 'GET http://localhost/gpuhive/api/hosts': [200, { hosts: [], setup }] });
    expect(await new HiveApi(base, empty.fetcher).hostsReply()).toEqual({ hosts: [], setup, note: null });
    const one = fake({ 'GET http://localhost/gpuhive/api/hosts': [200, { hosts: [down], setup: null }] });
    expect(await new HiveApi(base, one.fetcher).hosts()).toEqual([down]);
    const old = fake({ 'GET http://localhost/gpuhive/api/hosts': [200, { hosts: [] }] }); // an older server
    expect(await new HiveApi(base, old.fetcher).hostsReply()).toEqual({ hosts: [], setup: null, note: null });
    const noted = fake({ 'GET http://localhost/gpuhive/api/hosts': [200, { hosts: [down], setup: null, note: 'Demo: alice holds gpu3:0' }] });
    expect((await new HiveApi(base, noted.fetcher).hostsReply()).note).toBe('Demo: alice holds gpu3:0');
  });
  it('passes other job errors on', async () => {
    const { fetcher } = fake({ 'GET http://localhost/gpuhive/api/jobs': [500, { message: 'boom' }] });
    await expect(new HiveApi(base, fetcher).jobs('me')).rejects.toThrow('boom');
  });
});

describe('Idempotency-Key and Retry-After', () => {
  const url = 'http://localhost/gpuhive/api/reservations';
  const made = { id: 9, owner: 'me', title: 't', start: 's', end: 'e', gpus: ['gpu1:0'], status: 'active' };
  function answers(...replies: [number, unknown, string | null][]): { fetcher: Fetcher; keys: (string | undefined)[] } {
    const keys: (string | undefined)[] = [];
    const fetcher: Fetcher = async (_url, init) => {
      keys.push(init.headers?.['Idempotency-Key']);
      const [status, data, wait] = replies.shift()!;
      return {
        ok: status < 400,
        status,
        headers: { get: (name: string) => (name === 'Retry-After' ? wait : null) },
        text: async () => JSON.stringify(data)
      };
    };
    return { fetcher, keys };
  }
  it('sends a new key with each POST, none with a GET', async () => {
    const { fetcher, calls } = fake({ [`POST ${url}`]: [201, made], [`GET ${url}`]: [200, { reservations: [] }] });
    const api = new HiveApi('http://localhost/', fetcher);
    await api.reserve({ title: 't' });
    await api.reserve({ title: 't' });
    await api.reservations('me');
    const [first, second] = calls.map(c => c.headers?.['Idempotency-Key']);
    expect(first).toMatch(/^[0-9a-f]{32}$/);
    expect(second).toMatch(/^[0-9a-f]{32}$/);
    expect(first).not.toBe(second);
    expect(calls[2].headers).toBeUndefined();
  });
  it('asks a busy service again after Retry-After, with the same key', async () => {
    const { fetcher, keys } = answers([503, { message: 'busy' }, '0'], [409, { message: 'still running' }, '0'], [201, made, null]);
    expect(await new HiveApi('http://localhost/', fetcher).reserve({ title: 't' })).toEqual(made);
    expect(keys).toHaveLength(3);
    expect(new Set(keys).size).toBe(1);
  });
  it('gives up after its retries, and never retries a refusal without Retry-After', async () => {
    const busy: [number, unknown, string | null] = [503, { message: 'The service is busy' }, '0'];
    const { fetcher, keys } = answers(busy, busy, busy);
    await expect(new HiveApi('http://localhost/', fetcher).reserve({})).rejects.toEqual(new HiveApiError('The service is busy', 503));
    expect(keys).toHaveLength(3);
    const clash = answers([409, { message: 'gpu1:0 is reserved by bob' }, null]);
    await expect(new HiveApi('http://localhost/', clash.fetcher).reserve({})).rejects.toEqual(new HiveApiError('gpu1:0 is reserved by bob', 409));
    expect(clash.keys).toHaveLength(1);
  });
});
