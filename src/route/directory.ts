// The domains and routes as one process sees them: loaded from MongoDB, compiled once, kept until
// they change. RCPT checks and routing read it, so a message costs no route query of its own.
//
// A change is never missed: `invalidate()` (called by this instance's API, through the primary, on
// every worker before the API answers) makes the next reader load anew, and a poll of the change
// counter (src/store/routing-version.ts, every VERSION_POLL_MS) does the same for changes made by
// other instances on the same database. A snapshot also ages out after `ttlMs`, and a miss
// (unknown domain, no matching route) reloads first (at most every MISS_RELOAD_MS).

import type { RouteDoc } from '../store/documents.ts';
import type { Store } from '../store/mongo.ts';
import { readRoutingVersion } from '../store/routing-version.ts';
import { type CompiledFilters, compileFilters, type FilterName, judge, type MatchFacts } from './filters.ts';
import { compileRouteTable, type RouteMatch, type RouteRule, type RouteTable } from './match.ts';

export type DirectoryRoute = RouteDoc & RouteRule;

/** The route a recipient goes to, with what its filters made of the message so far. */
export interface DirectoryMatch extends RouteMatch<DirectoryRoute> {
  /** the route's filters need what is not known yet (the parsed message): decided at routing */
  undecided?: FilterName;
}

/** A route of higher precedence passed over, and the filter of it that failed. */
export interface PassedOver {
  route: DirectoryRoute;
  filter: FilterName;
}

interface Snapshot {
  loadedAt: number;
  /** the invalidation generation it was loaded in: an older one is never used */
  generation: number;
  /** the change counter as it was before the snapshot was read */
  version: number;
  domains: ReadonlySet<string>;
  routesById: ReadonlyMap<string, DirectoryRoute>;
  table: RouteTable<DirectoryRoute>;
  /** some route refuses DMARC failures (`dmarc_reject`) */
  dmarcReject: boolean;
  /** the compiled filters of the routes that have any */
  filters: ReadonlyMap<string, CompiledFilters>;
  /** the header names some filter reads */
  headerNames: readonly string[];
}

export interface DirectoryOptions {
  /** how long a snapshot is used before it is reloaded, ms; default 2000 */
  ttlMs?: number;
}

const MISS_RELOAD_MS = 100;
/** How often the change counter is read, ms: other instances' changes are seen within this plus one load. */
export const VERSION_POLL_MS = 500;

export class RouteDirectory {
  private readonly store: Store;
  private readonly ttlMs: number;
  private generation = 0;
  private snapshot: Snapshot | undefined;
  private loading: { generation: number; snapshot: Promise<Snapshot> } | undefined;
  private poll: NodeJS.Timeout | undefined;

  constructor(store: Store, options: DirectoryOptions = {}) {
    this.store = store;
    this.ttlMs = options.ttlMs ?? 2000;
  }

  /** The routes changed: whoever reads next gets them as they are now. */
  invalidate(): void {
    this.generation++;
  }

  /** Starts reading the change counter every VERSION_POLL_MS (changes made by other instances). */
  watch(): void {
    this.poll ??= setInterval(() => {
      readRoutingVersion(this.store).then(
        (version) => {
          if (this.snapshot && version > this.snapshot.version) this.invalidate();
        },
        () => {}, // the database is away: nothing can change meanwhile
      );
    }, VERSION_POLL_MS).unref();
  }

  stop(): void {
    clearInterval(this.poll);
  }

  /** True when mail for this (lowercase) domain is accepted. */
  async servesDomain(domain: string): Promise<boolean> {
    let snapshot = await this.current();
    if (!snapshot.domains.has(domain) && this.mayReload(snapshot)) snapshot = await this.reload();
    return snapshot.domains.has(domain);
  }

  /**
   * The route for one recipient address: the first by the precedence of src/route/match.ts whose
   * filters the message passes (src/route/filters.ts), as far as `facts` tell.
   */
  async match(address: string, facts: MatchFacts = {}): Promise<DirectoryMatch | undefined> {
    return (await this.explain(address, facts)).found;
  }

