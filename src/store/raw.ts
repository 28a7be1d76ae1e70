// Raw messages, byte for byte as received, kept in the daily partition of their acceptance
// (`raw_<YYYYMMDD>`, see partitions.ts) under the message's own id, gzip-compressed (level 1; on the
// event loop while small, in libuv's thread pool above: compression.ts): retention drops a whole day at once, and a
// lookup is exactly `{_id: X}` on one collection. A message up to RAW_DOCUMENT_MAX_BYTES is
// one document, and the documents of messages accepted at the same moment go to the database in
// one insert (one round trip, one commit). Anything larger is compressed and streamed into the
// day's GridFS bucket (`rawfs_<YYYYMMDD>`) while it arrives, so it is never gathered in a second
// buffer for storage and the 16 MB document limit never applies.
//
// A message whose compressed bytes fit in INLINE_RAW_MAX_BYTES is not written here before the 250:
// its bytes ride in its working-set document (`raw`), so accepting it costs one insert, and they
// come here with its final record's batch (history.ts), which gathers many.
import { PassThrough, Readable } from 'node:stream';
import { createGunzip, createGzip } from 'node:zlib';
import { Binary, GridFSBucket } from 'mongodb';
import { compress, decompress, GZIP } from './compression.ts';
import { DURABLE } from './connection.ts';
import type { InlineRaw, RawDocument } from './documents.ts';
import type { Store } from './mongo.ts';
import { partitionOf } from './partitions.ts';

/**
 * Compressed bytes up to this size go inside the message's working-set document: one insert before
 * the 250 instead of two (one round trip less for the sender, about a third fewer commands in the
 * end-to-end benchmark). Small, because every read of the working set reads them too (FerretDB
 * decodes whole documents): mail text of up to 30-50 KB compresses to this.
 */
export const INLINE_RAW_MAX_BYTES = 16 * 1024;
/** Messages up to this size are stored as one document; above it, in GridFS. */
export const RAW_DOCUMENT_MAX_BYTES = 4 * 1024 * 1024;
/** GridFS chunk size for the large ones: fewer, larger inserts than GridFS's 255 KB default. */
const CHUNK_BYTES = 1024 * 1024;

/** Where a message's raw bytes are: in its document, else by its id in its day's partitions. */
export interface RawLocation {
  _id: string;
  raw?: InlineRaw;
  /** the size as received: a large message is read into one buffer of it, not joined from pieces */
  size?: number;
}

function rawBucket(store: Store, name: string): GridFSBucket {
  return new GridFSBucket(store.db, { bucketName: name, writeConcern: DURABLE });
}

/** A message's bytes as the store keeps them: gzipped, with their size as received. */
async function compressRaw(bytes: Uint8Array): Promise<InlineRaw> {
  return { data: new Binary(await compress(bytes)), size: bytes.length };
}

/** Stores one message's compressed bytes as a document (batched with others); throws on failure. */
async function insertRawDocument(store: Store, messageId: string, raw: InlineRaw): Promise<void> {
  const name = partitionOf('raw', messageId);
  store.partitions.note(name);
  const outcome = await store.writes.rawInserts.submit(name, { _id: messageId, ...raw });
  if (outcome) throw outcome;
}

/** The document that takes a final message's inline bytes into `raw_<day>` (see history.ts). */
export function rawDocumentOf(doc: { _id: string; raw?: InlineRaw }): RawDocument | undefined {
  return doc.raw ? { _id: doc._id, ...doc.raw } : undefined;
}

/**
 * Stores the bytes of many messages at once (seeding a history, migrations): one insert per
 * partition.
 */
export async function insertRawMany(
  store: Store,
  messages: ReadonlyArray<{ id: string; bytes: Uint8Array }>,
): Promise<void> {
  const byName = new Map<string, RawDocument[]>();
  for (const { id, bytes } of messages) {
    const name = partitionOf('raw', id);
    const doc = { _id: id, ...(await compressRaw(bytes)) };
    const docs = byName.get(name);
    if (docs) docs.push(doc);
    else byName.set(name, [doc]);
    store.partitions.note(name);
  }
  for (const [name, docs] of byName)
    await store.db.collection<RawDocument>(name).insertMany(docs, { ordered: false, writeConcern: DURABLE });
}

/**
 * A raw message being stored while it arrives: kept in memory until it outgrows a document, then
 * compressed and streamed into GridFS. A small one is stored from the joined bytes the caller
 * hands to finish() (the same buffer the parse thread then takes over: joined once).
 */
export interface RawUpload {
  /** false: stop feeding until `drained` resolves (the database is behind) */
  write(chunk: Uint8Array): boolean;
  drained(): Promise<void>;
  /**
   * resolves once the bytes are durably stored, or with them compressed when they are small
   * enough to go inside the message's document (the caller then stores them there, before its
   * 250); `whole` is every byte written, joined
   */
  finish(whole: Uint8Array): Promise<InlineRaw | undefined>;
  /** removes what was written (an oversize or refused message) */
  abort(): Promise<void>;
}

