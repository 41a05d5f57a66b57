import { HiveApi, HiveApiError } from '../api';
import { lentText, reclaimedText } from '../lending';
import { fake } from './fetcher';

const loan = (job: number) => ({ job, name: 'sweep', owner: 'bob', preemptible: true });

describe('lentText', () => {
  it('names the jobs that borrow the GPUs', () => {
    expect(lentText({ lent_to: [loan(42)] })).toBe('lent to job 42 (preemptible) until you start');
    expect(lentText({ lent_to: [loan(42), loan(43)] }, false)).toBe(
      'lent to jobs 42, 43 (preemptible) until its holder starts'
    );
  });
  it('says nothing when nothing is lent', () => {
    expect(lentText({ lent_to: [] })).toBe('');
    expect(lentText({})).toBe('');
  });
});

describe('reclaimedText', () => {
  const now = new Date('2026-11-22T10:00:00Z');
  it('says which jobs stop and within how long', () => {
    expect(reclaimedText(5, { reclaimed: [42], free_by: '2026-11-22T10:00:31.5Z' }, now)).toBe(
      'Reservation 5: preemptible job 42 told to save and stop; your GPUs are free within 32 s.'
    );
    expect(reclaimedText(5, { reclaimed: [42, 43], free_by: 'soon' }, now)).toContain('jobs 42, 43 told to save and stop; your GPUs are free soon');
  });
  it('says when nothing was running', () => {
    expect(reclaimedText(5, { reclaimed: [], free_by: '2026-11-22T10:00:00Z' }, now)).toBe(
      'Reservation 5: nothing was running on its GPUs; they are yours.'
    );
  });
});

describe('HiveApi.reclaim', () => {
  it('posts to the reservation and returns the reply', async () => {
    const url = 'http://h/gpuhive/api/reservations/5/reclaim';
    const reply = { reclaimed: [42], free_by: '2026-11-22T10:00:31Z' };
    const { fetcher, calls } = fake({ [`POST ${url}`]: [200, reply] });
    const api = new HiveApi('http://h/', fetcher);
    expect(await api.reclaim(5)).toEqual(reply);
    expect(calls[0].method).toBe('POST');
    expect(calls[0].url).toBe(url);
  });
  it("turns a refusal into the server's words", async () => {
    const url = 'http://h/gpuhive/api/reservations/6/reclaim';
    const { fetcher } = fake({ [`POST ${url}`]: [403, { message: 'Only the holder or an admin may reclaim' }] });
    const api = new HiveApi('http://h/', fetcher);
    await expect(api.reclaim(6)).rejects.toEqual(new HiveApiError('Only the holder or an admin may reclaim', 403));
  });
});
