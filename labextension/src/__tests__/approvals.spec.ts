import { IApprovable, answerRequest, askText, awaitingMe, isTentative, tentativeText } from '../approvals';

function res(extra: Partial<IApprovable> = {}): IApprovable {
  return {
    id: 7,
    owner: 'bob',
    title: 'big run',
    start: '2026-12-08T09:00:00+00:00',
    end: '2026-12-08T17:00:00+00:00',
    gpus: ['gpu1:0', 'gpu1:1', 'gpu1:2', 'gpu1:3'],
    status: 'upcoming',
    ...extra
  } as IApprovable;
}

describe('approvals', () => {
  it('lists the tentative bookings I may answer, soonest first, not the others', () => {
    const later = res({ id: 1, tentative: true, may_approve: true, start: '2026-12-09T09:00:00+00:00' });
    const sooner = res({ id: 2, tentative: true, may_approve: true });
    const notMine = res({ id: 3, tentative: true, may_approve: false });
    const confirmed = res({ id: 4, tentative: false, may_approve: false });
    const cancelled = res({ id: 5, tentative: true, may_approve: true, status: 'cancelled' });
    expect(awaitingMe([later, notMine, sooner, confirmed, cancelled]).map(r => r.id)).toEqual([2, 1]);
    expect(isTentative(cancelled)).toBe(false);
    expect(isTentative(notMine)).toBe(true);
  });

  it('says what a booking asks for, and what my tentative booking waits for', () => {
    const now = new Date('2026-12-08T08:00:00Z');
    expect(askText(res(), now)).toContain('bob: big run · 4 GPUs (gpu1:0, gpu1:1, gpu1:2, gpu1:3)');
    const mine = res({ tentative: true, tentative_until: '2026-12-08T10:00:00+00:00' });
    expect(tentativeText(mine, now)).toMatch(/^Tentative: waits for an administrator's approval \(held until .+\)\. No job or kernel can run on it yet\.$/);
  });

  it('answers with the reason only when one is given', () => {
    expect(answerRequest(7, 'approve')).toEqual({ path: 'reservations/7/approve' });
    expect(answerRequest(7, 'decline', '  ')).toEqual({ path: 'reservations/7/decline' });
    expect(answerRequest(7, 'decline', ' term is full ')).toEqual({ path: 'reservations/7/decline', body: { reason: 'term is full' } });
  });
});
