// The domains and routes as one process sees them: loaded from MongoDB, compiled once, kept for a
// short time. RCPT checks and routing read it, so a message costs no route query of its own. A
// miss (unknown domain, no matching route) reloads first (at most every MISS_RELOAD_MS), so a
// domain or route created a moment ago is seen at once.
import type { Store } from '../store/mongo.ts';
import type { RouteDoc } from '../store/routes.ts';
import { compileRouteTable, type RouteMatch, type RouteRule, type RouteTable } from './match.ts';

export type DirectoryRoute = RouteDoc & RouteRule;

interface Snapshot {
  loadedAt: number;
  domains: ReadonlySet<string>;
  routesById: ReadonlyMap<string, DirectoryRoute>;
  table: RouteTable<DirectoryRoute>;
}

export interface DirectoryOptions {
  /** how long a snapshot is used before it is reloaded, ms; default 2000 */
  ttlMs?: number;
}

const MISS_RELOAD_MS = 100;

export class RouteDirectory {
  private readonly store: Store;
  private readonly ttlMs: number;
  private snapshot: Snapshot | undefined;
  private loading: Promise<Snapshot> | undefined;

  constructor(store: Store, options: DirectoryOptions = {}) {
    this.store = store;
    this.ttlMs = options.ttlMs ?? 2000;
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

  /** The route as it is now (it may have been deleted since the message was routed). */
  async route(id: string): Promise<DirectoryRoute | undefined> {
    return (await this.current()).routesById.get(id);
  }

  private mayReload(snapshot: Snapshot): boolean {
    return Date.now() - snapshot.loadedAt >= MISS_RELOAD_MS;
  }

  private async current(): Promise<Snapshot> {
    if (this.snapshot && Date.now() - this.snapshot.loadedAt < this.ttlMs) return this.snapshot;
    return this.reload();
  }

  private reload(): Promise<Snapshot> {
    this.loading ??= this.load().finally(() => {
      this.loading = undefined;
    });
    return this.loading;
  }

  private async load(): Promise<Snapshot> {
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
      domains: new Set(domains.map((d) => d.name)),
      routesById: new Map(rules.map((rule) => [rule.id, rule])),
      table: compileRouteTable(rules),
    };
    this.snapshot = snapshot;
    return snapshot;
  }
}
