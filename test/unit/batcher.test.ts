// Batcher: a lone write goes at once, writes that arrive while commands are in flight go together,
// and a command that never settles fails its writes at the deadline without blocking later ones.
import test from 'ava';
import { BatchDeadlineError, Batcher } from '../../src/store/batcher.ts';

test('a lone write is flushed at once; writes arriving meanwhile share the next flush', async (t) => {
  const flushed: number[][] = [];
  let release: () => void = () => {};
  const batcher = new Batcher<number, number>({
    maxInFlight: 1,
    maxBatch: 3,
    flush: async (ops) => {
      flushed.push(ops);
      if (flushed.length === 1) await new Promise<void>((resolve) => (release = resolve));
      return ops.map((op) => op * 10);
    },
  });
  const first = batcher.submit(1);
  const rest = [2, 3, 4, 5].map((op) => batcher.submit(op));
  t.deepEqual(flushed, [[1]]);
  release();
  t.deepEqual(await Promise.all([first, ...rest]), [10, 20, 30, 40, 50]);
  t.deepEqual(flushed, [[1], [2, 3, 4], [5]]);
});

test('a flush that never settles fails its writes at the deadline, and frees its place', async (t) => {
  let calls = 0;
  const batcher = new Batcher<string, string>({
    maxInFlight: 1,
    maxBatch: 10,
    deadlineMs: 100,
    flush: (ops) => (++calls === 1 ? new Promise<string[]>(() => {}) : Promise.resolve(ops)),
  });
  const hung = batcher.submit('lost');
  const later = batcher.submit('later');
  await t.throwsAsync(hung, { instanceOf: BatchDeadlineError });
  t.is(await later, 'later');
  t.is(calls, 2);
});
