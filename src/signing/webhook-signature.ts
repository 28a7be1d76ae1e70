// Webhook signing: the service's own GitHub-style `x-service-signature` and the Standard Webhooks
// (standardwebhooks.com) `webhook-signature`, plus the header set every delivery attempt carries.
// Pure functions over the exact body bytes; nothing here re-serialises a payload.

import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';

const STANDARD_WEBHOOK_SECRET_PREFIX = 'whsec_';

// Standard, padded base64 only: Buffer's decoder silently skips bad characters, which would
// yield a key no receiver can reproduce, so a malformed secret must fail loudly instead.
const STRICT_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Header names, lowercase as undici and node:http both normalise them. */
export const DELIVERY_HEADER = Object.freeze({
  contentType: 'content-type',
  webhookId: 'webhook-id',
  webhookTimestamp: 'webhook-timestamp',
  webhookSignature: 'webhook-signature',
  serviceSignature: 'x-service-signature',
} as const);

/**
 * GitHub's X-Hub-Signature-256 scheme: `sha256=` + lowercase hex HMAC-SHA256 of `body`,
 * keyed with the UTF-8 bytes of the whole `secret` (a `whsec_` prefix is not special here).
 */
export function serviceSignature(secret: string, body: Uint8Array): string {
  const mac = createHmac('sha256', hmacKey('service', secret)).update(body).digest('hex');
  return `sha256=${mac}`;
}

/**
 * Standard Webhooks v1 signature: `v1,` + base64 HMAC-SHA256 of `<webhookId>.<timestampSeconds>.<body>`.
 * A `whsec_`-prefixed secret is keyed with the base64-decoding of the remainder; any other secret
 * with its UTF-8 bytes.
 *
 * @param timestampSeconds Unix time in whole seconds, as sent in `webhook-timestamp`.
 * @throws RangeError if `timestampSeconds` is not a non-negative safe integer (a fractional value
 *   would be signed in a form the receiver never sees).
 * @throws TypeError if a `whsec_` secret's remainder is empty or not valid padded base64.
 */
export function standardWebhookSignature(
  secret: string,
  webhookId: string,
  timestampSeconds: number,
  body: Uint8Array,
): string {
  assertTimestamp(timestampSeconds);
  const mac = createHmac('sha256', hmacKey('standard', secret))
    .update(`${webhookId}.${timestampSeconds}.`, 'utf8')
    .update(body)
    .digest('base64');
  return `v1,${mac}`;
}

/**
 * Each secret's HMAC keys, made once: node:crypto takes a Buffer key by a path that cost about
 * 10 µs per signature (two per delivery), a KeyObject straight through. Bounded, the oldest first.
 */
const hmacKeys = new Map<string, KeyObject>();
const MAX_HMAC_KEYS = 1000;

function hmacKey(scheme: 'service' | 'standard', secret: string): KeyObject {
  const name = `${scheme}:${secret}`;
  let key = hmacKeys.get(name);
  if (!key) {
    key = createSecretKey(scheme === 'service' ? Buffer.from(secret, 'utf8') : standardWebhookKey(secret));
    if (hmacKeys.size >= MAX_HMAC_KEYS) hmacKeys.delete(hmacKeys.keys().next().value!);
    hmacKeys.set(name, key);
  }
  return key;
}

function assertTimestamp(timestampSeconds: number): void {
  if (!Number.isSafeInteger(timestampSeconds) || timestampSeconds < 0) {
    throw new RangeError(`timestampSeconds must be a non-negative integer, got ${timestampSeconds}`);
  }
}

/** The HMAC key of a Standard Webhooks signature; throws TypeError for a malformed whsec_ secret. */
export function standardWebhookKey(secret: string): Buffer {
  if (!secret.startsWith(STANDARD_WEBHOOK_SECRET_PREFIX)) {
    return Buffer.from(secret, 'utf8');
  }
  const encoded = secret.slice(STANDARD_WEBHOOK_SECRET_PREFIX.length);
  if (encoded.length === 0 || !STRICT_BASE64.test(encoded)) {
    throw new TypeError('whsec_ secret is not valid base64');
  }
  return Buffer.from(encoded, 'base64');
}

/** Inputs to {@link deliveryHeaders}. */
export interface DeliveryHeadersInput {
  /** The delivery's id, sent as webhook-id: stable across retries, so receivers can deduplicate. */
  deliveryId: string;
  /** Unix time of this attempt, whole seconds. */
  timestampSeconds: number;
  /** Endpoint signing secret; absent or empty means the endpoint is unsigned. */
  secret?: string;
  /**
   * The secret a rotation replaced, while the overlap lasts: `webhook-signature` carries its
   * signature after the current one (Standard Webhooks' space-separated list), so a receiver that
   * still verifies with it keeps verifying. `x-service-signature` has room for one: the current.
   * Ignored without `secret`.
   */
  previousSecret?: string;
  /** The exact bytes that will be POSTed. */
  body: Uint8Array;
}

/**
 * Headers for one delivery attempt: always `content-type`, `webhook-id` and `webhook-timestamp`;
 * with a non-empty secret also `x-service-signature` and `webhook-signature` (with a previous
 * secret, two signatures in it).
 *
 * @throws as {@link standardWebhookSignature} does; the timestamp is checked even when unsigned.
 */
export function deliveryHeaders(input: DeliveryHeadersInput): Record<string, string> {
  const { deliveryId, timestampSeconds, secret, previousSecret, body } = input;
  assertTimestamp(timestampSeconds);
  const headers: Record<string, string> = {
    [DELIVERY_HEADER.contentType]: 'application/json',
    [DELIVERY_HEADER.webhookId]: deliveryId,
    [DELIVERY_HEADER.webhookTimestamp]: String(timestampSeconds),
  };
  if (typeof secret === 'string' && secret.length > 0) {
    headers[DELIVERY_HEADER.serviceSignature] = serviceSignature(secret, body);
    const signatures = [standardWebhookSignature(secret, deliveryId, timestampSeconds, body)];
    if (previousSecret && previousSecret !== secret)
      signatures.push(standardWebhookSignature(previousSecret, deliveryId, timestampSeconds, body));
    headers[DELIVERY_HEADER.webhookSignature] = signatures.join(' ');
  }
  return headers;
}
