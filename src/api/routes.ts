// /routes: recipient patterns of a registered domain and the webhook their mail goes to.
import { randomBytes } from 'node:crypto';
import type { FastifyPluginAsync } from 'fastify';
import { ServiceError } from '../errors/catalog.ts';
import { DEFAULT_REJECT_REPLY, isRejectReply, ROUTE_ACTIONS, type RouteAction } from '../route/actions.ts';
import { destinationsOf, MAX_EXTRA_DESTINATIONS } from '../route/destinations.ts';
import type { RouteDirectory } from '../route/directory.ts';
import { checkFilters, type FilterName, type MatchFacts, needsContent } from '../route/filters.ts';
import { MAX_ADDRESS_LENGTH } from '../route/match.ts';
import { parseRecipientPattern } from '../route/pattern.ts';
import { previousSecretUntil } from '../route/secret-rotation.ts';
import { standardWebhookKey } from '../signing/webhook-signature.ts';
import type { PatternKind, RouteDestinationDoc, RouteDoc, RouteFilterDoc } from '../store/documents.ts';
import { findDomainByName } from '../store/domains.ts';
import type { Store } from '../store/mongo.ts';
import {
  addDestination,
  createRoute,
  deleteRoute,
  findRoute,
  findRouteByPattern,
  listRoutes,
  type NewRoute,
  removeDestination,
  updateRoute,
} from '../store/routes.ts';
import { normaliseDomainName, type RoutingResourceOptions } from './domains.ts';

export interface RouteView {
  id: string;
  domain: string;
  recipient_pattern: string;
  webhook_url: string;
  webhook_secret?: string;
  dmarc_reject?: true;
  action?: 'reject' | 'drop';
  reject_reply?: string;
  previous_secret_until?: string;
  filters?: RouteFilterDoc;
  destinations?: DestinationView[];
  created_at: string;
}

export interface DestinationView {
  id: string;
  webhook_url: string;
  webhook_secret?: string;
  created_at: string;
}

function toDestinationView(doc: RouteDestinationDoc): DestinationView {
  return {
    id: doc.id,
    webhook_url: doc.webhook_url,
    ...(doc.webhook_secret ? { webhook_secret: doc.webhook_secret } : {}),
    created_at: doc.created_at.toISOString(),
  };
}

export function toRouteView(doc: RouteDoc, now: Date = new Date()): RouteView {
  const previousUntil = previousSecretUntil(doc, now);
  return {
    id: doc._id,
    domain: doc.domain,
    recipient_pattern: doc.recipient_pattern,
    webhook_url: doc.webhook_url,
    ...(doc.webhook_secret ? { webhook_secret: doc.webhook_secret } : {}),
    ...(doc.dmarc_reject ? { dmarc_reject: true as const } : {}),
    ...(doc.action ? { action: doc.action } : {}),
    ...(doc.reject_reply ? { reject_reply: doc.reject_reply } : {}),
    ...(previousUntil ? { previous_secret_until: previousUntil.toISOString() } : {}),
    ...(doc.filters ? { filters: doc.filters } : {}),
    ...(doc.destinations?.length ? { destinations: doc.destinations.map(toDestinationView) } : {}),
    created_at: doc.created_at.toISOString(),
  };
}

export const MAX_WEBHOOK_URL_LENGTH = 2048;

/** C0 controls and DEL: nothing a secret needs, and NUL cannot be stored on FerretDB. */
function hasControlCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x20 || code === 0x7f) return true;
  }
  return false;
}

/** An absolute http(s) URL with a host, or undefined. */
export function normaliseWebhookUrl(input: string): string | undefined {
  if (input.length > MAX_WEBHOOK_URL_LENGTH || /\s/.test(input)) return undefined;
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    return undefined;
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) return undefined;
  return url.href;
}

interface CreateRouteBody {
  domain: string;
  recipient_pattern: string;
  webhook_url: string;
  webhook_secret?: string;
  dmarc_reject?: boolean;
  action?: RouteAction;
  reject_reply?: string;
  filters?: FiltersBody;
}

interface FiltersBody {
  mail_from?: string;
  header?: { name: string; value: string };
  dmarc?: 'pass';
}

interface UpdateRouteBody {
  recipient_pattern?: string;
  webhook_url?: string;
  /** '' removes the secret (deliveries go unsigned at once) */
  webhook_secret?: string;
  /** how long the replaced secret keeps signing, seconds; alone, it shortens (0: ends) an overlap */
  secret_grace_seconds?: number;
  dmarc_reject?: boolean;
  action?: RouteAction;
  /** '' goes back to the default reply */
  reject_reply?: string;
  /** replaces the route's filters; {} removes them */
  filters?: FiltersBody;
}

