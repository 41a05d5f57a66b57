import { buildSearchRequest, slotText } from '../earliest';

const NOW = new Date('2026-03-02T10:00:00Z'); // jest runs in UTC

describe('buildSearchRequest', () => {
  const form = { count: '4', hours: '8', nvlink: true, numa: false, sameHost: false };
  it('builds the POST body with the constraints asked for', () => {
    expect(buildSearchRequest(form)).toEqual({ body: { count: 4, duration: '480m', limit: 5, nvlink: true } });
    expect(buildSearchRequest({ ...form, nvlink: false, numa: true, sameHost: true, hours: '1.5' })).toEqual({
      body: { count: 4, duration: '90m', limit: 5, same_numa: true, same_host: true }
    });
  });
  it('says in words what is wrong', () => {
    expect(buildSearchRequest({ ...form, count: '0' }).error).toMatch(/How many GPUs/);
    expect(buildSearchRequest({ ...form, count: '65' }).error).toMatch(/1 to 64/);
    expect(buildSearchRequest({ ...form, hours: '' }).error).toMatch(/hours/);
  });
});

describe('slotText', () => {
  it('names the GPUs and the span', () => {
    const slot = { start: '2026-03-02T14:00:00Z', end: '2026-03-02T22:00:00Z', gpus: ['dgx:0', 'dgx:1'], hosts: ['dgx'] };
    expect(slotText(slot, NOW)).toBe('dgx:0, dgx:1 · 14:00–22:00');
  });
});
