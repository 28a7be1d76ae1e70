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
import { compileRouteTable, type RouteMatch, type RouteRule, type RouteTable } from './match.ts';

export type DirectoryRoute = RouteDoc & RouteRule;

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

  /** The route for one recipient address, by the precedence of src/route/match.ts. */
  async match(address: string): Promise<RouteMatch<DirectoryRoute> | undefined> {
    let snapshot = await this.current();
    let found = snapshot.table.match(address);
    if (!found && this.mayReload(snapshot)) {
      snapshot = await this.reload();
      found = snapshot.table.match(address);
    }
    return found;
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
    const snapshot: Snapshot = {
      loadedAt: Date.now(),
      generation,
      version,
      domains: new Set(domains.map((d) => d.name)),
      routesById: new Map(rules.map((rule) => [rule.id, rule])),
      table: compileRouteTable(rules),
      dmarcReject: rules.some((rule) => rule.dmarc_reject),
    };
    if (!this.snapshot || this.snapshot.generation <= generation) this.snapshot = snapshot;
    return snapshot;
  }
}
