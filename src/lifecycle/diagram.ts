// ARCHITECTURE.md's lifecycle diagram, drawn from the tables (a unit test keeps the two identical;
// `node scripts/lifecycle-diagram.ts` prints it). One line per set of edges that share their
// events and target: `from | from --event | event--> to`.

import { FIRST_PLACES, PLACE_OWNERS, PLACE_TABLE, PLACES } from './places.ts';
import {
  DELIVERY_STATES,
  DELIVERY_TABLE,
  FOLLOWS_DELIVERIES,
  MESSAGE_STATES,
  MESSAGE_TABLE,
} from './tables.ts';

type Table = Readonly<Record<string, Readonly<Partial<Record<string, string>>>>>;

/** Edges of `table`; those of an event in `apart` on lines of their own, after the others. */
function lines(states: readonly string[], table: Table, apart: readonly string[] = []): string[] {
  const edges = (keep: (event: string) => boolean) =>
    states.flatMap((from) =>
      Object.entries(table[from] ?? {}).flatMap(([event, to]) =>
        to !== undefined && keep(event) ? [{ from, event, to }] : [],
      ),
    );
  return [
    ...grouped(edges((event) => !apart.includes(event))),
    ...grouped(edges((event) => apart.includes(event))),
  ];
}

/** Edges from one state to one target with their events joined; then sources joined where both agree. */
function grouped(edges: ReadonlyArray<{ from: string; event: string; to: string }>): string[] {
  const bySourceAndTarget = new Map<string, { from: string; to: string; events: string[] }>();
  for (const { from, event, to } of edges) {
    const key = `${from}>${to}`;
    const found = bySourceAndTarget.get(key);
    if (found) found.events.push(event);
    else bySourceAndTarget.set(key, { from, to, events: [event] });
  }
  const merged = new Map<string, { froms: string[]; label: string; to: string }>();
  for (const { from, to, events } of bySourceAndTarget.values()) {
    const label = events.join(' | ');
    const key = `${label}>${to}`;
    const found = merged.get(key);
    if (found) found.froms.push(from);
    else merged.set(key, { froms: [from], label, to });
  }
  return [...merged.values()].map(({ froms, label, to }) => `${froms.join(' | ')} --${label}--> ${to}`);
}

/** The diagram as ARCHITECTURE.md holds it between its lifecycle markers (a fenced block). */
export function lifecycleDiagram(): string {
  return [
    '```',
    'message',
    ...lines(MESSAGE_STATES, MESSAGE_TABLE, ['defect']),
    `${FOLLOWS_DELIVERIES.join(' | ')}: the state of its deliveries`,
    '',
    'delivery (one per matched route, created routed)',
    ...lines(DELIVERY_STATES, DELIVERY_TABLE),
    '```',
  ].join('\n');
}

/** The places diagram as ARCHITECTURE.md holds it between its places markers (a fenced block). */
export function placesDiagram(): string {
  return [
    '```',
    `where a message lives (accept, claim, restore: into ${FIRST_PLACES[0]}; ${FIRST_PLACES[1]} where the profile has no intakes)`,
    ...lines(PLACES, PLACE_TABLE),
    '',
    'who writes it there',
    ...PLACES.map((place) => `${place}: ${PLACE_OWNERS[place]}`),
    '```',
  ].join('\n');
}
