// An independent reading of the Standard Webhooks verification (standardwebhooks.com, "Verifying
// webhooks"), written from the specification rather than from our signing code: the tests check
// deliveries with it as a receiver would.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/** The key a secret stands for: `whsec_` + base64, else the secret's own bytes. */
function keyOf(secret: string): Buffer {
  return secret.startsWith('whsec_') ? Buffer.from(secret.slice(6), 'base64') : Buffer.from(secret, 'utf8');
}

/**
 * True when one of the `v1,` signatures in `webhook-signature` (a space-separated list) is the
 * HMAC-SHA256 of `id.timestamp.body` keyed with `secret`, and the timestamp is within 5 minutes.
 */
export function verifiesStandard(secret: string, headers: IncomingHttpHeaders, body: Buffer): boolean {
  const id = String(headers['webhook-id'] ?? '');
  const timestamp = String(headers['webhook-timestamp'] ?? '');
  if (!id || !/^\d+$/.test(timestamp) || Math.abs(Date.now() / 1000 - Number(timestamp)) > 300) return false;
  const expected = createHmac('sha256', keyOf(secret))
    .update(Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]))
    .digest();
  return String(headers['webhook-signature'] ?? '')
    .split(' ')
    .some((entry) => {
      const [version, encoded] = entry.split(',', 2);
      if (version !== 'v1' || !encoded) return false;
      const given = Buffer.from(encoded, 'base64');
      return given.length === expected.length && timingSafeEqual(given, expected);
    });
}

/** True when `x-service-signature` is `sha256=` + the hex HMAC-SHA256 of the body keyed with the secret's bytes. */
export function verifiesService(secret: string, headers: IncomingHttpHeaders, body: Buffer): boolean {
  const expected = `sha256=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('hex')}`;
  const given = Buffer.from(String(headers['x-service-signature'] ?? ''));
  return given.length === expected.length && timingSafeEqual(given, Buffer.from(expected));
}