/** How long a replaced secret keeps signing deliveries by default: a day to deploy the new one. */
export const DEFAULT_SECRET_GRACE_SECONDS = 24 * 60 * 60;
export const MAX_SECRET_GRACE_SECONDS = 30 * 24 * 60 * 60;

const ROUTE_FIELD_SCHEMAS = Object.freeze({
  recipient_pattern: { type: 'string', minLength: 1, maxLength: 1000 },
  webhook_url: { type: 'string', minLength: 1, maxLength: 10_000 },
  webhook_secret: { type: 'string', maxLength: 1024 },
  dmarc_reject: { type: 'boolean' },
  action: { type: 'string', enum: ROUTE_ACTIONS },
  reject_reply: { type: 'string', maxLength: 300 },
  filters: {
    type: 'object',
    additionalProperties: false,
    properties: {
      mail_from: { type: 'string', minLength: 1, maxLength: 300 },
      header: {
        type: 'object',
        required: ['name', 'value'],
        additionalProperties: false,
        properties: {
          name: { type: 'string', minLength: 1, maxLength: 100 },
          value: { type: 'string', minLength: 1, maxLength: 300 },
        },
      },
      dmarc: { type: 'string', enum: ['pass'] },
    },
  },
});

/**
 * The filters, normalised, or undefined for none; a `reject` route may only filter on the envelope
 * sender, since it answers at RCPT, before the message is there.
 */
function checkedFilters(
  body: FiltersBody | undefined,
  action: RouteAction | undefined,
): RouteFilterDoc | undefined {
  if (body === undefined) return undefined;
  const checked = checkFilters(body);
  if (!checked.ok) throw new ServiceError('invalid_request', checked.reason);
  const filters = Object.keys(checked.value).length > 0 ? checked.value : undefined;
  if (action === 'reject' && needsContent(filters)) {
    throw new ServiceError(
      'invalid_request',
      'filters: a reject route answers at RCPT, before the message is there: it can filter on mail_from only',
    );
  }
  return filters;
}

function checkedWebhookUrl(input: string): string {
  const webhookUrl = normaliseWebhookUrl(input);
  if (!webhookUrl) {
    throw new ServiceError(
      'invalid_webhook_url',
      `webhook_url must be an absolute http:// or https:// URL of at most ${MAX_WEBHOOK_URL_LENGTH} characters`,
    );
  }
  return webhookUrl;
}

function checkSecret(secret: string): void {
  if (hasControlCharacter(secret)) {
    throw new ServiceError('invalid_request', 'webhook_secret: control characters are not allowed');
  }
  try {
    standardWebhookKey(secret);
  } catch {
    throw new ServiceError('invalid_request', 'webhook_secret: after whsec_ must come a base64-encoded key');
  }
}

function checkRejectReply(reply: string): void {
  if (!isRejectReply(reply)) {
    throw new ServiceError(
      'invalid_request',
      'reject_reply: must be a 45x or 55x reply code, an enhanced status code of the same class and a text, such as "550 5.7.1 No mail here"',
    );
  }
}

/**
 * The pattern, parsed for `domain`, when no other route of the domain has it: a second route for
 * the same pattern could never match, so it is refused rather than kept as a trap. `alice` and
 * `alice@<its domain>` are the same pattern written two ways.
 */
async function checkedPattern(store: Store, input: string, domain: string, exceptId?: string) {
  const pattern = parseRecipientPattern(input, domain);
  if (!pattern.ok) throw new ServiceError('invalid_recipient_pattern', pattern.reason);
  const { pattern: text, kind, scope } = pattern.value;
  const sameText =
    kind === 'regex'
      ? [text]
      : [text, scope === 'address' ? text.slice(0, text.lastIndexOf('@')) : `${text}@${domain}`];
  const existing = await findRouteByPattern(store, domain, sameText, exceptId);
  if (existing) {
    throw new ServiceError(
      'route_exists',
      `route ${existing._id} already has recipient_pattern ${JSON.stringify(existing.recipient_pattern)} for ${domain}`,
    );
  }
  return pattern.value;
}

