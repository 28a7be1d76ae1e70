// Owns the parse worker thread's entry point (piscina): parse one message and hand the JSON bodies
// back by transferring their ArrayBuffers, so a large payload crosses threads without a copy.
import { move, transferableSymbol, valueSymbol } from 'piscina';
import type { ParseOutput } from '../src/parse/payload.ts';
import { parseMessage } from '../src/parse/payload.ts';
import type { ThreadInput } from '../src/parse/pool.ts';

export default async function parseThread(input: ThreadInput): Promise<ParseOutput> {
  // the chunks the message arrived in, joined here rather than on the event loop; piscina keeps
  // `input` until the task ends, so the chunks are dropped from it and parseMessage owns the bytes
  const { raw: chunks, ...rest } = input;
  input.raw = [];
  const output = await parseMessage({
    ...rest,
    raw: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks),
  });
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
