// Which deliveries a message gets from its routes: one per destination of each matched route that
// delivers, carrying that route's recipients. A replay keeps what was delivered and starts the rest anew.
import type { DeliveryDoc, MessageDoc } from '../store/messages.ts';
import { destinationsOf } from './destinations.ts';
import type { DirectoryRoute, RouteDirectory } from './directory.ts';
import type { MatchFacts } from './filters.ts';

/** A delivery's id: stable across retries and replays, sent as webhook-id. */
export function deliveryId(messageId: string, routeId: string, destinationId?: string): string {
  return destinationId === undefined ? `${messageId}.${routeId}` : `${messageId}.${routeId}.${destinationId}`;
}

/** A delivery to create: everything but its state, which routing gives it (src/lifecycle/). */
export type PlannedDelivery = Omit<DeliveryDoc, 'state' | 'next_attempt_at'>;

/**
 * In route order: a delivery kept from an earlier round (delivered), one to create, or the
 * recipients a route takes without delivering (action `drop`, or `reject` when the route became
 * one after the message was accepted).
 */
export type DeliveryPlan = Array<
  | { kept: DeliveryDoc }
  | { planned: PlannedDelivery }
  | { dropped: { route_id: string; recipients: string[] } }
>;

/** The routes each recipient matches, grouped: one entry per route; undecided: some needs more facts. */
async function routesOf(
  directory: Pick<RouteDirectory, 'match'>,
  recipients: readonly string[],
  facts: MatchFacts,
): Promise<{
  routes: Array<{ route: DirectoryRoute; recipients: string[]; plusTag?: string }>;
  undecided: boolean;
}> {
  const byRoute = new Map<string, { route: DirectoryRoute; recipients: string[]; plusTag?: string }>();
  let undecided = false;
  for (const recipient of recipients) {
    const match = await directory.match(recipient, facts);
    if (!match) continue;
    if (match.undecided) undecided = true;
    const entry = byRoute.get(match.route.id);
    if (entry) entry.recipients.push(recipient);
    else byRoute.set(match.route.id, { route: match.route, recipients: [recipient], plusTag: match.plusTag });
  }
  return { routes: [...byRoute.values()], undecided };
}

/** The URL an operator's replay sends this route's deliveries to instead of their destinations. */
export function replayUrlFor(doc: Pick<MessageDoc, 'replay_to'>, routeId: string): string | undefined {
  const to = doc.replay_to;
  return to && (to.route_id === undefined || to.route_id === routeId) ? to.webhook_url : undefined;
}

/**
 * The deliveries by what `facts` tell of the message (its envelope sender at least). `undecided`:
 * a recipient's route has filters on what only the parsed message tells (a header, DMARC): plan
 * again with those facts before using the plan.
 */
export async function planDeliveries(
  directory: Pick<RouteDirectory, 'match'>,
  doc: Pick<MessageDoc, '_id' | 'envelope' | 'deliveries' | 'replay_to'>,
  facts: MatchFacts = { mailFrom: doc.envelope.mail_from },
): Promise<{ plan: DeliveryPlan; undecided: boolean }> {
  const delivered = new Map(doc.deliveries.filter((d) => d.state === 'delivered').map((d) => [d.id, d]));
  const now = new Date();
  const { routes, undecided } = await routesOf(directory, doc.envelope.rcpt_to, facts);
  const plan = routes.flatMap(({ route, recipients, plusTag }): DeliveryPlan => {
    if (route.action === 'drop' || route.action === 'reject')
      return [{ dropped: { route_id: route.id, recipients } }];
    // one delivery per destination, each with its own id, state and retries
    return destinationsOf(route, now).map((destination) => {
      const id = deliveryId(doc._id, route.id, destination.id);
      const kept = delivered.get(id);
      if (kept) return { kept };
      return {
        planned: {
          id,
          route_id: route.id,
          ...(destination.id !== undefined ? { destination_id: destination.id } : {}),
          webhook_url: replayUrlFor(doc, route.id) ?? destination.url,
          recipients,
          ...(plusTag !== undefined ? { plus_tag: plusTag } : {}),
          attempts: 0,
        },
      };
    });
  });
  return { plan, undecided };
}
