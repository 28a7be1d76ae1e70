// History partitions: final message records and raw bytes live in one collection per UTC day of
// acceptance, and the listing's summaries of delivered records (listing.ts) in one per UTC hour,
// named from the message id (which carries its time), so that a lookup by id touches one
// collection, a listing walks the hours newest first, and retention drops whole collections
// instead of deleting documents one by one. The working set (`messages`) holds only what is in
// flight.
//
// Why these spans: FerretDB reads a whole collection for any query but an exact `{_id: X}`, so
// what a listing reads must stay small (an hour of summaries), while every query it serves costs
// more the more collections the database holds (over SQLite, `findOne({_id})` took 0.8 ms beside
// no other collection and 2.35 ms beside 3,600, the count that five kinds by the hour reach in 30
// days). Records and raw bytes are only ever read by id, so they go by the day; the dead letter
// queue's summaries are few, and a day of them is what its sparse listing wants: about 29
// collections a day instead of 120. The merged entry sets of a day's listing partitions go into
// one collection of that day, read only by id (listing.ts).
//
// Collections of earlier layouts (hourly record partitions, 0.1.0's raw collections) are not
// read: layout.ts finds them at startup and refuses the database (earlierLayoutCollection).
import type { Db } from 'mongodb';

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/**
 * What a partition holds: `history` delivered records, `dlq` dead-lettered records (apart, so that
 * listing and counting the dead letter queue reads only it), `delivered_list` and `dlq_list` the
 * listing's summaries of those records (listing.ts), `raw` the bytes of messages up to 4 MB,
 * `rawfs` a GridFS bucket for larger ones (its collections are `rawfs_<key>.files` and `.chunks`),
 * `merged_list` the merged entry sets of the day's listing partitions (read by id only); `retry` the
 * records of messages parked until a retry is due and `retry_list` their listing (parking.ts, with
 * the profile's `parkRetries`); `history_superseded`, `dlq_superseded` and `retry_superseded` the
 * ids of records of those kinds that a claim or a replay superseded and left in place (history.ts,
 * with the profile's `supersedeRecords`).
 */
export type PartitionKind =
  | 'history'
  | 'dlq'
  | 'delivered_list'
  | 'dlq_list'
  | 'merged_list'
  | 'raw'
  | 'rawfs'
  | 'retry'
  | 'retry_list'
  | 'history_superseded'
  | 'dlq_superseded'
  | 'retry_superseded';
export type RecordKind = Extract<PartitionKind, 'history' | 'dlq' | 'retry'>;

/** The kind of partition that names the superseded records of a record partition's kind. */
export function supersededKind(kind: RecordKind): Extract<PartitionKind, `${RecordKind}_superseded`> {
  return `${kind}_superseded`;
}
/** The span each kind is partitioned by now (see the header). */
const SPAN_MS: Readonly<Record<PartitionKind, number>> = Object.freeze({
  history: DAY_MS,
  dlq: DAY_MS,
  delivered_list: HOUR_MS,
  dlq_list: DAY_MS,
  merged_list: DAY_MS,
  raw: DAY_MS,
  rawfs: DAY_MS,
  retry: DAY_MS,
  retry_list: DAY_MS,
  history_superseded: DAY_MS,
  dlq_superseded: DAY_MS,
  retry_superseded: DAY_MS,
});

export interface Partition {
  kind: PartitionKind;
  /** `YYYYMMDD` (a UTC day) or `YYYYMMDDHH` (a UTC hour): sorts as time does within one length */
  key: string;
  /** the collection's name (for a GridFS bucket: the bucket's name) */
  name: string;
  /** its span, ms since the epoch: [start, end) (partitionStart, partitionEnd of the key) */
  start: number;
  end: number;
}

/** The last key made per span length, with its span: nearly every message lands in the current one. */
const lastKeys = new Map<number, { start: number; key: string }>();

/** The key of the day (`YYYYMMDD`) or hour (`YYYYMMDDHH`) that holds a moment, UTC. */
function keyAt(spanMs: number, ms: number): string {
  const start = ms - (((ms % spanMs) + spanMs) % spanMs);
  const last = lastKeys.get(spanMs);
  if (last?.start === start) return last.key;
  const key = new Date(ms)
    .toISOString()
    .slice(0, spanMs === DAY_MS ? 10 : 13)
    .replace(/[-T]/g, '');
  lastKeys.set(spanMs, { start, key });
  return key;
}

/** The time a message id carries (ids are `m-<13-digit ms><sequence><random>`). */
export function idMs(id: string): number {
  return Number(id.slice(2, 15));
}

/** The key of the partition of `kind` that holds the message `id` (or, with a number, that moment). */
export function partitionKeyOf(kind: keyof typeof SPAN_MS, idOrMs: string | number): string {
  return keyAt(SPAN_MS[kind], typeof idOrMs === 'number' ? idOrMs : idMs(idOrMs));
}

/** The collection of `kind` that holds the message `id`. */
export function partitionOf(kind: keyof typeof SPAN_MS, id: string): string {
  return partitionName(kind, partitionKeyOf(kind, id));
}

/** The collection of markers of the superseded records of `kind` (history.ts) beside the one that holds `id`. */
export function supersededPartitionOf(kind: RecordKind, id: string): string {
  return partitionOf(supersededKind(kind), id);
}

