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
 * Up to this many bytes, a message's pieces are kept as they came and joined once at the end: held
 * twice for a moment, but at most this much. Past it they move into one buffer that grows in place.
 * A resizable ArrayBuffer for every message cost the end-to-end bench 40% of its rate (a 10 KB
 * message: 2.6 ms of CPU instead of 1.6): each one reserves and commits, then returns, address
 * space through the kernel.
 */
const IN_PLACE_FROM_BYTES = 1024 * 1024;

/**
 * A message's bytes gathered as they arrive. A small message's pieces are joined at the end; a
 * large one's go into a resizable ArrayBuffer, which reserves the address space of the largest
 * message allowed and takes memory only as it fills, so a large message is never held twice. Either
 * way the result is the message's own buffer, so the parse thread takes it over without a copy.
 */
export class Gathered {
  readonly #maxBytes: number;
  #pieces: Uint8Array[] | undefined = [];
  #buffer: ArrayBuffer | undefined;
  #view: Uint8Array | undefined;
  #length = 0;
  #dropped = false;

  constructor(maxBytes: number) {
    this.#maxBytes = maxBytes;
  }

  /** false when the bytes would not fit (past MAX_MESSAGE_SIZE) or were dropped */
  push(chunk: Uint8Array): boolean {
    if (this.#dropped) return false;
    const needed = this.#length + chunk.length;
    if (needed > this.#maxBytes) return false;
    if (this.#pieces && needed <= IN_PLACE_FROM_BYTES) {
      this.#pieces.push(chunk);
      this.#length = needed;
      return true;
    }
    if (this.#pieces) this.#moveInPlace();
    const buffer = this.#buffer as ArrayBuffer;
    if (needed > buffer.byteLength)
      buffer.resize(Math.min(this.#maxBytes, Math.max(needed, buffer.byteLength + GROWTH_BYTES)));
    (this.#view as Uint8Array).set(chunk, this.#length);
    if (Math.floor(needed / COLLECT_EVERY_BYTES) > Math.floor(this.#length / COLLECT_EVERY_BYTES))
      collectYoung();
    this.#length = needed;
    return true;
  }

  drop(): void {
    this.#dropped = true;
    this.#pieces = undefined;
    this.#buffer = undefined;
    this.#view = undefined;
  }

  /** every byte pushed, in a Buffer that spans its whole ArrayBuffer */
  whole(): Buffer {
    const length = this.#length;
    const buffer = this.#buffer;
    const pieces = this.#pieces;
    this.drop();
    if (buffer) {
      buffer.resize(length);
      return Buffer.from(buffer, 0, length);
    }
    // allocUnsafeSlow: never a slice of Node's shared pool, which a transfer would take along
    const joined = Buffer.allocUnsafeSlow(length);
    copyPieces(pieces ?? [], joined);
    return joined;
  }

  #moveInPlace(): void {
    const buffer = new ArrayBuffer(Math.min(this.#maxBytes, this.#length + GROWTH_BYTES), {
      maxByteLength: this.#maxBytes,
    });
    // tracks the buffer's length as it grows
    const view = new Uint8Array(buffer);
    copyPieces(this.#pieces ?? [], view);
    this.#pieces = undefined;
    this.#buffer = buffer;
    this.#view = view;
  }
}

function copyPieces(pieces: readonly Uint8Array[], into: Uint8Array): void {
  let offset = 0;
  for (const piece of pieces) {
    into.set(piece, offset);
    offset += piece.length;
  }
}
