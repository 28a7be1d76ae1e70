// The parse thread's entry point, which piscina loads in each thread of the pool (pool.ts): parse one
// message and hand the JSON bodies back by transferring their ArrayBuffers, so a large payload
// crosses threads without a copy. It lives beside its pool: nothing else starts it.
import { move, transferableSymbol, valueSymbol, workerData } from 'piscina';
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

// the pool's other tasks (piscina's `name`): sender authentication alone, one attachment's bytes
export const authenticate = authenticateOnly;

export async function attachment(input: { raw: Uint8Array; index: number }): Promise<AttachmentOutput> {
  const output = await extractAttachment(input);
  if (!output.ok) return output;
  const movable = move({ [transferableSymbol]: [output.content.buffer], [valueSymbol]: output });
  return movable as unknown as AttachmentOutput;
}

export default async function parseThread(input: ParseInput): Promise<ParseOutput> {
  // piscina keeps `input` until the task ends; parseMessage empties its raw once parsed
  const output = await parseMessage(input);
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
