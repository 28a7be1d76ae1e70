// Explicit garbage collections, where a large message leaves garbage that V8 would collect late: a
// parse thread blocks in Atomics.wait between tasks, and an event loop that receives a large message
// allocates its buffers outside the heap, which V8 counts only towards a distant limit
// (docs/decisions/0019-large-message-memory.md).
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

// `gc` as V8 exposes it with the flag, in a context made after it is set (the thread's own global
// was made before)
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as (options?: { type: 'minor' | 'major' }) => void;

/**
 * A full collection of this thread's heap (10-30 ms for a parse thread), from a callback of its own:
 * called from the microtask of a stream's last callback, the collection would find what that
 * callback's native frame roots (a parser, and through its listeners the bytes it read) still alive.
 */
export async function collectAll(): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
  gc();
}

/**
 * A scavenge of this thread's young generation: frees the buffers that died young (socket reads,
 * compressed output) in a millisecond or so.
 */
export function collectYoung(): void {
  gc({ type: 'minor' });
}
