// Owns the signed, expiring attachment URLs a payload carries instead of a large attachment's
// content: `<PUBLIC_URL>/messages/<id>/attachments/<n>?expires=<unix s>&signature=<base64url>`,
// the signature an HMAC-SHA256 of "<id>/<n>/<expires>" with the service's URL key. Pure: the parse
// thread signs, the API verifies, neither needs the other.
import { createHmac, timingSafeEqual } from 'node:crypto';

export interface AttachmentLinks {
  /** how receivers reach this service, without a trailing slash */
  publicUrl: string;
  /** the HMAC key, base64 */
  key: string;
  /** how long a URL is valid, ms */
  ttlMs: number;
}

function signature(key: string, messageId: string, index: number, expires: number): string {
  return createHmac('sha256', Buffer.from(key, 'base64'))
    .update(`${messageId}/${index}/${expires}`)
    .digest('base64url');
}

/** The URL of attachment `index` (its place in the payload's `attachments`) and when it expires. */
export function attachmentUrl(
  links: AttachmentLinks,
  messageId: string,
  index: number,
  nowMs = Date.now(),
): { url: string; expiresAt: Date } {
  const expires = Math.floor((nowMs + links.ttlMs) / 1000);
  const base = links.publicUrl.replace(/\/+$/, '');
  const sig = signature(links.key, messageId, index, expires);
  return {
    url: `${base}/messages/${encodeURIComponent(messageId)}/attachments/${index}?expires=${expires}&signature=${sig}`,
    expiresAt: new Date(expires * 1000),
  };
}

/** 'ok', or why the URL is refused: changed in any part ('invalid') or past its time ('expired'). */
export function checkAttachmentUrl(
  key: string,
  messageId: string,
  index: number,
  expires: string,
  given: string,
  nowMs = Date.now(),
): 'ok' | 'invalid' | 'expired' {
  if (!/^\d{1,12}$/.test(expires)) return 'invalid';
  const expected = Buffer.from(signature(key, messageId, index, Number(expires)));
  const actual = Buffer.from(given);
  if (actual.length !== expected.length || !timingSafeEqual(actual, expected)) return 'invalid';
  return Number(expires) * 1000 <= nowMs ? 'expired' : 'ok';
}
