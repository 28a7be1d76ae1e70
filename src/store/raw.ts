// Raw messages in GridFS, byte for byte as received (documents would cap them at 16 MB).
import type { ObjectId } from 'mongodb';
import type { Store } from './mongo.ts';

/** GridFS's default chunk size; a message below it costs one chunk insert and one files insert. */
const CHUNK_BYTES = 255 * 1024;

/**
 * A raw message being written to GridFS while it arrives: chunk documents are inserted as each
 * 255 KB fills, so a large message is never gathered in a second buffer for storage.
 */
export interface RawUpload {
  readonly id: ObjectId;
  /** false: stop feeding until `drained` resolves (the database is behind) */
  write(chunk: Uint8Array): boolean;
  drained(): Promise<void>;
  /** resolves once every chunk and the file document are written */
  finish(): Promise<ObjectId>;
  /** removes what was written (an oversize or refused message) */
  abort(): Promise<void>;
}

export function openRawUpload(store: Store, messageId: string): RawUpload {
  const upload = store.raw.openUploadStream(messageId, { chunkSizeBytes: CHUNK_BYTES });
  let failure: Error | undefined;
  upload.on('error', (err: Error) => {
    failure ??= err;
  });
  return {
    id: upload.id as ObjectId,
    write(chunk) {
      if (failure) return true;
      return upload.write(chunk);
    },
    drained() {
      return failure ? Promise.resolve() : new Promise((resolve) => upload.once('drain', () => resolve()));
    },
    finish() {
      if (failure) return Promise.reject(failure);
      return new Promise((resolve, reject) => {
        upload.once('error', reject);
        upload.once('finish', () => resolve(upload.id as ObjectId));
        upload.end();
      });
    },
    async abort() {
      await upload.abort().catch(() => {});
    },
  };
}

/** False when the raw file was never completed or was removed (a failed acceptance). */
export async function rawExists(store: Store, rawId: ObjectId): Promise<boolean> {
  return (await store.db.collection('raw.files').countDocuments({ _id: rawId }, { limit: 1 })) === 1;
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
