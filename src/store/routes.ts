// The routes collection: recipient patterns of a domain and where their mail is delivered
// (documents: RouteDoc).
import type { RouteDestinationDoc, RouteDoc } from './documents.ts';
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

/** The route of `domain` with one of these (normalised) patterns, if there is one other than `exceptId`. */
export async function findRouteByPattern(
  store: Store,
  domain: string,
  recipientPatterns: readonly string[],
  exceptId?: string,
): Promise<RouteDoc | null> {
  for (const recipient_pattern of recipientPatterns) {
    // one equality query each: FerretDB evaluates $in in memory
    const found = await store.routes.findOne({
      domain,
      recipient_pattern,
      ...(exceptId !== undefined ? { _id: { $ne: exceptId } } : {}),
    });
    if (found) return found;
  }
  return null;
}

export async function findRoute(store: Store, id: string): Promise<RouteDoc | null> {
  if (!isId('r', id)) return null;
  return store.routes.findOne({ _id: id });
}

/**
 * Changes a route in one write: every field of `set` is replaced, every field of `unset` removed.
 * Its id and created_at (and so its precedence among routes of its kind) stay. Resolves the route
 * as written, or null when there is no such route.
 */
export async function updateRoute(
  store: Store,
  id: string,
  set: Partial<NewRoute>,
  unset: ReadonlyArray<keyof NewRoute>,
): Promise<RouteDoc | null> {
  if (!isId('r', id)) return null;
  const update: { $set?: Partial<NewRoute>; $unset?: Record<string, ''> } = {};
  if (Object.keys(set).length > 0) update.$set = set;
  if (unset.length > 0) update.$unset = Object.fromEntries(unset.map((field) => [field, '']));
  if (!update.$set && !update.$unset) return findRoute(store, id);
  return store.routes.findOneAndUpdate({ _id: id }, update, { returnDocument: 'after' });
}

/** Adds a destination to a route in one write; resolves the route as written, or null without it. */
export async function addDestination(
  store: Store,
  routeId: string,
  destination: RouteDestinationDoc,
): Promise<RouteDoc | null> {
  if (!isId('r', routeId)) return null;
  return store.routes.findOneAndUpdate(
    { _id: routeId },
    { $push: { destinations: destination } },
    { returnDocument: 'after' },
  );
}

/**
 * Removes one destination of a route in one write; false when the route or the destination is not
 * there. The list is written whole, on condition that it is still the list read (FerretDB 1.24's
 * $pull does not take a condition on an element's field); a concurrent change is read again.
 */
export async function removeDestination(
  store: Store,
  routeId: string,
  destinationId: string,
): Promise<boolean> {
  if (!isId('r', routeId)) return false;
  for (let attempt = 0; attempt < 5; attempt++) {
    const route = await store.routes.findOne({ _id: routeId });
    const destinations = route?.destinations ?? [];
    if (!destinations.some((d) => d.id === destinationId)) return false;
    const result = await store.routes.updateOne(
      { _id: routeId, destinations },
      { $set: { destinations: destinations.filter((d) => d.id !== destinationId) } },
    );
    if (result.modifiedCount === 1) return true;
  }
  throw new Error(`route ${routeId}: its destinations kept changing while one was removed`);
}

export async function deleteRoute(store: Store, id: string): Promise<boolean> {
  if (!isId('r', id)) return false;
  const result = await store.routes.deleteOne({ _id: id });
  return result.deletedCount === 1;
}
