// /messages: read-only records of accepted mail with their lifecycle, newest first; replay of
// dead-lettered messages; the stored original.
import type { FastifyPluginAsync } from 'fastify';
import type { ReplayOutcome } from '../actor/replay.ts';
import { ServiceError } from '../errors/catalog.ts';
import { MESSAGE_STATES, type MessageStateName } from '../lifecycle/tables.ts';
import { EVENTS } from '../log/events.ts';
import type { Store } from '../store/mongo.ts';
import {
  getMessage,
  isId,
  listMessages,
  type MessageDoc,
  type MessageQuery,
  type MessageSummary,
  openRawStream,
  type ReplayTarget,
} from '../store/read-model.ts';
import { MAX_WEBHOOK_URL_LENGTH, normaliseWebhookUrl } from './routes.ts';

export const MAX_LIMIT = 1000;
export const MAX_OFFSET = 10_000_000;
// "retry" in the API's paths is an operator's replay (a new round of attempts); inside, a retry is
// only the automatic one after a failed attempt, so the names here say replay.
/** most messages one POST /messages/retry replays */
export const MAX_BULK_REPLAY = 1000;
const DOMAIN_FILTER = {
  type: 'string',
  minLength: 1,
  maxLength: 253,
  pattern: '^[^\\u0000-\\u001f\\u007f]*$',
};

interface BulkReplayBody {
  state?: 'dlq' | 'failed';
  domain?: string;
  limit?: number;
  /** only messages with a delivery of this route still to make (not delivered) */
  route_id?: string;
  /** received at or after this time (ISO 8601) */
  received_after?: string;
  /** received before this time (ISO 8601) */
  received_before?: string;
  /** keyset cursor: only messages older than this id (`next_before` of the previous call) */
  before?: string;
  /** for this replay only: where the deliveries (of route_id, or all) go instead of their destinations */
  webhook_url?: string;
}

/** The smallest message id of a millisecond: every message received before `ms` has a lower one. */
function firstIdAt(ms: number): string {
  return `m-${String(ms).padStart(13, '0')}${'0'.repeat(9)}`;
}

/** A time of the body, or a 400 naming the field. */
function bodyTime(value: string | undefined, field: string): number | undefined {
  if (value === undefined) return undefined;
  const ms = Date.parse(value);
  if (!Number.isFinite(ms) || ms < 0)
    throw new ServiceError('invalid_request', `${field} must be an ISO 8601 time`);
  return ms;
}

/** A query number: plain decimal digits only (no `0x10`, `1e1`, `+5` or ` 1`), then the range. */
function decimal(minimum: number, maximum: number, fallback: number) {
  return {
    default: fallback,
    allOf: [
      // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then, not a thenable
      { if: { type: 'string' }, then: { type: 'string', pattern: '^[0-9]+$' } },
      { type: 'integer', minimum, maximum },
    ],
  };
}

export interface MessageView {
  id: string;
  message_id: string;
  from: string;
  to: string[];
  subject: string;
  received_at: string;
  state: string;
}

export function toMessageView(doc: MessageSummary): MessageView {
  return {
    id: doc._id,
    message_id: doc.message_id,
    from: doc.from,
    to: doc.to,
    subject: doc.subject,
    received_at: doc.received_at.toISOString(),
    state: doc.state,
  };
}

/** The single-message view adds the whole history, every attempt and the per-route deliveries. */
export function toMessageDetail(doc: MessageDoc) {
  return {
    ...toMessageView(doc),
    history: doc.history.map((entry) => ({
      state: entry.state,
      at: entry.at.toISOString(),
      ...(entry.detail !== undefined ? { detail: entry.detail } : {}),
      ...(entry.delivery !== undefined ? { delivery: entry.delivery } : {}),
    })),
    attempts: doc.attempts.map((attempt) => ({
      delivery: attempt.delivery,
      at: attempt.at.toISOString(),
      ...(attempt.status_code !== undefined ? { status_code: attempt.status_code } : {}),
      ...(attempt.error !== undefined ? { error: attempt.error } : {}),
      duration_ms: attempt.duration_ms,
      ...(attempt.sent_at !== undefined ? { sent_at: attempt.sent_at.toISOString() } : {}),
      ...(attempt.content_type !== undefined ? { content_type: attempt.content_type } : {}),
      ...(attempt.retry_after !== undefined ? { retry_after: attempt.retry_after } : {}),
      ...(attempt.response_body !== undefined ? { response_body: attempt.response_body } : {}),
    })),
    deliveries: doc.deliveries.map((delivery) => ({
      id: delivery.id,
      route_id: delivery.route_id,
      ...(delivery.destination_id !== undefined ? { destination_id: delivery.destination_id } : {}),
      webhook_url: delivery.webhook_url,
      recipients: delivery.recipients,
      ...(delivery.plus_tag !== undefined ? { plus_tag: delivery.plus_tag } : {}),
      state: delivery.state,
      attempts: delivery.attempts,
      ...(delivery.next_attempt_at ? { next_attempt_at: delivery.next_attempt_at.toISOString() } : {}),
    })),
  };
}