/** Where a partition's span begins, ms since the epoch. */
export function partitionStart(key: string): number {
  return Date.UTC(
    Number(key.slice(0, 4)),
    Number(key.slice(4, 6)) - 1,
    Number(key.slice(6, 8)),
    isHourKey(key) ? Number(key.slice(8, 10)) : 0,
  );
}

/** Where a partition's span ends (the start of the next one), ms since the epoch. */
export function partitionEnd(key: string): number {
  return partitionStart(key) + (isHourKey(key) ? HOUR_MS : DAY_MS);
}

/** Whether a key names an hour (`YYYYMMDDHH`) rather than a day. */
export function isHourKey(key: string): boolean {
  return key.length === 10;
}

/** Where the UTC day that holds a partition's span ends: retention goes by it (housekeeping.ts). */
export function dayEnd(key: string): number {
  return partitionEnd(key.slice(0, 8));
}

export function partitionName(kind: PartitionKind, key: string): string {
  return `${kind}_${key}`;
}

const NAME =
  /^(history|dlq|delivered_list|dlq_list|merged_list|raw|rawfs|retry|retry_list|history_superseded|dlq_superseded|retry_superseded)_(\d{8}|\d{10})(\.files|\.chunks)?$/;

/** The partition a collection belongs to; undefined for any other collection. */
export function parsePartitionName(collection: string): Partition | undefined {
  const match = NAME.exec(collection);
  if (!match) return undefined;
  const kind = match[1] as PartitionKind;
  if ((kind === 'rawfs') !== (match[3] !== undefined)) return undefined;
  // each kind has one span: a key of the other length is an earlier layout's collection
  if ((SPAN_MS[kind] === HOUR_MS) !== isHourKey(match[2]!)) return undefined;
  return partitionAt(kind, match[2]!);
}

/**
 * Collections that only earlier layouts wrote: the hourly record, raw and listing partitions
 * (before 2026-11-23) and 0.1.0's raw bytes. This build reads none of them (layout.ts).
 */
const EARLIER_LAYOUT =
  /^((history|dlq|dlq_list|raw)_\d{10}|rawfs_\d{10}\.(files|chunks)|history_list_\d{10}|raw\.(documents|files|chunks))$/;

export function earlierLayoutCollection(collection: string): boolean {
  return EARLIER_LAYOUT.test(collection);
}

/** The partition of `kind` for the span `key`, whether or not its collection exists. */
export function partitionAt(kind: PartitionKind, key: string): Partition {
  return { kind, key, name: partitionName(kind, key), start: partitionStart(key), end: partitionEnd(key) };
}

/** How often the catalog is read again in the background. */
const CATALOG_REFRESH_MS = 5000;

/**
 * The partitions that exist, from the database's collection list (45 ms for 2,000 collections on
 * FerretDB over SQLite), read again every few seconds in the background, never on a request's
 * path once the first read is done. A partition this process writes to is known at once; one
 * that another process created is seen at the next refresh. Listings also always look at the
 * current and the previous span of each kind they read, so a message archived a moment ago
 * elsewhere is never missing.
 */
export class PartitionCatalog {
  private readonly db: Db;
  private known = new Map<string, Partition>();
  /** `known` newest first, made again only when it changes: a listing asks for it every time */
  private sorted: readonly Partition[] | undefined;
  private first: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** when this process noted each partition lately: kept though a read of the list misses it */
  private readonly noted = new Map<string, number>();

  constructor(db: Db) {
    this.db = db;
  }

  /** Every partition, newest first (by the end of its span); `fresh` reads the collection list now. */
  async list(options: { fresh?: boolean } = {}): Promise<readonly Partition[]> {
    await (options.fresh ? this.fetch() : this.loaded());
    this.sorted ??= [...this.known.values()].sort((a, b) => b.end - a.end);
    return this.sorted;
  }

  /** Whether a partition exists, as far as this catalog knows. */
  async has(name: string): Promise<boolean> {
    await this.loaded();
    return this.known.has(name);
  }

  /** Records that this process created (or wrote to) a partition; true when it was new here. */
  note(name: string): boolean {
    if (this.known.has(name)) return false;
    const partition = parsePartitionName(name);
    if (partition) {
      this.known.set(name, partition);
      this.sorted = undefined;
      this.noted.set(name, Date.now());
    }
    return true;
  }

  forget(name: string): void {
    this.known.delete(name);
    this.noted.delete(name);
    this.sorted = undefined;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private loaded(): Promise<void> {
    this.first ??= this.fetch().then(
      () => {
        this.timer = setInterval(() => void this.fetch().catch(() => {}), CATALOG_REFRESH_MS);
        this.timer.unref();
      },
      (err: unknown) => {
        this.first = undefined; // the database was away: the next caller asks again
        throw err;
      },
    );
    return this.first;
  }

  private async fetch(): Promise<void> {
    const collections = await this.db.listCollections({}, { nameOnly: true }).toArray();
    const found = new Map<string, Partition>();
    for (const { name } of collections) {
      const partition = parsePartitionName(name);
      if (partition) found.set(partition.name, partition);
    }
    // a partition this process noted lately may be missing from a list read before its first
    // insert created it, or while it did: it stays known (the gauges once counted a new dlq
    // partition's record as 0 for a refresh)
    const recently = Date.now() - 2 * CATALOG_REFRESH_MS;
    for (const [name, at] of this.noted) {
      if (at < recently) this.noted.delete(name);
      else if (!found.has(name)) found.set(name, this.known.get(name) ?? parsePartitionName(name)!);
    }
    this.known = found;
    this.sorted = undefined;
  }
}
