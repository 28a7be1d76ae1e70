// History partitions: final message records and raw bytes live in one collection per UTC hour of
// acceptance, named from the message id (which carries its time), so that a lookup by id touches
// one small collection, a listing walks the hours newest first, and retention drops whole
// collections instead of deleting documents one by one. The working set (`messages`) holds only
// what is in flight. An hour, not a day: FerretDB reads a whole collection for any query but an
// exact `{_id: X}`, so a partition must stay small enough to read in a few milliseconds.
import type { Db } from 'mongodb';

/** The span of one partition. */
export const PARTITION_MS = 3_600_000;

/**
 * What a partition holds: `history` delivered records, `dlq` dead-lettered records (apart, so that
 * listing the dead letter queue reads only it), `history_list` and `dlq_list` the listing's
 * summaries of those records (listing.ts), `raw` the bytes of messages up to 4 MB, `rawfs` a
 * GridFS bucket for larger ones (its collections are `rawfs_<key>.files` and `.chunks`).
 */
export type PartitionKind = 'history' | 'dlq' | 'history_list' | 'dlq_list' | 'raw' | 'rawfs';
export type RecordKind = Extract<PartitionKind, 'history' | 'dlq'>;

export interface Partition {
  kind: PartitionKind;
  /** `YYYYMMDDHH`, UTC: sorts as time does */
  key: string;
  /** the collection's name (for a GridFS bucket: the bucket's name) */
  name: string;
}

/** The partition key of a moment: its UTC hour, `YYYYMMDDHH`. */
export function partitionKey(ms: number): string {
  return new Date(ms).toISOString().slice(0, 13).replace(/[-T]/g, '');
}

/** Where the partition's hour begins, ms since the epoch. */
export function partitionStart(key: string): number {
  return Date.UTC(
    Number(key.slice(0, 4)),
    Number(key.slice(4, 6)) - 1,
    Number(key.slice(6, 8)),
    Number(key.slice(8, 10)),
  );
}

/** The time a message id carries (ids are `m-<13-digit ms><sequence><random>`). */
export function idMs(id: string): number {
  return Number(id.slice(2, 15));
}

export function partitionOfId(id: string): string {
  return partitionKey(idMs(id));
}

export function partitionName(kind: PartitionKind, key: string): string {
  return `${kind}_${key}`;
}

const NAME = /^(history|dlq|history_list|dlq_list|raw|rawfs)_(\d{10})(\.files|\.chunks)?$/;

/** The partition a collection belongs to; undefined for any other collection. */
export function parsePartitionName(collection: string): Partition | undefined {
  const match = NAME.exec(collection);
  if (!match) return undefined;
  const kind = match[1] as PartitionKind;
  if ((kind === 'rawfs') !== (match[3] !== undefined)) return undefined;
  return { kind, key: match[2]!, name: partitionName(kind, match[2]!) };
}

/** How often the catalog is read again in the background. */
const CATALOG_REFRESH_MS = 5000;

/**
 * The partitions that exist, from the database's collection list (45 ms for 2,000 collections on
 * FerretDB over SQLite), read again every few seconds in the background, never on a request's
 * path once the first read is done. A partition this process writes to is known at once; one
 * that another process created is seen at the next refresh. Listings also always look at the
 * current and the previous hour, so a message archived a moment ago elsewhere is never missing.
 */
export class PartitionCatalog {
  private readonly db: Db;
  private known = new Map<string, Partition>();
  private first: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(db: Db) {
    this.db = db;
  }

  /** Every partition, newest first; `fresh` reads the collection list now. */
  async list(options: { fresh?: boolean } = {}): Promise<Partition[]> {
    if (options.fresh) await this.fetch();
    else {
      this.first ??= this.fetch().then(
        () => {
          this.timer = setInterval(() => void this.fetch().catch(() => {}), CATALOG_REFRESH_MS);
          this.timer.unref();
        },
        (err: unknown) => {
          this.first = undefined; // the database was away: the next listing asks again
          throw err;
        },
      );
      await this.first;
    }
    return [...this.known.values()].sort((a, b) => (a.key < b.key ? 1 : a.key > b.key ? -1 : 0));
  }

  /** Records that this process created (or wrote to) a partition; true when it was new here. */
  note(kind: PartitionKind, key: string): boolean {
    const name = partitionName(kind, key);
    if (this.known.has(name)) return false;
    this.known.set(name, { kind, key, name });
    return true;
  }

  forget(name: string): void {
    this.known.delete(name);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private async fetch(): Promise<void> {
    const collections = await this.db.listCollections({}, { nameOnly: true }).toArray();
    const found = new Map<string, Partition>();
    for (const { name } of collections) {
      const partition = parsePartitionName(name);
      if (partition) found.set(partition.name, partition);
    }
    this.known = found;
  }
}