interface Options {
  store: Store;
  replay?: ((id: string, to?: ReplayTarget, listed?: MessageStateName) => Promise<ReplayOutcome>) | undefined;
}

export const messageRoutes: FastifyPluginAsync<Options> = async (app, { store, replay }) => {
  /** The message has a delivery of this route that is not delivered (one lookup by id). */
  const hasUndelivered = async (id: string, routeId: string): Promise<boolean> =>
    (await getMessage(store, id))?.deliveries.some(
      (d) => d.route_id === routeId && d.state !== 'delivered',
    ) ?? false;

  app.get<{ Querystring: MessageQuery }>(
    '/messages',
    {
      schema: {
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            limit: decimal(1, MAX_LIMIT, 50),
            offset: decimal(0, MAX_OFFSET, 0),
            state: { type: 'string', enum: [...MESSAGE_STATES] },
            domain: { ...DOMAIN_FILTER },
            before: { type: 'string', minLength: 1, maxLength: 64 },
          },
        },
      },
    },
    async (request, reply) => {
      const { limit, offset, state, domain, before } = request.query;
      // coercion turns "Infinity" or "1e309" into a number the range checks let through
      if (!Number.isSafeInteger(limit) || !Number.isSafeInteger(offset)) {
        throw new ServiceError('invalid_query', 'limit and offset must be whole numbers');
      }
      const query: MessageQuery = { limit, offset };
      if (state) query.state = state;
      if (domain) query.domain = domain.toLowerCase();
      if (before !== undefined) {
        if (!isId('m', before)) throw new ServiceError('invalid_query', 'before must be a message id');
        query.before = before;
      }
      const page = await listMessages(store, query);
      // the next page by keyset (cheap at any depth): the same query, before the last id of this one
      if (page.length === limit) {
        const next = new URLSearchParams(request.query as unknown as Record<string, string>);
        next.delete('offset');
        next.set('before', page[page.length - 1]!._id);
        reply.header('link', `</messages?${next}>; rel="next"`);
      }
      return page.map(toMessageView);
    },
  );

  app.get<{ Params: { id: string } }>('/messages/:id', async (request) => {
    const doc = await getMessage(store, request.params.id);
    if (!doc) throw new ServiceError('not_found', `message ${request.params.id} not found`);
    return toMessageDetail(doc);
  });

  app.get<{ Params: { id: string } }>('/messages/:id/raw', async (request, reply) => {
    const doc = await getMessage(store, request.params.id);
    if (!doc) throw new ServiceError('not_found', `message ${request.params.id} not found`);
    const raw = await openRawStream(store, doc);
    if (!raw)
      throw new ServiceError(
        'raw_expired',
        `the raw bytes of message ${doc._id} are no longer kept (RAW_RETENTION); its record remains`,
      );
    return reply.type('message/rfc822').send(raw);
  });

  // bulk replay: the messages the listing would show for the filter (newest first, at most
  // `limit`), each replayed as POST /messages/{id}/retry would; those that moved on meanwhile are
  // skipped. Replayed messages leave the filter's state, so calling again takes the next ones.
  app.post<{ Body: BulkReplayBody }>(
    '/messages/retry',
    {
      // no body at all means the defaults
      preValidation: async (request) => {
        request.body ??= {};
      },
      schema: {
        body: {
          type: 'object',
          additionalProperties: false,
          properties: {
            state: { type: 'string', enum: ['dlq', 'failed'], default: 'dlq' },
            domain: { ...DOMAIN_FILTER },
            limit: { type: 'integer', minimum: 1, maximum: MAX_BULK_REPLAY, default: 100 },
            route_id: { type: 'string', minLength: 1, maxLength: 64 },
            received_after: { type: 'string', minLength: 1, maxLength: 64 },
            received_before: { type: 'string', minLength: 1, maxLength: 64 },
            before: { type: 'string', minLength: 1, maxLength: 64 },
            webhook_url: { type: 'string', minLength: 1, maxLength: 10_000 },
          },
        },
      },
    },
    async (request) => {
      if (!replay) throw new ServiceError('service_unavailable', 'replay is not available in this process');
      const { state, domain, limit, route_id: routeId, before } = request.body;
      const after = bodyTime(request.body.received_after, 'received_after');
      const until = bodyTime(request.body.received_before, 'received_before');
      if (before !== undefined && !isId('m', before))
        throw new ServiceError(
          'invalid_request',
          'before must be a message id (next_before of the previous call)',
        );
      if (routeId !== undefined && !isId('r', routeId))
        throw new ServiceError('invalid_request', 'route_id must be a route id');
      let to: ReplayTarget | undefined;
      if (request.body.webhook_url !== undefined) {
        const url = normaliseWebhookUrl(request.body.webhook_url);
        if (!url) {
          throw new ServiceError(
            'invalid_webhook_url',
            `webhook_url must be an absolute http:// or https:// URL of at most ${MAX_WEBHOOK_URL_LENGTH} characters`,
          );
        }
        to = { ...(routeId !== undefined ? { route_id: routeId } : {}), webhook_url: url };
      }
      const query: MessageQuery = { limit: limit ?? 100, offset: 0, state: state ?? 'dlq' };
      if (domain) query.domain = domain.toLowerCase();
      // the window's end and the cursor are both a keyset bound (ids carry their time)
      const bounds = [before, until !== undefined ? firstIdAt(until) : undefined].filter(
        (b) => b !== undefined,
      );
      if (bounds.length > 0) query.before = bounds.sort()[0]!;
      // at most `limit` messages are looked at, newest first: the scan, not only the replays, is bounded
      const scanned = await listMessages(store, query);
      const inWindow = scanned.filter((doc) => after === undefined || doc.received_at.getTime() >= after);
      // A page goes all at once: each replay's take is a chain of batched writes (its lease, its
      // insert, its record's take-out), so more at once is more per command, not more commands, and
      // with fewer at once the page went at the chain's pace (docs/BENCHMARKS.md, outage). Its
      // reads queue for the process's connections; the page is at most MAX_BULK_REPLAY.
      const kept = await Promise.all(
        inWindow.map(async (doc) =>
          routeId === undefined || (await hasUndelivered(doc._id, routeId)) ? doc : undefined,
        ),
      );
      const found = kept.filter((doc) => doc !== undefined);
      const outcomes = await Promise.all(found.map((doc) => replay(doc._id, to, doc.state)));
      const requeued = outcomes.filter((outcome) => outcome === 'ok').length;
      // more may be older than the last one looked at, and still in the window: where to go on from
      const last = scanned[scanned.length - 1];
      const more = scanned.length === query.limit && last !== undefined && inWindow.length === scanned.length;
      request.log.info(
        { event: EVENTS.messagesRequeued, matched: found.length, requeued, state: query.state },
        'bulk replay',
      );
      return { matched: found.length, requeued, ...(more ? { next_before: last._id } : {}) };
    },
  );

  // no body, or an empty object: a field here would be ignored, and the API ignores none
  const noFields = async (request: { body: unknown }) => {
    const body = request.body;
    if (body === undefined || body === null) return;
    if (typeof body !== 'object' || Array.isArray(body) || Object.keys(body).length > 0) {
      throw new ServiceError('invalid_request', 'this request takes no body fields');
    }
  };
  app.post<{ Params: { id: string } }>(
    '/messages/:id/retry',
    { preValidation: noFields },
    async (request, reply) => {
      if (!replay) throw new ServiceError('service_unavailable', 'replay is not available in this process');
      const outcome = await replay(request.params.id);
      if (outcome === 'not_found')
        throw new ServiceError('not_found', `message ${request.params.id} not found`);
      if (outcome === 'raw_expired')
        throw new ServiceError(
          'raw_expired',
          'its raw bytes are no longer kept (RAW_RETENTION): it cannot be parsed again',
        );
      if (outcome === 'invalid_state') {
        throw new ServiceError('invalid_state', 'only a message in state dlq or failed can be retried');
      }
      const doc = await getMessage(store, request.params.id);
      return reply.code(202).send(doc ? toMessageDetail(doc) : undefined);
    },
  );
};
