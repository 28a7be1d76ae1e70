// /endpoints: each webhook endpoint (one webhook URL, see src/deliver/endpoint.ts) the routes use,
// with its health, and an operator's pause and resume. The list is the routes' endpoints with
// their records (src/store/endpoints.ts), plus any record not yet forgotten.
import type { FastifyPluginAsync, preValidationHookHandler } from 'fastify';
import { endpointId, endpointUrl } from '../deliver/endpoint.ts';
import { ServiceError } from '../errors/catalog.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { metrics } from '../metrics/metrics.ts';
import { type EndpointDoc, listEndpoints, pauseEndpoint, resumeEndpoint } from '../store/endpoints.ts';
import type { Store } from '../store/mongo.ts';
import { listRoutes } from '../store/routes.ts';

export interface EndpointView {
  id: string;
  url: string;
  /** the routes that post to it (empty: none any more; it is forgotten an hour after its last use) */
  routes: string[];
  state: EndpointDoc['state'];
  consecutive_failures: number;
  last_success_at?: string;
  last_failure_at?: string;
  last_failure_reason?: string;
  paused_at?: string;
  paused_by?: 'breaker' | 'operator';
  next_probe_at?: string;
}

function toEndpointView(id: string, url: string, routes: string[], doc: EndpointDoc | null): EndpointView {
  const iso = (date: Date | undefined) => date?.toISOString();
  const view: EndpointView = {
    id,
    url,
    routes,
    state: doc?.state ?? 'healthy',
    consecutive_failures: doc?.consecutive_failures ?? 0,
  };
  const optional = {
    last_success_at: iso(doc?.last_success_at),
    last_failure_at: iso(doc?.last_failure_at),
    last_failure_reason: doc?.last_failure_reason,
    paused_at: iso(doc?.paused_at),
    paused_by: doc?.paused_by,
    next_probe_at: doc?.state === 'paused' ? iso(doc.probe_at) : undefined,
  };
  for (const [key, value] of Object.entries(optional))
    if (value !== undefined) (view as unknown as Record<string, unknown>)[key] = value;
  return view;
}

/** Every endpoint: the routes' (with their records) and records of endpoints no route uses yet forgotten. */
async function allEndpoints(store: Store): Promise<EndpointView[]> {
  const [routes, docs] = await Promise.all([listRoutes(store), listEndpoints(store)]);
  const byUrl = new Map<string, string[]>();
  for (const route of routes) {
    const url = endpointUrl(route.webhook_url);
    byUrl.set(url, [...(byUrl.get(url) ?? []), route._id]);
  }
  const records = new Map(docs.map((doc) => [doc._id, doc]));
  const views = [...byUrl].map(([url, ids]) => {
    const id = endpointId(url);
    const doc = records.get(id) ?? null;
    records.delete(id);
    return toEndpointView(id, url, ids, doc);
  });
  for (const doc of records.values()) views.push(toEndpointView(doc._id, doc.url, [], doc));
  return views.sort((a, b) => (a.url < b.url ? -1 : a.url > b.url ? 1 : 0));
}

async function oneEndpoint(store: Store, id: string): Promise<EndpointView> {
  // ids are made by endpointId: anything else is not one, and is not looked up
  if (/^e-[0-9a-f]{20}$/.test(id)) {
    const found = (await allEndpoints(store)).find((view) => view.id === id);
    if (found) return found;
  }
  throw new ServiceError('not_found', `endpoint ${id} not found`);
}

const noFields: preValidationHookHandler = async (request) => {
  const body = request.body;
  if (body === undefined || body === null) return;
  if (typeof body !== 'object' || Array.isArray(body) || Object.keys(body).length > 0)
    throw new ServiceError('invalid_request', 'this request takes no body fields');
};

interface Options {
  store: Store;
  logger: Logger;
}

export const endpointRoutes: FastifyPluginAsync<Options> = async (app, { store, logger }) => {
  app.get('/endpoints', async () => allEndpoints(store));

  app.get<{ Params: { id: string } }>('/endpoints/:id', async (request) =>
    oneEndpoint(store, request.params.id),
  );

  app.post<{ Params: { id: string } }>(
    '/endpoints/:id/pause',
    { preValidation: noFields },
    async (request) => {
      const endpoint = await oneEndpoint(store, request.params.id);
      if (endpoint.state !== 'paused' || endpoint.paused_by !== 'operator') {
        await pauseEndpoint(store, endpoint.id, endpoint.url, new Date(), { by: 'operator' });
        metrics.endpointPaused('operator');
        logger.warn(
          { event: EVENTS.endpointPaused, endpoint: endpoint.id, by: 'operator' },
          'endpoint paused by an operator: its deliveries wait until it is resumed',
        );
      }
      return oneEndpoint(store, endpoint.id);
    },
  );

  app.post<{ Params: { id: string } }>(
    '/endpoints/:id/resume',
    { preValidation: noFields },
    async (request) => {
      const endpoint = await oneEndpoint(store, request.params.id);
      if (endpoint.state === 'paused') {
        await resumeEndpoint(store, endpoint.id, new Date());
        metrics.endpointResumed('operator');
        logger.warn(
          { event: EVENTS.endpointResumed, endpoint: endpoint.id, by: 'operator' },
          'endpoint resumed by an operator',
        );
      }
      return oneEndpoint(store, endpoint.id);
    },
  );
};
