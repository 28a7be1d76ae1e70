// Batcher: the writes of one turn go together at once, writes that arrive while commands are in
// flight go together next, and a command that never settles fails its writes at the deadline
// without blocking later ones.
import { setImmediate as nextTurn } from 'node:timers/promises';
import test from 'ava';
import { BatchDeadlineError, Batcher } from '../../src/store/batcher.ts';

test('the writes of one turn go together; writes arriving while a command is in flight share the next', async (t) => {
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
  const first = [1, 2].map((op) => batcher.submit(op));
  t.deepEqual(flushed, [], 'the turn is not over yet');
  await nextTurn();
  t.deepEqual(flushed, [[1, 2]]);
  const rest = [3, 4, 5, 6].map((op) => batcher.submit(op));
  await nextTurn();
  t.deepEqual(flushed, [[1, 2]], 'they wait for the command in flight');
  release();
  t.deepEqual(await Promise.all([...first, ...rest]), [10, 20, 30, 40, 50, 60]);
  t.deepEqual(flushed, [[1, 2], [3, 4, 5], [6]]);
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
  await nextTurn();
  const later = batcher.submit('later');
  await t.throwsAsync(hung, { instanceOf: BatchDeadlineError });
  t.is(await later, 'later');
  t.is(calls, 2);
});

test('with lingerMs, a write to a quiet batcher goes at once; under load writes gather until the linger is over or the batch is full', async (t) => {
  const lingerMs = 1000;
  const flushed: Array<{ ops: number[]; at: number }> = [];
  const batcher = new Batcher<number, number>({
    maxInFlight: 1,
    maxBatch: 4,
    lingerMs,
    flush: async (ops) => {
      flushed.push({ ops, at: performance.now() });
      return ops;
    },
  });
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  const start = performance.now();
  await batcher.submit(1);
  t.deepEqual(flushed[0]!.ops, [1]);
  t.true(flushed[0]!.at - start < lingerMs / 2, 'a quiet batcher flushes a lone write at once');
  // within the linger: these wait for it, then go together
  const waiting = [2, 3].map((op) => batcher.submit(op));
  await sleep(lingerMs / 4);
  t.is(flushed.length, 1, 'nothing goes while the linger lasts');
  await Promise.all(waiting);
  t.deepEqual(flushed[1]!.ops, [2, 3]);
  const gap = flushed[1]!.at - flushed[0]!.at;
  t.true(gap >= lingerMs - 20, `the second flush came ${gap} ms after the first`);
  // a full batch does not wait
  await Promise.all([4, 5, 6, 7].map((op) => batcher.submit(op)));
  t.deepEqual(flushed[2]!.ops, [4, 5, 6, 7]);
  t.true(flushed[2]!.at - flushed[1]!.at < lingerMs / 2, 'a full batch goes before the linger is over');
  // quiet for longer than the linger: at once again
  await sleep(lingerMs + 50);
  const lone = performance.now();
  await batcher.submit(8);
  t.true(flushed[3]!.at - lone < lingerMs / 2, 'after a quiet spell a write goes at once');
});
