// Background upkeep of the history, run by the primary alone, in bounded steps with pauses between
// them so that it never competes with the hot path: retention drops whole partitions once their
// UTC day is older than the settings (records and their listings: RECORD_RETENTION, raw bytes:
// RAW_RETENTION); the partitions the hot path will write next are made ahead of it; and leases
// past their keep time are deleted (leases.ts).
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { readIntakes } from './intake.ts';
import { deleteExpiredLeases, LEASE_KEEP_MS } from './leases.ts';
import type { Store } from './mongo.ts';
import {
  dayEnd,
  idMs,
  type Partition,
  type PartitionKind,
  partitionAt,
  partitionKeyOf,
  partitionName,
} from './partitions.ts';

export interface HousekeepingOptions {
  store: Store;
  logger: Logger;
  /** final records older than this are removed, ms */
  recordRetentionMs: number;
  /** raw bytes older than this are removed (the record stays), ms */
  rawRetentionMs: number;
  /** how often a run starts; default 10 minutes */
  everyMs?: number;
  /** the clock (tests move it) */
  now?: () => number;
}

export interface HousekeepingReport {
  dropped: string[];
  /** raw partitions past retention kept because a message in flight still needs them */
  kept: string[];
  /** leases deleted, past LEASE_KEEP_MS since they expired */
  expiredLeases: number;
}

/** The pause between two drops. */
const STEP_PAUSE_MS = 200;

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
/** The partitions made ahead of the hot path (createAhead), by how far ahead of now. */
const AHEAD = Object.freeze([
  { kind: 'history', spans: [0, DAY_MS] },
  { kind: 'dlq', spans: [0, DAY_MS] },
  { kind: 'raw', spans: [0, DAY_MS] },
  { kind: 'dlq_list', spans: [0, DAY_MS] },
  { kind: 'merged_list', spans: [0, DAY_MS] },
  { kind: 'delivered_list', spans: [0, HOUR_MS, 2 * HOUR_MS] },
] as const);

const SUPERSEDED_KINDS = Object.freeze(['history_superseded', 'dlq_superseded', 'retry_superseded'] as const);

const pause = () => new Promise((resolve) => setTimeout(resolve, STEP_PAUSE_MS).unref());

export class Housekeeping {
  private readonly options: HousekeepingOptions;
  private readonly now: () => number;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<HousekeepingReport> | undefined;

  constructor(options: HousekeepingOptions) {
    this.options = options;
    this.now = options.now ?? Date.now;
  }

