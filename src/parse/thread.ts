// The parse thread's entry point, which piscina loads in each thread of the pool (pool.ts): parse one
// message and hand the JSON bodies back by transferring their ArrayBuffers, so a large payload
// crosses threads without a copy. It lives beside its pool: nothing else starts it.
import { move, transferableSymbol, valueSymbol, workerData } from 'piscina';
import { collectAll } from '../util/collect.ts';
import { lowerOwnPriority } from '../util/thread-priority.ts';
import type { AttachmentOutput, ParseInput, ParseOutput } from './payload.ts';
import { authenticateOnly, extractAttachment, parseMessage } from './payload.ts';

/** What the pool starts each thread with (piscina's workerData). */
export interface ParseThreadData {
  /** how much nicer than the event loop this thread runs (pool.ts: PARSE_THREAD_NICENESS) */
  niceness: number;
}

const { niceness } = workerData as ParseThreadData;
lowerOwnPriority(niceness);

/**
 * A task of this many raw bytes or more ends with a full collection. A thread collects only when it
 * allocates, and between tasks piscina blocks it in Atomics.wait: one that fell idle after a large
 * message kept everything that message left behind (its raw bytes, the parser's buffers) until
 * its next one (docs/decisions/0019-large-message-memory.md). The raw bytes are let go by then
 * (parseMessage empties `input.raw`). About 10-30 ms of this thread, once per large message.
 */
export const COLLECT_AFTER_BYTES = 1024 * 1024;

/**
 * Collects after a large task, from a callback of its own (collectAll). The task ends in a microtask
 * of the parser's last callback, whose native frame still roots the MailParser; piscina then blocks
 * in Atomics.wait from that same microtask. Collected there, the parser and the raw bytes its
 * listeners reach survived: a 25 MB message's 24 MB stayed resident until the next large task
 * (docs/decisions/0019-large-message-memory.md).
 */
async function collectAfter(rawBytes: number): Promise<void> {
  if (rawBytes >= COLLECT_AFTER_BYTES) await collectAll();
}

// the pool's other tasks (piscina's `name`): sender authentication alone, one attachment's bytes
export const authenticate = authenticateOnly;

export async function attachment(input: { raw: Uint8Array; index: number }): Promise<AttachmentOutput> {
  const bytes = input.raw.byteLength;
  const output = await extractAttachment(input).finally(() => collectAfter(bytes));
  if (!output.ok) return output;
  const movable = move({ [transferableSymbol]: [output.content.buffer], [valueSymbol]: output });
  return movable as unknown as AttachmentOutput;
}

export default async function parseThread(input: ParseInput): Promise<ParseOutput> {
  const bytes = input.raw.byteLength;
  // piscina keeps `input` until the task ends; parseMessage empties its raw once parsed
  const output = await parseMessage(input).finally(() => collectAfter(bytes));
  if (!output.ok) return output;
  // piscina posts what is under valueSymbol and transfers every buffer listed under
  // transferableSymbol. Each body owns its ArrayBuffer exactly (see payload.ts), so nothing else is
  // detached with it.
  const movable = move({
    [transferableSymbol]: output.bodies.map(({ body }) => body.buffer),
    [valueSymbol]: output,
  });
  // piscina unwraps the movable before posting: the caller receives `output` itself.
  return movable as unknown as ParseOutput;
}
