// The `keys` collection: random keys the service makes for itself, shared by every process and
// machine on the database and kept across restarts (the HMAC key of attachment URLs: a URL handed
// out by one worker must verify on any other, and after a restart, until it expires).
import { randomBytes } from 'node:crypto';
import { isDuplicateKey } from './ids.ts';
import type { Store } from './mongo.ts';

/** The HMAC key of attachment URLs (src/signing/attachment-url.ts). */
export const ATTACHMENT_URL_KEY = 'attachment-url';

interface KeyDoc {
  _id: string;
  /** base64 */
  key: string;
  created_at: Date;
}

/** The key named `name`, made (32 random bytes) by whichever process asks first. */
export async function serviceKey(store: Store, name: string): Promise<string> {
  const keys = store.db.collection<KeyDoc>('keys');
  const found = await keys.findOne({ _id: name });
  if (found) return found.key;
  const made: KeyDoc = { _id: name, key: randomBytes(32).toString('base64'), created_at: new Date() };
  try {
    await keys.insertOne(made);
    return made.key;
  } catch (err) {
    // another process made it first: theirs is the key
    if (!isDuplicateKey(err)) throw err;
    const theirs = await keys.findOne({ _id: name });
    if (!theirs) throw err;
    return theirs.key;
  }
}
