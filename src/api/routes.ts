// /routes: recipient patterns of a registered domain and the webhook their mail goes to.
import type { FastifyPluginAsync } from 'fastify';
import { ServiceError } from '../errors/catalog.ts';
import type { RouteDirectory } from '../route/directory.ts';
import { MAX_ADDRESS_LENGTH } from '../route/match.ts';
import { parseRecipientPattern } from '../route/pattern.ts';
import { standardWebhookKey } from '../signing/webhook-signature.ts';
import type { PatternKind, RouteDoc } from '../store/documents.ts';
import { findDomainByName } from '../store/domains.ts';
import { createRoute, deleteRoute, findRouteByPattern, listRoutes } from '../store/routes.ts';
import { normaliseDomainName, type RoutingResourceOptions } from './domains.ts';

export interface RouteView {
  id: string;
  domain: string;
  recipient_pattern: string;
  webhook_url: string;
  webhook_secret?: string;
  dmarc_reject?: true;
  created_at: string;
}

export function toRouteView(doc: RouteDoc): RouteView {
  return {
    id: doc._id,
    domain: doc.domain,
    recipient_pattern: doc.recipient_pattern,
    webhook_url: doc.webhook_url,
    ...(doc.webhook_secret ? { webhook_secret: doc.webhook_secret } : {}),
    ...(doc.dmarc_reject ? { dmarc_reject: true as const } : {}),
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
}

const KIND_NAMES: Readonly<Record<PatternKind, string>> = Object.freeze({
  exact: 'exact',
  plus: 'plus-addressing',
  regex: 'regex',
  wildcard: 'wildcard',
});

/** Why `address` goes where it goes, in the words an operator needs (SMTP reply included). */
export async function explainMatch(directory: RouteDirectory, input: string) {
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
  const found = await directory.match(address);
  if (!found) {
    return {
      address,
      domain_registered: true,
      matched: false,
      reason: `no route of ${domain} matches this address: mail to it is refused with 550 5.1.1`,
    };
  }
  const kind = KIND_NAMES[found.route.kind];
  const scope = found.route.scope === 'local' ? 'the local part' : 'the whole address';
  return {
    address,
    domain_registered: true,
    matched: true,
    route: toRouteView(found.route),
    kind: found.route.kind,
    ...(found.plusTag !== undefined ? { plus_tag: found.plusTag } : {}),
    reason:
      `the ${kind} pattern ${JSON.stringify(found.route.recipient_pattern)} matches ${scope}; ` +
      'exact patterns win over plus-addressing, then regex, then wildcard, and the oldest route within a kind',
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
  app.get('/routes', async () => (await listRoutes(store)).map(toRouteView));

  app.get<{ Querystring: { address: string } }>(
    '/routes/match',
    {
      schema: {
        querystring: {
          type: 'object',
          required: ['address'],
          additionalProperties: false,
          properties: { address: { type: 'string', minLength: 1, maxLength: 1000 } },
        },
      },
    },
    async (request) => explainMatch(directory, request.query.address),
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
            recipient_pattern: { type: 'string', minLength: 1, maxLength: 1000 },
            webhook_url: { type: 'string', minLength: 1, maxLength: 10_000 },
            webhook_secret: { type: 'string', maxLength: 1024 },
            dmarc_reject: { type: 'boolean' },
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
      const webhookUrl = normaliseWebhookUrl(body.webhook_url);
      if (!webhookUrl) {
        throw new ServiceError(
          'invalid_webhook_url',
          `webhook_url must be an absolute http:// or https:// URL of at most ${MAX_WEBHOOK_URL_LENGTH} characters`,
        );
      }
      if (body.webhook_secret) {
        if (hasControlCharacter(body.webhook_secret)) {
          throw new ServiceError('invalid_request', 'webhook_secret: control characters are not allowed');
        }
        try {
          standardWebhookKey(body.webhook_secret);
        } catch {
          throw new ServiceError(
            'invalid_request',
            'webhook_secret: after whsec_ must come a base64-encoded key',
          );
        }
      }
      const pattern = parseRecipientPattern(body.recipient_pattern, domain);
      if (!pattern.ok) throw new ServiceError('invalid_recipient_pattern', pattern.reason);
      // a second route for the same pattern could never match: refused rather than kept as a trap.
      // `alice` and `alice@<its domain>` are the same pattern written two ways.
      const { pattern: text, kind, scope } = pattern.value;
      const sameText =
        kind === 'regex'
          ? [text]
          : [text, scope === 'address' ? text.slice(0, text.lastIndexOf('@')) : `${text}@${domain}`];
      const existing = await findRouteByPattern(store, domain, sameText);
      if (existing) {
        throw new ServiceError(
          'route_exists',
          `route ${existing._id} already has recipient_pattern ${JSON.stringify(existing.recipient_pattern)} for ${domain}`,
        );
      }
      const doc = await createRoute(store, {
        domain,
        recipient_pattern: pattern.value.pattern,
        kind: pattern.value.kind,
        scope: pattern.value.scope,
        webhook_url: webhookUrl,
        ...(body.webhook_secret ? { webhook_secret: body.webhook_secret } : {}),
        ...(body.dmarc_reject ? { dmarc_reject: true as const } : {}),
      });
      await routingChanged();
      return reply.code(201).send(toRouteView(doc));
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