  /** Runs soon after start, then every `everyMs`; failures are logged and tried at the next run. */
  start(): void {
    const run = () =>
      void this.createAhead()
        .then(() => this.runOnce())
        .catch((err: unknown) =>
          this.options.logger.warn(
            { err, event: EVENTS.housekeepingFailed },
            'housekeeping failed; trying later',
          ),
        );
    setTimeout(run, 5000).unref();
    this.timer = setInterval(run, this.options.everyMs ?? 10 * 60_000);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** One whole pass (one at a time). */
  runOnce(): Promise<HousekeepingReport> {
    this.running ??= this.pass().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async pass(): Promise<HousekeepingReport> {
    const { store, recordRetentionMs, rawRetentionMs } = this.options;
    const now = this.now();
    // here, not in each worker every minute: on FerretDB its filter reads the whole of `leases`
    const expiredLeases = await deleteExpiredLeases(store, new Date(now - LEASE_KEEP_MS));
    const report: HousekeepingReport = { dropped: [], kept: [], expiredLeases };
    let inFlight: number[] | undefined;
    // decided once per day, before any of the day's partitions is dropped (its markers among them)
    const parkedOn = new Map<string, Promise<boolean>>();
    const partitions = [...(await store.partitions.list({ fresh: true }))].reverse();
    for (const partition of partitions) {
      // by the day, for the hourly partitions too: a day's listing goes with the day's records
      const isRaw = partition.kind === 'raw' || partition.kind === 'rawfs';
      if (dayEnd(partition.key) > now - (isRaw ? rawRetentionMs : recordRetentionMs)) continue;
      // a parked message is in flight, not history: its record and entry stay until it is claimed
      if (PARKED_KINDS.has(partition.kind)) {
        const parked = partitions.find((one) => one.kind === 'retry' && one.key === partition.key);
        if (!parkedOn.has(partition.key))
          parkedOn.set(partition.key, parked ? holdsParked(store, parked) : Promise.resolve(false));
        if (await parkedOn.get(partition.key)) {
          report.kept.push(partition.name);
          continue;
        }
      }
      if (isRaw) {
        // a message still in flight (a retry pending for days, a replay) keeps its bytes
        inFlight ??= await this.inFlightTimes();
        if (inFlight.some((ms) => ms >= partition.start && ms < partition.end)) {
          report.kept.push(partition.name);
          continue;
        }
      }
      await this.drop(partition);
      report.dropped.push(partition.name);
      await pause();
    }
    if (report.dropped.length)
      this.options.logger.info({ event: EVENTS.housekeepingDone, ...report }, 'history housekeeping');
    return report;
  }

  /**
   * Creates the partitions the hot path will write next (this day's and the next, this hour's and
   * the next two) before it gets there, so that no final record or raw insert creates a collection:
   * on MongoDB that is a replicated catalog change. A GridFS bucket (messages over 4 MB) is still
   * made by its first upload.
   */
  async createAhead(): Promise<string[]> {
    const { store } = this.options;
    const now = this.now();
    const names = AHEAD.flatMap(({ kind, spans }) =>
      spans.map((ahead) => partitionAt(kind, partitionKeyOf(kind, now + ahead)).name),
    );
    const days = (kind: PartitionKind) =>
      [0, DAY_MS].map((ahead) => partitionAt(kind, partitionKeyOf(kind, now + ahead)).name);
    const wanted = [
      ...names,
      ...(store.profile.parkRetries ? days('retry') : []),
      ...(store.profile.supersedeRecords
        ? SUPERSEDED_KINDS.filter((kind) => store.profile.parkRetries || kind !== 'retry_superseded').flatMap(
            days,
          )
        : []),
    ];
    const created: string[] = [];
    for (const name of wanted) {
      if (await store.partitions.has(name)) continue;
      await store.db.createCollection(name).catch(() => undefined); // made meanwhile: as good
      store.partitions.note(name);
      created.push(name);
    }
    return created;
  }

  /** When the messages in flight were accepted (parked ones: of the days past raw retention). */
  private async inFlightTimes(): Promise<number[]> {
    const { store, rawRetentionMs } = this.options;
    const now = this.now();
    const [live, intakes, parked] = await Promise.all([
      store.messages.find({}, { projection: { _id: 1 } }).toArray(),
      readIntakes(store, { _id: 1 }),
      this.parkedDays(now - rawRetentionMs),
    ]);
    return [...[...live, ...intakes].map((doc) => idMs(doc._id)), ...parked];
  }

  /**
   * The start of each day that ended by `endedBy` and has messages parked for a retry (parking.ts):
   * they are in flight, and their bytes are read again when they come due. A day whose retry
   * partition holds no record (or only superseded ones) has none.
   */
  private async parkedDays(endedBy: number): Promise<number[]> {
    const { store } = this.options;
    const days = (await store.partitions.list()).filter(
      (partition) => partition.kind === 'retry' && dayEnd(partition.key) <= endedBy,
    );
    const held = await Promise.all(days.map((partition) => holdsParked(store, partition)));
    return days.filter((_, i) => held[i]).map((partition) => partition.start);
  }

  private async drop(partition: Partition): Promise<void> {
    const { db } = this.options.store;
    const names =
      partition.kind === 'rawfs' ? [`${partition.name}.files`, `${partition.name}.chunks`] : [partition.name];
    for (const name of names) await db.dropCollection(name).catch(() => false);
    this.options.store.partitions.forget(partition.name);
  }
}

/** A day's parked records, their listing and their markers stay while one of its records is parked. */
const PARKED_KINDS: ReadonlySet<string> = new Set(['retry', 'retry_list', 'retry_superseded']);

/**
 * Whether a retry partition holds a record that is not superseded (history.ts). Without markers:
 * one read, whatever it holds (FerretDB pushes the limit of an empty filter). With them, every id
 * of the day's records and markers, once, for a day past retention: counts from statistics are
 * estimates over PostgreSQL, and a record dropped by mistake is a message lost.
 */
async function holdsParked(store: Store, parked: Partition): Promise<boolean> {
  const records = store.db.collection<{ _id: string }>(parked.name);
  if (!store.profile.supersedeRecords)
    return (await records.findOne({}, { projection: { _id: 1 } })) !== null;
  const markers = store.db.collection<{ _id: string }>(partitionName('retry_superseded', parked.key));
  const [ids, superseded] = await Promise.all([
    records.find({}, { projection: { _id: 1 } }).toArray(),
    markers.find({}, { projection: { _id: 1 } }).toArray(),
  ]);
  const gone = new Set(superseded.map((marker) => marker._id));
  return ids.some((record) => !gone.has(record._id));
}
