// A message's bytes as DATA delivers them, gathered in place.
import { collectYoung } from '../util/collect.ts';

const GROWTH_BYTES = 1024 * 1024;
/**
 * Every this many bytes of a message, the event loop's young generation is collected. Each socket
 * read, gzip output and GridFS chunk of a large message is a buffer outside the heap that dies young,
 * but V8 collects for them only past a limit tens of megabytes away: the first 25 MB message after a
 * start grew the process's malloc arena by about 20 MB with them, and its peak with it
 * (docs/decisions/0019-large-message-memory.md). A scavenge takes about a millisecond.
 */
const COLLECT_EVERY_BYTES = 4 * 1024 * 1024;

/**
 * A message's bytes gathered as they arrive into one buffer that grows in place: a resizable
 * ArrayBuffer reserves the address space of the largest message allowed and takes memory only as it
 * fills. Never joined from pieces (which held the message twice at the end of DATA), and the
 * message's own, so the parse thread takes it over without a copy.
 */
export class Gathered {
  #buffer: ArrayBuffer | undefined;
  #view: Uint8Array | undefined;
  #length = 0;

  constructor(maxBytes: number) {
    this.#buffer = new ArrayBuffer(0, { maxByteLength: maxBytes });
    // tracks the buffer's length as it grows
    this.#view = new Uint8Array(this.#buffer);
  }

  /** false when the bytes would not fit (past MAX_MESSAGE_SIZE) or were dropped */
  push(chunk: Uint8Array): boolean {
    const buffer = this.#buffer;
    if (!buffer || !this.#view) return false;
    const needed = this.#length + chunk.length;
    if (needed > buffer.maxByteLength) return false;
    if (needed > buffer.byteLength)
      buffer.resize(Math.min(buffer.maxByteLength, Math.max(needed, buffer.byteLength + GROWTH_BYTES)));
    this.#view.set(chunk, this.#length);
    if (Math.floor(needed / COLLECT_EVERY_BYTES) > Math.floor(this.#length / COLLECT_EVERY_BYTES))
      collectYoung();
    this.#length = needed;
    return true;
  }

  drop(): void {
    this.#buffer = undefined;
    this.#view = undefined;
  }

  /** every byte pushed, in a Buffer that spans its whole ArrayBuffer */
  whole(): Buffer {
    const buffer = this.#buffer ?? new ArrayBuffer(0);
    if (buffer.resizable) buffer.resize(this.#length);
    this.drop();
    return Buffer.from(buffer, 0, this.#length);
  }
}