/** What a PATCH writes: the fields it replaces and the ones it removes. */
function secretChange(
  current: RouteDoc,
  body: UpdateRouteBody,
  now: Date,
): { set: Partial<NewRoute>; unset: Array<keyof NewRoute> } {
  const previous: Array<keyof NewRoute> = ['previous_webhook_secret', 'previous_secret_until'];
  const graceMs = (body.secret_grace_seconds ?? DEFAULT_SECRET_GRACE_SECONDS) * 1000;
  const secret = body.webhook_secret;
  if (secret === undefined || secret === (current.webhook_secret ?? '')) {
    // no new secret: a grace period alone ends (0) or shortens the overlap under way
    if (body.secret_grace_seconds === undefined || !previousSecretUntil(current, now))
      return { set: {}, unset: [] };
    if (graceMs === 0) return { set: {}, unset: previous };
    return { set: { previous_secret_until: new Date(now.getTime() + graceMs) }, unset: [] };
  }
  if (!secret) return { set: {}, unset: ['webhook_secret', ...previous] };
  // the secret in use is the one receivers may still verify with; one older than it is dropped
  if (!current.webhook_secret || graceMs === 0) return { set: { webhook_secret: secret }, unset: previous };
  return {
    set: {
      webhook_secret: secret,
      previous_webhook_secret: current.webhook_secret,
      previous_secret_until: new Date(now.getTime() + graceMs),
    },
    unset: [],
  };
}

const KIND_NAMES: Readonly<Record<PatternKind, string>> = Object.freeze({
  exact: 'exact',
  plus: 'plus-addressing',
  regex: 'regex',
  wildcard: 'wildcard',
});

/** Why `address` goes where it goes, in the words an operator needs (SMTP reply included). */
/** What the tester is told of the message besides its recipient: the facts routes' filters read. */
export interface TesterFacts {
  mail_from?: string;
  /** `Name: value` */
  header?: string;
  dmarc?: string;
}

function factsOf(query: TesterFacts): MatchFacts {
  const facts: MatchFacts = {};
  if (query.mail_from !== undefined) facts.mailFrom = query.mail_from.trim().toLowerCase();
  if (query.header !== undefined) {
    const colon = query.header.indexOf(':');
    if (colon <= 0) throw new ServiceError('invalid_query', 'header must be written as Name: value');
    facts.headers = {
      [query.header.slice(0, colon).trim().toLowerCase()]: [query.header.slice(colon + 1).trim()],
    };
  }
  if (query.dmarc !== undefined) facts.dmarc = query.dmarc;
  return facts;
}

const FILTER_WORDS: Readonly<Record<FilterName, string>> = Object.freeze({
  mail_from: 'envelope sender',
  header: 'header',
  dmarc: 'DMARC result',
});

export async function explainMatch(directory: RouteDirectory, input: string, query: TesterFacts = {}) {
  const address = input.trim().toLowerCase();
  const at = address.lastIndexOf('@');
  if (at <= 0 || at === address.length - 1 || address.length > MAX_ADDRESS_LENGTH) {
    throw new ServiceError('invalid_query', 'address must be an email address such as alice@example.com');
  }
  const domain = address.slice(at + 1);
  if (!(await directory.servesDomain(domain))) {
    return {
      address,
      domain_registered: false,
      matched: false,
      reason: `${domain} is not a registered domain: mail to this address is refused with 550 5.7.1`,
    };
  }
  const facts = factsOf(query);
  const { found, passedOver } = await directory.explain(address, facts);
  const passed_over = passedOver.map(({ route, filter }) => ({ route_id: route.id, filter }));
  const passedOverText = passedOver
    .map(
      ({ route, filter }) =>
        `route ${route.id} (${JSON.stringify(route.recipient_pattern)}) is passed over by its ${FILTER_WORDS[filter]} filter; `,
    )
    .join('');
  if (!found) {
    return {
      address,
      domain_registered: true,
      matched: false,
      ...(passed_over.length > 0 ? { passed_over } : {}),
      reason: `${passedOverText}no route of ${domain} takes this address: mail to it is refused with 550 5.1.1`,
    };
  }
  const kind = KIND_NAMES[found.route.kind];
  const scope = found.route.scope === 'local' ? 'the local part' : 'the whole address';
  const action = found.route.action ?? 'webhook';
  const reply = found.route.reject_reply ?? DEFAULT_REJECT_REPLY;
  const outcome = {
    webhook: `mail to it is accepted and delivered to ${destinationsOf(found.route, new Date())
      .map((d) => d.url)
      .join(' and ')}`,
    reject: `mail to it is refused at RCPT with ${reply}`,
    drop: 'mail to it is accepted and recorded, and not delivered',
  }[action];
  return {
    address,
    domain_registered: true,
    matched: true,
    route: toRouteView(found.route),
    kind: found.route.kind,
    ...(found.plusTag !== undefined ? { plus_tag: found.plusTag } : {}),
    action,
    ...(action === 'reject' && !found.undecided ? { smtp_reply: reply } : {}),
    ...(passed_over.length > 0 ? { passed_over } : {}),
    ...(found.undecided ? { undecided: found.undecided } : {}),
    ...(action === 'webhook'
      ? {
          destinations: destinationsOf(found.route, new Date()).map((d) => ({
            ...(d.id !== undefined ? { id: d.id } : {}),
            webhook_url: d.url,
          })),
        }
      : {}),
    reason:
      passedOverText +
      `the ${kind} pattern ${JSON.stringify(found.route.recipient_pattern)} matches ${scope}; ` +
      'exact patterns win over plus-addressing, then regex, then wildcard, and the oldest route within a kind; ' +
      (found.undecided
        ? `its ${FILTER_WORDS[found.undecided]} filter is not known before the message is parsed: the recipient is accepted at RCPT, and if the filter fails at routing the next route by precedence takes it`
        : outcome),
  };
}

