// Raw messages, byte for byte as received. Most mail is small: a message up to
// RAW_DOCUMENT_MAX_BYTES is one document in `raw.documents`, and the documents of messages
// accepted at the same moment go to the database in one insert (one round trip, one commit).
// Anything larger is streamed into GridFS (`raw` bucket) while it arrives, so it is never
// gathered in a second buffer for storage, and the 16 MB document limit never applies.
import { Readable } from 'node:stream';
import { Binary, type Collection, ObjectId } from 'mongodb';
import { Batcher } from './batcher.ts';
import { insertEach, type Store } from './mongo.ts';

/** Messages up to this size are stored as one document; above it, in GridFS. */
export const RAW_DOCUMENT_MAX_BYTES = 4 * 1024 * 1024;
/** GridFS chunk size for the large ones: fewer, larger inserts than GridFS's 255 KB default. */
const CHUNK_BYTES = 1024 * 1024;

export interface RawDocument {
  _id: ObjectId;
  /** the message it belongs to (for operators reading the collection) */
  message: string;
  data: Binary;
}

export function rawDocuments(store: Store): Collection<RawDocument> {
  return store.db.collection<RawDocument>('raw.documents');
}

/**
 * A raw message being stored while it arrives: kept in memory until it outgrows a document, then
 * streamed into GridFS. A small one is stored from the joined bytes the caller hands to finish()
 * (the same buffer the parse thread then takes over: joined once).
 */
export interface RawUpload {
  readonly id: ObjectId;
  /** false: stop feeding until `drained` resolves (the database is behind) */
  write(chunk: Uint8Array): boolean;
  drained(): Promise<void>;
  /** resolves once the bytes are durably stored; `whole` is every byte written, joined */
  finish(whole: Uint8Array): Promise<ObjectId>;
  /** removes what was written (an oversize or refused message) */
  abort(): Promise<void>;
}

/** One insert command for the raw documents of every message finishing at the same moment. */
const documentInserts = new WeakMap<Store, Batcher<RawDocument, Error | undefined>>();

function documentInserter(store: Store): Batcher<RawDocument, Error | undefined> {
  let batcher = documentInserts.get(store);
  if (!batcher) {
    const collection = rawDocuments(store);
    batcher = new Batcher({
      maxInFlight: 4,
      // a few MB each at most: one command stays well under the 48 MB wire message limit
      maxBatch: 32,
      flush: (docs) => insertEach(collection, docs),
    });
    documentInserts.set(store, batcher);
  }
  return batcher;
}

export function openRawUpload(store: Store, messageId: string): RawUpload {
  const id = new ObjectId();
  const held: Uint8Array[] = [];
  let bytes = 0;
  let stream: ReturnType<Store['raw']['openUploadStreamWithId']> | undefined;
  let failure: Error | undefined;

  const startStreaming = () => {
    stream = store.raw.openUploadStreamWithId(id, messageId, { chunkSizeBytes: CHUNK_BYTES });
    stream.on('error', (err: Error) => {
      failure ??= err;
    });
    for (const chunk of held.splice(0)) stream.write(chunk);
  };

  return {
    id,
    write(chunk) {
      if (failure) return true;
      if (stream) return stream.write(chunk);
      held.push(chunk);
      bytes += chunk.length;
      if (bytes > RAW_DOCUMENT_MAX_BYTES) startStreaming();
      return true;
    },
    drained() {
      return failure || !stream
        ? Promise.resolve()
        : new Promise((resolve) => stream!.once('drain', resolve));
    },
    async finish(whole) {
      if (failure) throw failure;
      if (!stream) {
        held.length = 0;
        const data = new Binary(whole);
        const outcome = await documentInserter(store).submit({ _id: id, message: messageId, data });
        if (outcome) throw outcome;
        return id;
      }
      const upload = stream;
      return new Promise((resolve, reject) => {
        upload.once('error', reject);
        upload.once('finish', () => resolve(id));
        upload.end();
      });
    },
    async abort() {
      if (stream) await stream.abort().catch(() => {});
      else
        await rawDocuments(store)
          .deleteOne({ _id: id })
          .catch(() => {});
    },
  };
}

/** False when the raw bytes were never completely stored or were removed (a failed acceptance). */
export async function rawExists(store: Store, rawId: ObjectId): Promise<boolean> {
  if ((await rawDocuments(store).countDocuments({ _id: rawId }, { limit: 1 })) === 1) return true;
  return (await store.db.collection('raw.files').countDocuments({ _id: rawId }, { limit: 1 })) === 1;
}

export async function readRaw(store: Store, rawId: ObjectId): Promise<Buffer> {
  const doc = await rawDocuments(store).findOne({ _id: rawId });
  if (doc) return Buffer.from(doc.data.buffer);
  const parts: Buffer[] = [];
  for await (const part of store.raw.openDownloadStream(rawId)) parts.push(part as Buffer);
  return Buffer.concat(parts);
}

/** The raw bytes as a stream (GET /messages/{id}/raw): a large message is not read whole first. */
export async function openRawStream(store: Store, rawId: ObjectId): Promise<Readable> {
  const doc = await rawDocuments(store).findOne({ _id: rawId });
  if (doc) return Readable.from([Buffer.from(doc.data.buffer)]);
  return store.raw.openDownloadStream(rawId);
}

/** Best effort: orphaned raw bytes cost disk, never correctness. */
export async function deleteRaw(store: Store, rawId: ObjectId): Promise<void> {
  await rawDocuments(store)
    .deleteOne({ _id: rawId })
    .catch(() => {});
  await store.raw.delete(rawId).catch(() => {});
}
