import { AVAILABILITY_SCHEMA, ToastBoard, VIOLATION_SCHEMA, eventToast } from '../events';
import { FakeNotices } from './notices';

const foreign = {
  schema_id: VIOLATION_SCHEMA,
  kind: 'foreign',
  message: 'bob runs python train.py on gpu1:0, reserved by alice until 17:00.',
  holder: 'alice',
  offender: 'bob',
  gpu: 'gpu1:0',
  host: 'gpu1'
};

describe('eventToast', () => {
  it('warns the holder when someone else runs on their GPU', () => {
    const toast = eventToast(foreign, 'alice');
    expect(toast?.level).toBe('warning');
    expect(toast?.message).toContain('bob is running on your reserved GPU (gpu1:0)');
  });

  it('tells the offender too, and nobody else', () => {
    expect(eventToast(foreign, 'bob')?.message).toBe(foreign.message);
    expect(eventToast(foreign, 'carol')).toBeNull();
    expect(eventToast(foreign, null)).toBeNull();
  });

  it('ignores other schemas', () => {
    expect(eventToast({ ...foreign, schema_id: 'https://events.jupyter.org/other' }, 'alice')).toBeNull();
  });

  it('tells only the holder about an idle reservation', () => {
    const idle = { ...foreign, kind: 'idle', offender: null, message: 'Your GPUs have been idle for 30 minutes.' };
    expect(eventToast(idle, 'alice')).toEqual({ level: 'info', message: idle.message });
    expect(eventToast(idle, 'bob')).toBeNull();
  });

  it('warns only the holder of a GPU that failed, with the alternative it offers', () => {
    const failed = {
      ...foreign,
      kind: 'gpu-health',
      offender: null,
      message: 'GPU gpu1:0 of your reservation 7 failed its health check. The earliest alternative: gpu1:2.'
    };
    expect(eventToast(failed, 'alice')).toEqual({ level: 'warning', message: failed.message });
    expect(eventToast(failed, 'bob')).toBeNull();
  });

  it('tells only the subscriber that the GPUs they asked for are free', () => {
    const free = {
      schema_id: AVAILABILITY_SCHEMA,
      user: 'alice',
      message: '2 GPUs are free for alice: gpu3:0, gpu3:1.'
    };
    expect(eventToast(free, 'alice')).toEqual({ level: 'info', message: free.message });
    expect(eventToast(free, 'bob')).toBeNull();
    expect(eventToast(free, null)).toBeNull();
  });
});


describe('ToastBoard', () => {
  const event = { ...foreign, violation: 7 };
  const toast = eventToast(event, 'bob')!;

  it('shows one notice per violation however often the server repeats it', () => {
    const notices = new FakeNotices();
    const board = new ToastBoard(notices);
    for (let sweep = 0; sweep < 6; sweep++) {
      board.show(event, toast);
    }
    expect(notices.emitted).toBe(1);
    board.show(event, { ...toast, message: 'Your process will be stopped in 1 minute.' });
    expect([...notices.shown.values()]).toEqual(['Your process will be stopped in 1 minute.']);
    board.show({ ...event, violation: 8 }, toast);
    expect(notices.emitted).toBe(2);
  });

  it('leaves a dismissed notice dismissed until its violation says something new', () => {
    const notices = new FakeNotices();
    const board = new ToastBoard(notices);
    board.show(event, toast);
    notices.shown.clear(); // the user closed it
    board.show(event, toast);
    expect(notices.emitted).toBe(1);
    board.show(event, { ...toast, message: 'Your process will be stopped now.' });
    expect(notices.emitted).toBe(2);
  });
});
