// Where a route's mail goes: its own webhook_url and secret (the first destination, as the
// specification defines a route), then any further destinations, each with an id of its own, so
// that one can be added or removed without touching the others' deliveries.
import type { RouteDestinationDoc, RouteDoc } from '../store/documents.ts';
import { previousSecretInUse } from './secret-rotation.ts';

/** At most this many destinations besides the route's own webhook_url. */
export const MAX_EXTRA_DESTINATIONS = 9;

export interface Destination {
  /** absent for the route's own webhook_url */
  id?: string;
  url: string;
  secret?: string;
  /** a rotated secret still in its overlap (the route's own destination only) */
  previousSecret?: string;
}

type Routed = Pick<
  RouteDoc,
  'webhook_url' | 'webhook_secret' | 'previous_webhook_secret' | 'previous_secret_until' | 'destinations'
>;

function extra(destination: RouteDestinationDoc): Destination {
  return {
    id: destination.id,
    url: destination.webhook_url,
    ...(destination.webhook_secret ? { secret: destination.webhook_secret } : {}),
  };
}

/** Every destination of a route, its own first. */
export function destinationsOf(route: Routed, now: Date): Destination[] {
  const previousSecret = previousSecretInUse(route, now);
  const own: Destination = {
    url: route.webhook_url,
    ...(route.webhook_secret ? { secret: route.webhook_secret } : {}),
    ...(previousSecret ? { previousSecret } : {}),
  };
  return [own, ...(route.destinations ?? []).map(extra)];
}

/** One destination by id (undefined: the route's own); undefined when it was removed. */
export function destinationOf(route: Routed, id: string | undefined, now: Date): Destination | undefined {
  return destinationsOf(route, now).find((destination) => destination.id === id);
}
