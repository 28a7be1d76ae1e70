// Raw messages in GridFS, byte for byte as received (documents would cap them at 16 MB).
import type { ObjectId } from 'mongodb';
import { DURABLE, type Store } from './mongo.ts';

/** GridFS's default chunk size; a message below it costs one chunk insert and one files insert. */
const CHUNK_BYTES = 255 * 1024;

/** Stores the bytes durably (majority, journaled); resolves the GridFS file id. */
export function storeRaw(store: Store, messageId: string, raw: Uint8Array): Promise<ObjectId> {
  return new Promise((resolve, reject) => {
    const upload = store.raw.openUploadStream(messageId, { chunkSizeBytes: CHUNK_BYTES });
    upload.once('error', reject);
    upload.once('finish', () => resolve(upload.id));
    upload.end(raw);
  });
}

export async function readRaw(store: Store, rawId: ObjectId): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of store.raw.openDownloadStream(rawId)) parts.push(part as Buffer);
  return Buffer.concat(parts);
}

/** Best effort: an orphaned raw file costs disk, never correctness. */
export async function deleteRaw(store: Store, rawId: ObjectId): Promise<void> {
  await store.raw.delete(rawId).catch(() => {});
}

export { DURABLE };