export function openRawUpload(store: Store, messageId: string): RawUpload {
  const held: Uint8Array[] = [];
  let bytes = 0;
  let compressor: ReturnType<typeof createGzip> | undefined;
  let upload: ReturnType<GridFSBucket['openUploadStreamWithId']> | undefined;
  let failure: Error | undefined;
  const fail = (err: Error) => {
    failure ??= err;
  };

  const startStreaming = () => {
    const bucket = partitionOf('rawfs', messageId);
    store.partitions.note(bucket);
    upload = rawBucket(store, bucket).openUploadStreamWithId(messageId as never, messageId, {
      chunkSizeBytes: CHUNK_BYTES,
      metadata: { encoding: 'gzip' },
    });
    compressor = createGzip(GZIP);
    upload.on('error', fail);
    compressor.on('error', fail);
    compressor.pipe(upload);
    for (const chunk of held.splice(0)) compressor.write(chunk);
  };

  return {
    write(chunk) {
      if (failure) return true;
      if (compressor) return compressor.write(chunk);
      held.push(chunk);
      bytes += chunk.length;
      if (bytes > RAW_DOCUMENT_MAX_BYTES) startStreaming();
      return true;
    },
    drained() {
      return failure || !compressor
        ? Promise.resolve()
        : new Promise((resolve) => compressor!.once('drain', resolve));
    },
    async finish(whole) {
      if (failure) throw failure;
      if (!compressor || !upload) {
        held.length = 0;
        const raw = await compressRaw(whole);
        if (raw.data.length() <= INLINE_RAW_MAX_BYTES) return raw;
        await insertRawDocument(store, messageId, raw);
        return undefined;
      }
      const stream = upload;
      await new Promise<void>((resolve, reject) => {
        stream.once('error', reject);
        compressor!.once('error', reject);
        stream.once('finish', () => resolve());
        compressor!.end();
      });
      return undefined;
    },
    async abort() {
      if (upload) {
        compressor?.destroy();
        await upload.abort().catch(() => {});
      } else
        await store.db
          .collection<RawDocument>(partitionOf('raw', messageId))
          .deleteOne({ _id: messageId })
          .catch(() => {});
    },
  };
}

/**
 * False when the raw bytes were never completely stored or were removed (a failed acceptance, or
 * raw retention).
 */
export async function rawExists(store: Store, message: RawLocation): Promise<boolean> {
  if (message.raw) return true;
  return (await findRaw(store, message._id)) !== undefined;
}

type Found = { document: RawDocument } | { bucket: string };

/** Where the bytes of `messageId` are: a document of its day's `raw`, or a file of its day's `rawfs`. */
async function findRaw(store: Store, messageId: string): Promise<Found | undefined> {
  const document = await store.db
    .collection<RawDocument>(partitionOf('raw', messageId))
    .findOne({ _id: messageId });
  if (document) return { document };
  const bucket = partitionOf('rawfs', messageId);
  const file = await store.db.collection(`${bucket}.files`).findOne({ _id: messageId as never });
  return file ? { bucket } : undefined;
}

/** The bytes as received when they are inline or in one document; undefined when in GridFS or gone. */
export async function readRawDocument(store: Store, message: RawLocation): Promise<Buffer | undefined> {
  if (message.raw) return decompress(message.raw.data.buffer);
  const document = await store.db
    .collection<RawDocument>(partitionOf('raw', message._id))
    .findOne({ _id: message._id });
  return document ? decompress(document.data.buffer) : undefined;
}

/** The bytes as received, or undefined when they are gone (raw retention). */
export async function readRaw(store: Store, message: RawLocation): Promise<Buffer | undefined> {
  if (message.raw) return decompress(message.raw.data.buffer);
  const found = await findRaw(store, message._id);
  if (!found) return undefined;
  if ('document' in found) return decompress(found.document.data.buffer);
  const stream = await openRawStream(store, message);
  if (!stream) return undefined;
  return gather(stream, message.size);
}

/**
 * A stream's bytes in one buffer: of `size` when it is known, filled as they come (joining the
 * pieces at the end held a large message twice); joined when it is not, or was not right.
 */
async function gather(stream: Readable, size: number | undefined): Promise<Buffer> {
  const parts: Buffer[] = [];
  let whole = size === undefined ? undefined : Buffer.allocUnsafeSlow(size);
  let length = 0;
  for await (const part of stream) {
    const bytes = part as Buffer;
    if (whole && length + bytes.length <= whole.length) bytes.copy(whole, length);
    else {
      if (whole) parts.push(whole.subarray(0, length));
      whole = undefined;
      parts.push(bytes);
    }
    length += bytes.length;
  }
  if (whole) return length === whole.length ? whole : whole.subarray(0, length);
  return Buffer.concat(parts, length);
}

/**
 * The bytes as received, as a stream (GET /messages/{id}/raw): a large message is not read whole
 * first. Undefined when they are gone.
 */
export async function openRawStream(store: Store, message: RawLocation): Promise<Readable | undefined> {
  if (message.raw) return Readable.from([await decompress(message.raw.data.buffer)]);
  const found = await findRaw(store, message._id);
  if (!found) return undefined;
  if ('document' in found) return Readable.from([await decompress(found.document.data.buffer)]);
  const out = new PassThrough();
  const download = rawBucket(store, found.bucket).openDownloadStream(message._id as never);
  const inflate = createGunzip();
  download.on('error', (err) => out.destroy(err));
  inflate.on('error', (err) => out.destroy(err));
  download.pipe(inflate).pipe(out);
  return out;
}
