// The routes collection: recipient patterns of a domain and where their mail is delivered
// (documents: RouteDoc).
import type { RouteDoc } from './documents.ts';
import { insertWithNewId, isId } from './ids.ts';
import type { Store } from './mongo.ts';

export type NewRoute = Omit<RouteDoc, '_id' | 'created_at'>;

export async function createRoute(store: Store, route: NewRoute): Promise<RouteDoc> {
  return insertWithNewId('r', async (id) => {
    const doc: RouteDoc = { _id: id, ...route, created_at: new Date() };
    if (!doc.webhook_secret) delete doc.webhook_secret;
    await store.routes.insertOne(doc);
    return doc;
  });
}

export function listRoutes(store: Store): Promise<RouteDoc[]> {
  return store.routes.find({}).sort({ _id: 1 }).toArray();
}

/** The route of `domain` with one of these (normalised) patterns, if there is one. */
export async function findRouteByPattern(
  store: Store,
  domain: string,
  recipientPatterns: readonly string[],
): Promise<RouteDoc | null> {
  for (const recipient_pattern of recipientPatterns) {
    // one equality query each: FerretDB evaluates $in in memory
    const found = await store.routes.findOne({ domain, recipient_pattern });
    if (found) return found;
  }
  return null;
}

export async function deleteRoute(store: Store, id: string): Promise<boolean> {
  if (!isId('r', id)) return false;
  const result = await store.routes.deleteOne({ _id: id });
  return result.deletedCount === 1;
}
