// GET /messages/{id}/attachments/{n}: an attachment a payload sent by URL instead of inline. No API
// key: the URL carries its own authority (an HMAC signature and an expiry, src/deliver/
// attachment-url.ts); a changed or expired URL is 403. The bytes come from the stored raw message,
// parsed again in the parse pool, and are streamed out; raw bytes removed by retention are 410
// `raw_expired`, as for GET /messages/{id}/raw.
import { Readable } from 'node:stream';
import type { FastifyPluginAsync } from 'fastify';
import { ServiceError } from '../errors/catalog.ts';
import type { Parser } from '../parse/pool.ts';
import { checkAttachmentUrl } from '../signing/attachment-url.ts';
import type { MemoryBudget } from '../smtp/memory-budget.ts';
import type { Store } from '../store/mongo.ts';
import { getMessage, readRaw } from '../store/read-model.ts';

/** The path of the URL: isPublic (auth.ts) lets it through without the API key. */
export const ATTACHMENT_PATH = /^\/messages\/[^/?]+\/attachments\/\d+$/;

// the response is written in slices of this size, never as one more copy of the whole
const SLICE_BYTES = 256 * 1024;
/**
 * The Retry-After of a download refused for MEMORY_BUDGET, seconds: the budget frees as the
 * messages in flight are parsed, a second or two each for the largest.
 */
export const BUSY_RETRY_AFTER_SECONDS = 5;

interface Options {
  store: Store;
  /** the parse pool; absent: the endpoint answers 503 */
  pool?: Pick<Parser, 'attachment'> | undefined;
  /** the URL key (base64) */
  urlKey?: string | undefined;
  /** the worker's MEMORY_BUDGET: a download holds the message's bytes as a message in flight does */
  budget?: MemoryBudget | undefined;
}

interface AttachmentQuery {
  expires: string;
  signature: string;
}

export const attachmentRoutes: FastifyPluginAsync<Options> = async (app, { store, pool, urlKey, budget }) => {
  app.get<{ Params: { id: string; n: string }; Querystring: AttachmentQuery }>(
    '/messages/:id/attachments/:n',
    {
      schema: {
        params: {
          type: 'object',
          properties: { id: { type: 'string', maxLength: 64 }, n: { type: 'string', pattern: '^\\d{1,5}$' } },
        },
        querystring: {
          type: 'object',
          required: ['expires', 'signature'],
          additionalProperties: false,
          properties: {
            expires: { type: 'string', maxLength: 12 },
            signature: { type: 'string', maxLength: 64 },
          },
        },
      },
    },
    async (request, reply) => {
      if (!pool || !urlKey) throw new ServiceError('service_unavailable', 'attachments are not served here');
      const { id } = request.params;
      const index = Number(request.params.n);
      const verdict = checkAttachmentUrl(urlKey, id, index, request.query.expires, request.query.signature);
      if (verdict === 'invalid') throw new ServiceError('forbidden', 'the URL signature does not match');
      if (verdict === 'expired') throw new ServiceError('forbidden', 'the URL has expired');
      // a signed URL names a message we had: without its record (RECORD_RETENTION) or its raw bytes
      // (RAW_RETENTION), the attachment is gone
      const doc = await getMessage(store, id);
      // the message's bytes, then the attachment's (at most as many): both held until it is sent
      const share = doc && budget ? budget.reserve(doc.size) : undefined;
      if (doc && budget && !share)
        throw new ServiceError(
          'service_unavailable',
          'too much mail is in progress here (MEMORY_BUDGET): try again shortly',
          { retryAfterSeconds: BUSY_RETRY_AFTER_SECONDS },
        );
      let sent = false;
      try {
        const raw = doc ? await readRaw(store, doc) : undefined;
        if (!raw)
          throw new ServiceError(
            'raw_expired',
            `the raw bytes of message ${id} are no longer kept (RAW_RETENTION): the attachment is gone`,
          );
        const found = await pool.attachment(raw, index);
        if (!found.ok) {
          if (found.code === 'not_found') throw new ServiceError('not_found', found.message);
          throw new ServiceError('service_unavailable', `the attachment could not be read: ${found.message}`);
        }
        const bytes = Buffer.from(found.content.buffer, found.content.byteOffset, found.content.byteLength);
        if (share) reply.raw.once('close', () => share.release());
        sent = true;
        return reply
          .type(found.content_type || 'application/octet-stream')
          .header('content-length', bytes.length)
          .header('content-disposition', contentDisposition(found.filename))
          .header('cache-control', 'private, no-store')
          .send(Readable.from(slices(bytes)));
      } finally {
        if (!sent) share?.release();
      }
    },
  );
};

function* slices(bytes: Buffer): Generator<Buffer> {
  for (let start = 0; start < bytes.length; start += SLICE_BYTES)
    yield bytes.subarray(start, start + SLICE_BYTES);
}

/** attachment; filename (ASCII, quoted) and filename* (RFC 5987, UTF-8) when it has a name. */
function contentDisposition(filename: string): string {
  if (!filename) return 'attachment';
  const ascii = filename.replace(/[^\x20-\x7e]|["\\]/g, '_');
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(filename)}`;
}
