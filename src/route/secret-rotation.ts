// A route's secret rotation: the secret a change replaced keeps signing deliveries, next to the new
// one, until its overlap ends, so receivers can move to the new secret without a failed delivery.
import type { RouteDoc } from '../store/documents.ts';

type Rotated = Pick<RouteDoc, 'previous_webhook_secret' | 'previous_secret_until'>;

/** When the replaced secret stops signing; undefined when it does not sign (any more). */
export function previousSecretUntil(route: Rotated, now: Date): Date | undefined {
  const until = route.previous_secret_until;
  return route.previous_webhook_secret && until && until > now ? until : undefined;
}

/** The replaced secret while it still signs, else undefined. */
export function previousSecretInUse(route: Rotated, now: Date): string | undefined {
  return previousSecretUntil(route, now) ? route.previous_webhook_secret : undefined;
}