  /** As match, with the routes of higher precedence whose filters passed the message over. */
  async explain(
    address: string,
    facts: MatchFacts = {},
  ): Promise<{ found: DirectoryMatch | undefined; passedOver: PassedOver[] }> {
    let snapshot = await this.current();
    let chosen = choose(snapshot, address, facts);
    if (!chosen.found && this.mayReload(snapshot)) {
      snapshot = await this.reload();
      chosen = choose(snapshot, address, facts);
    }
    return chosen;
  }

  /** The header names some route's filter reads (what routing needs of the parsed message). */
  async headerNames(): Promise<readonly string[]> {
    return (await this.current()).headerNames;
  }

  /**
   * False when no route refuses DMARC failures: the SMTP path then need not look up each
   * recipient's route again to know that no check is due before the 250.
   */
  async anyRefusesDmarcFailures(): Promise<boolean> {
    return (await this.current()).dmarcReject;
  }

  /** The route as it is now (it may have been deleted since the message was routed). */
  async route(id: string): Promise<DirectoryRoute | undefined> {
    return (await this.current()).routesById.get(id);
  }

  private mayReload(snapshot: Snapshot): boolean {
    return Date.now() - snapshot.loadedAt >= MISS_RELOAD_MS;
  }

  private async current(): Promise<Snapshot> {
    const snapshot = this.snapshot;
    if (snapshot && snapshot.generation === this.generation && Date.now() - snapshot.loadedAt < this.ttlMs)
      return snapshot;
    return this.reload();
  }

  /** A load started before the last invalidation is not shared: it may predate the change. */
  private reload(): Promise<Snapshot> {
    if (this.loading?.generation !== this.generation) {
      const loading = { generation: this.generation, snapshot: this.load(this.generation) };
      this.loading = loading;
      void loading.snapshot
        .finally(() => {
          if (this.loading === loading) this.loading = undefined;
        })
        .catch(() => {});
    }
    return this.loading!.snapshot;
  }

  private async load(generation: number): Promise<Snapshot> {
    const version = await readRoutingVersion(this.store);
    const [domains, routes] = await Promise.all([
      this.store.domains.find({}, { projection: { name: 1 } }).toArray(),
      this.store.routes.find({}).toArray(),
    ]);
    const rules: DirectoryRoute[] = routes.map((route) => ({
      ...route,
      id: route._id,
      pattern: route.recipient_pattern,
    }));
    const filters = new Map<string, CompiledFilters>();
    for (const rule of rules) {
      const compiled = compileFilters(rule.filters);
      if (compiled) filters.set(rule.id, compiled);
    }
    const snapshot: Snapshot = {
      loadedAt: Date.now(),
      generation,
      version,
      domains: new Set(domains.map((d) => d.name)),
      routesById: new Map(rules.map((rule) => [rule.id, rule])),
      table: compileRouteTable(rules),
      dmarcReject: rules.some((rule) => rule.dmarc_reject),
      filters,
      headerNames: [
        ...new Set(rules.flatMap((rule) => (rule.filters?.header ? [rule.filters.header.name] : []))),
      ],
    };
    if (!this.snapshot || this.snapshot.generation <= generation) this.snapshot = snapshot;
    return snapshot;
  }
}

/** The first route by precedence whose filters the facts pass (or cannot judge yet). */
function choose(
  snapshot: Snapshot,
  address: string,
  facts: MatchFacts,
): { found: DirectoryMatch | undefined; passedOver: PassedOver[] } {
  // without filters the first match is the route: no need to find every matching one
  if (snapshot.filters.size === 0) return { found: snapshot.table.match(address), passedOver: [] };
  const passedOver: PassedOver[] = [];
  for (const candidate of snapshot.table.candidates(address)) {
    const verdict = judge(snapshot.filters.get(candidate.route.id), facts);
    if ('undecided' in verdict) return { found: { ...candidate, undecided: verdict.undecided }, passedOver };
    if (verdict.pass) return { found: candidate, passedOver };
    passedOver.push({ route: candidate.route, filter: verdict.filter });
  }
  return { found: undefined, passedOver };
}