export const routeRoutes: FastifyPluginAsync<RoutingResourceOptions & { directory: RouteDirectory }> = async (
  app,
  { store, routingChanged, directory },
) => {
  // The tester answers from the snapshot the SMTP listener and the router of this process use,
  // which every change made through the API drops before it is answered. A directory of its own
  // that reloaded on every question disagreed with them: a question asked just after a change
  // shared a load started just before it (a domain created a moment ago: `domain_registered: false`).
  app.get('/routes', async () => (await listRoutes(store)).map((doc) => toRouteView(doc)));

  app.get<{ Querystring: { address: string } & TesterFacts }>(
    '/routes/match',
    {
      schema: {
        querystring: {
          type: 'object',
          required: ['address'],
          additionalProperties: false,
          properties: {
            address: { type: 'string', minLength: 1, maxLength: 1000 },
            mail_from: { type: 'string', maxLength: 1000 },
            header: { type: 'string', minLength: 1, maxLength: 2000 },
            dmarc: { type: 'string', enum: ['pass', 'fail', 'none', 'temperror', 'permerror'] },
          },
        },
      },
    },
    async (request) => {
      const { address, ...facts } = request.query;
      return explainMatch(directory, address, facts);
    },
  );

  app.post<{ Body: CreateRouteBody }>(
    '/routes',
    {
      schema: {
        body: {
          type: 'object',
          required: ['domain', 'recipient_pattern', 'webhook_url'],
          additionalProperties: false,
          properties: {
            domain: { type: 'string', minLength: 1, maxLength: 300 },
            ...ROUTE_FIELD_SCHEMAS,
          },
        },
      },
    },
    async (request, reply) => {
      const body = request.body;
      const domain = normaliseDomainName(body.domain);
      if (!domain || !(await findDomainByName(store, domain))) {
        throw new ServiceError(
          'unknown_domain',
          `domain ${JSON.stringify(body.domain.slice(0, 300))} is not registered`,
        );
      }
      const webhookUrl = checkedWebhookUrl(body.webhook_url);
      if (body.webhook_secret) checkSecret(body.webhook_secret);
      if (body.reject_reply) checkRejectReply(body.reject_reply);
      const filters = checkedFilters(body.filters, body.action);
      const pattern = await checkedPattern(store, body.recipient_pattern, domain);
      const doc = await createRoute(store, {
        domain,
        recipient_pattern: pattern.pattern,
        kind: pattern.kind,
        scope: pattern.scope,
        webhook_url: webhookUrl,
        ...(body.webhook_secret ? { webhook_secret: body.webhook_secret } : {}),
        ...(body.dmarc_reject ? { dmarc_reject: true as const } : {}),
        ...(body.action && body.action !== 'webhook' ? { action: body.action } : {}),
        ...(body.reject_reply ? { reject_reply: body.reject_reply } : {}),
        ...(filters ? { filters } : {}),
      });
      await routingChanged();
      return reply.code(201).send(toRouteView(doc));
    },
  );

  // One write, then every worker of the instance drops its snapshot before the answer: a recipient
  // is routed by the route as it was or as it is, never refused in between (as it was when a
  // change meant a delete and a create).
  app.patch<{ Params: { id: string }; Body: UpdateRouteBody }>(
    '/routes/:id',
    {
      schema: {
        body: {
          type: 'object',
          minProperties: 1,
          additionalProperties: false,
          properties: {
            ...ROUTE_FIELD_SCHEMAS,
            secret_grace_seconds: { type: 'integer', minimum: 0, maximum: MAX_SECRET_GRACE_SECONDS },
          },
        },
      },
    },
    async (request) => {
      const { body } = request;
      const current = await findRoute(store, request.params.id);
      if (!current) throw new ServiceError('not_found', `route ${request.params.id} not found`);
      const set: Partial<NewRoute> = {};
      const unset: Array<keyof NewRoute> = [];
      if (body.webhook_url !== undefined) set.webhook_url = checkedWebhookUrl(body.webhook_url);
      if (body.webhook_secret) checkSecret(body.webhook_secret);
      if (body.reject_reply) checkRejectReply(body.reject_reply);
      if (body.recipient_pattern !== undefined) {
        const pattern = await checkedPattern(store, body.recipient_pattern, current.domain, current._id);
        Object.assign(set, { recipient_pattern: pattern.pattern, kind: pattern.kind, scope: pattern.scope });
      }
      if (body.dmarc_reject === true) set.dmarc_reject = true;
      if (body.dmarc_reject === false) unset.push('dmarc_reject');
      if (body.action === 'webhook') unset.push('action');
      else if (body.action !== undefined) set.action = body.action;
      if (body.reject_reply) set.reject_reply = body.reject_reply;
      if (body.reject_reply === '') unset.push('reject_reply');
      const action = body.action ?? current.action;
      if (body.filters !== undefined) {
        const filters = checkedFilters(body.filters, action);
        if (filters) set.filters = filters;
        else unset.push('filters');
      } else checkedFilters(current.filters, action);
      const secret = secretChange(current, body, new Date());
      Object.assign(set, secret.set);
      unset.push(...secret.unset);
      const updated = await updateRoute(store, current._id, set, unset);
      if (!updated) throw new ServiceError('not_found', `route ${request.params.id} not found`);
      await routingChanged();
      return toRouteView(updated);
    },
  );

  // A destination is added or removed in one write of its own: the others, and their deliveries
  // (their ids carry the destination's), are not touched.
  app.post<{ Params: { id: string }; Body: { webhook_url: string; webhook_secret?: string } }>(
    '/routes/:id/destinations',
    {
      schema: {
        body: {
          type: 'object',
          required: ['webhook_url'],
          additionalProperties: false,
          properties: {
            webhook_url: ROUTE_FIELD_SCHEMAS.webhook_url,
            webhook_secret: ROUTE_FIELD_SCHEMAS.webhook_secret,
          },
        },
      },
    },
    async (request, reply) => {
      const { body } = request;
      const current = await findRoute(store, request.params.id);
      if (!current) throw new ServiceError('not_found', `route ${request.params.id} not found`);
      const webhookUrl = checkedWebhookUrl(body.webhook_url);
      if (body.webhook_secret) checkSecret(body.webhook_secret);
      if ((current.destinations?.length ?? 0) >= MAX_EXTRA_DESTINATIONS) {
        throw new ServiceError(
          'invalid_request',
          `destinations: a route has at most ${MAX_EXTRA_DESTINATIONS} besides its webhook_url`,
        );
      }
      const destination: RouteDestinationDoc = {
        id: `dst-${randomBytes(4).toString('hex')}`,
        webhook_url: webhookUrl,
        ...(body.webhook_secret ? { webhook_secret: body.webhook_secret } : {}),
        created_at: new Date(),
      };
      if (!(await addDestination(store, current._id, destination))) {
        throw new ServiceError('not_found', `route ${request.params.id} not found`);
      }
      await routingChanged();
      return reply.code(201).send(toDestinationView(destination));
    },
  );

  app.delete<{ Params: { id: string; destinationId: string } }>(
    '/routes/:id/destinations/:destinationId',
    async (request, reply) => {
      const { id, destinationId } = request.params;
      if (!(await removeDestination(store, id, destinationId))) {
        throw new ServiceError('not_found', `route ${id} has no destination ${destinationId}`);
      }
      await routingChanged();
      return reply.code(204).send();
    },
  );

  app.delete<{ Params: { id: string } }>('/routes/:id', async (request, reply) => {
    if (!(await deleteRoute(store, request.params.id))) {
      throw new ServiceError('not_found', `route ${request.params.id} not found`);
    }
    await routingChanged();
    return reply.code(204).send();
  });
};
