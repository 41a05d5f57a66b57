import { AVAILABILITY_SCHEMA, VIOLATION_SCHEMA, eventToast } from '../events';

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

  it('tells only the subscriber that the GPUs they asked for are free', () => {
    const free = {
      schema_id: AVAILABILITY_SCHEMA,
      user: 'alice',
      message: '2 GPU(s) free for alice: gpu3:0, gpu3:1. Book it: POST subscriptions/4/book'
    };
    expect(eventToast(free, 'alice')).toEqual({ level: 'info', message: free.message });
    expect(eventToast(free, 'bob')).toBeNull();
    expect(eventToast(free, null)).toBeNull();
  });
});
