// /domains: the domains the service accepts mail for. Names are hostnames, stored lowercase in
// their ASCII (punycode) form, unique (a duplicate is 409). Deleting a domain deletes its routes.
import { domainToASCII } from 'node:url';
import type { FastifyPluginAsync } from 'fastify';
import { ServiceError } from '../errors/catalog.ts';
import type { DomainDoc } from '../store/documents.ts';
import { createDomain, deleteDomain, findDomainByName, listDomains } from '../store/domains.ts';
import { isDuplicateKey } from '../store/ids.ts';
import type { Store } from '../store/mongo.ts';

export interface DomainView {
  id: string;
  name: string;
  created_at: string;
}

export function toDomainView(doc: DomainDoc): DomainView {
  return { id: doc._id, name: doc.name, created_at: doc.created_at.toISOString() };
}

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/** The canonical form of a domain name, or undefined when it is not a valid hostname. */
export function normaliseDomainName(input: string): string | undefined {
  const trimmed = input.trim().replace(/\.$/, '');
  if (trimmed.length === 0 || trimmed.length > 253) return undefined;
  const ascii = domainToASCII(trimmed).toLowerCase();
  if (!ascii || ascii.length > 253) return undefined;
  const labels = ascii.split('.');
  if (labels.length < 2 || !labels.every((label) => LABEL.test(label))) return undefined;
  // a name whose last label is numeric is an IP address, not a mail domain
  if (/^\d+$/.test(labels[labels.length - 1]!)) return undefined;
  return ascii;
}

/** What the resources that change routing need: the store, and whom to tell of a change. */
export interface RoutingResourceOptions {
  store: Store;
  /** resolves once every process of this instance routes by the change (see buildApp) */
  routingChanged: () => Promise<void>;
}

export const domainRoutes: FastifyPluginAsync<RoutingResourceOptions> = async (
  app,
  { store, routingChanged },
) => {
  app.get('/domains', async () => (await listDomains(store)).map(toDomainView));

  app.post<{ Body: { name: string } }>(
    '/domains',
    {
      schema: {
        body: {
          type: 'object',
          required: ['name'],
          additionalProperties: false,
          properties: { name: { type: 'string', minLength: 1, maxLength: 300 } },
        },
      },
    },
    async (request, reply) => {
      const name = normaliseDomainName(request.body.name);
      if (!name) {
        throw new ServiceError(
          'invalid_domain_name',
          'name must be a domain name such as example.com (letters, digits and hyphens, dot-separated labels)',
        );
      }
      if (await findDomainByName(store, name))
        throw new ServiceError('domain_exists', `domain ${name} already exists`);
      try {
        const doc = await createDomain(store, name);
        await routingChanged();
        return reply.code(201).send(toDomainView(doc));
      } catch (err) {
        if (isDuplicateKey(err)) throw new ServiceError('domain_exists', `domain ${name} already exists`);
        throw err;
      }
    },
  );

  app.delete<{ Params: { id: string } }>('/domains/:id', async (request, reply) => {
    if (!(await deleteDomain(store, request.params.id))) {
      throw new ServiceError('not_found', `domain ${request.params.id} not found`);
    }
    await routingChanged();
    return reply.code(204).send();
  });
};
