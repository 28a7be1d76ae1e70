// gzip for what the store keeps compressed (raw bytes, listing summaries): on the event loop while
// small, in libuv's thread pool above that, both ways.
import { promisify } from 'node:util';
import { gunzip, gunzipSync, gzip, gzipSync } from 'node:zlib';

/**
 * Fast compression: mail text shrinks to about half at a fraction of a millisecond per 10 KB. zlib
 * makes and frees its state for every call: about 256 KB at its defaults, about 80 KB with this
 * window and memLevel, which store mail within 2% of the same size (decision 0029).
 */
export const GZIP = Object.freeze({ level: 1, windowBits: 14, memLevel: 5 });
/** Bounds of the output chunk for decompression (see `decompress`). */
const MIN_CHUNK = 1024;
const MAX_CHUNK = 4 * 1024 * 1024;
/**
 * Up to this many bytes (before compression), raw bytes and listing summaries are compressed, and
 * summaries decompressed, on the event loop: zlib's asynchronous path costs more CPU per call,
 * whatever the size (a new stream and zlib state, a thread-pool round trip), than compressing a
 * small message inline; above it the loop is never held for longer
 * (docs/decisions/0017-gzip-on-the-event-loop.md).
 */
const INLINE_MAX = 128 * 1024;

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);

/** The size gzip's trailer states for what it holds (modulo 4 GB). */
function statedSize(bytes: Uint8Array): number {
  if (bytes.length < 4) return 0;
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).readUInt32LE(bytes.length - 4);
}

/** Raw bytes: on the event loop while small (see INLINE_MAX), off it above. */
export async function compress(bytes: Uint8Array): Promise<Buffer> {
  return bytes.length <= INLINE_MAX ? gzipSync(bytes, GZIP) : gzipAsync(bytes, GZIP);
}

/**
 * Raw bytes: on the event loop while small (see INLINE_MAX: a drained or replayed message's bytes
 * are read back on the hot path, where the asynchronous path took about 0.14 ms of CPU for 10 KB),
 * off it above, in one output chunk of the stated size (zlib's asynchronous functions take a
 * thread-pool round trip per chunk, 16 KB by default, and allocate each whole).
 */
export async function decompress(bytes: Uint8Array): Promise<Buffer> {
  const stated = statedSize(bytes);
  if (stated <= INLINE_MAX) return gunzipSync(bytes);
  return gunzipAsync(bytes, { chunkSize: Math.min(MAX_CHUNK, Math.max(MIN_CHUNK, stated)) });
}

/** Listing summaries: on the event loop while small (see INLINE_MAX). */
export async function compressText(text: string): Promise<Buffer> {
  return text.length <= INLINE_MAX ? gzipSync(text, GZIP) : gzipAsync(text, GZIP);
}

export async function decompressText(bytes: Uint8Array): Promise<string> {
  return (await decompress(bytes)).toString('utf8');
}
