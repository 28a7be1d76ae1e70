// Background upkeep of the history, run by the primary alone, in bounded steps with pauses between
// them so that it never competes with the hot path: retention drops whole partitions once their
// UTC day is older than the settings (records and their listings: RECORD_RETENTION, raw bytes:
// RAW_RETENTION), records of the earliest layout (final messages kept in the working set) move to
// their partitions, and record partitions from before listing partitions existed get theirs.
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { insertRecords } from './history.ts';
import { readIntakes } from './intake.ts';
import { appendEntries, entryOf, unlistedPartitions } from './listing.ts';
import type { MessageDoc } from './messages.ts';
import type { Store } from './mongo.ts';
import { dayEnd, idMs, type Partition, partitionAt, partitionKeyOf } from './partitions.ts';
import { type ArchivedRecord, unpackRecord } from './records.ts';

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
  migrated: number;
  /** record partitions given the listing partition they lacked */
  listed: number;
}

/** Records of the earlier layout moved per step. */
const MIGRATION_BATCH = 500;
/** The pause between two steps (a drop, a migration batch). */
const STEP_PAUSE_MS = 200;
/** What the earlier layout kept all raw bytes in. */
const LEGACY_RAW = Object.freeze(['raw.documents', 'raw.files', 'raw.chunks']);
/** The newest acceptance time among migrated records whose bytes are in LEGACY_RAW. */
const LEGACY_MARK = 'legacy_raw';

interface MetaDoc {
  _id: string;
  newest_received_at: Date;
}

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
    const report: HousekeepingReport = { dropped: [], kept: [], migrated: await this.migrate(), listed: 0 };
    const { store, recordRetentionMs, rawRetentionMs } = this.options;
    const now = this.now();
    let inFlight: number[] | undefined;
    const partitions = [...(await store.partitions.list({ fresh: true }))].reverse();
    for (const partition of partitions) {
      // by the day, for the hourly partitions too: a day's listing goes with the day's records
      const isRaw = partition.kind === 'raw' || partition.kind === 'rawfs';
      if (dayEnd(partition.key) > now - (isRaw ? rawRetentionMs : recordRetentionMs)) continue;
      // a parked message is in flight, not history: its record and entry stay until it is claimed
      if (partition.kind === 'retry' || partition.kind === 'retry_list') {
        const parked = partitions.find((one) => one.kind === 'retry' && one.key === partition.key);
        if (parked && (await store.db.collection(parked.name).estimatedDocumentCount()) > 0) {
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
    if (await this.dropLegacyRaw(now)) report.dropped.push(...LEGACY_RAW);
    report.listed = await this.listUnlisted();
    if (report.dropped.length || report.migrated || report.listed)
      this.options.logger.info({ event: EVENTS.housekeepingDone, ...report }, 'history housekeeping');
    return report;
  }

  /**
   * Gives each record partition written before listing partitions existed (hourly, of the earlier
   * layout) its listing partition of the same hour, one partition per step (until then a listing
   * reads its records instead).
   */
  private async listUnlisted(): Promise<number> {
    const { store } = this.options;
    let listed = 0;
    for (const { name, listing } of unlistedPartitions(await store.partitions.list())) {
      const records = await store.db.collection<ArchivedRecord>(name).find({}).toArray();
      await appendEntries(
        store,
        listing,
        records.map((record) => entryOf(unpackRecord(record))),
      );
      listed++;
      await pause();
    }
    return listed;
  }

  /** When the messages in flight were accepted. */
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
    const wanted = store.profile.parkRetries
      ? [
          ...names,
          ...[0, DAY_MS].map((ahead) => partitionAt('retry', partitionKeyOf('retry', now + ahead)).name),
        ]
      : names;
    const created: string[] = [];
    for (const name of wanted) {
      if (await store.partitions.has(name)) continue;
      await store.db.createCollection(name).catch(() => undefined); // made meanwhile: as good
      store.partitions.note(name);
      created.push(name);
    }
    return created;
  }

  private async inFlightTimes(): Promise<number[]> {
    const { store } = this.options;
    const [live, intakes, parked] = await Promise.all([
      store.messages.find({}, { projection: { _id: 1 } }).toArray(),
      readIntakes(store, { _id: 1 }),
      this.parkedDays(),
    ]);
    return [...[...live, ...intakes].map((doc) => idMs(doc._id)), ...parked];
  }

  /**
   * The start of each day that has messages parked for a retry (parking.ts): they are in flight,
   * and their bytes are read again when they come due. A day whose retry partition is empty has none.
   */
  private async parkedDays(): Promise<number[]> {
    const { store } = this.options;
    const days = (await store.partitions.list()).filter((partition) => partition.kind === 'retry');
    const counts = await Promise.all(
      days.map((partition) => store.db.collection(partition.name).estimatedDocumentCount()),
    );
    return days.filter((_, i) => counts[i]! > 0).map((partition) => partition.start);
  }

  private async drop(partition: Partition): Promise<void> {
    const { db } = this.options.store;
    const names =
      partition.kind === 'rawfs' ? [`${partition.name}.files`, `${partition.name}.chunks`] : [partition.name];
    for (const name of names) await db.dropCollection(name).catch(() => false);
    this.options.store.partitions.forget(partition.name);
  }

  /**
   * Moves the final records that the earlier layout kept in the working set to their partitions,
   * a batch per step; their raw bytes stay where they are (read through `raw_id`) until raw
   * retention has passed the newest of them. Cheap once done: the working set is small.
   */
  private async migrate(): Promise<number> {
    const { store } = this.options;
    let moved = 0;
    for (const state of ['delivered', 'dlq'] as const) {
      for (;;) {
        const batch = (await store.messages.find({ state }).limit(MIGRATION_BATCH).toArray()).filter(
          (doc) => doc.due_at === undefined,
        );
        if (batch.length === 0) break;
        await insertRecords(store, batch);
        await this.markLegacyRaw(batch);
        await store.messages.deleteMany({ _id: { $in: batch.map((doc) => doc._id) }, state });
        moved += batch.length;
        await pause();
      }
    }
    return moved;
  }

  private async markLegacyRaw(batch: MessageDoc[]): Promise<void> {
    const withLegacyRaw = batch.filter((doc) => doc.raw_id).map((doc) => doc.received_at.getTime());
    if (withLegacyRaw.length === 0) return;
    const meta = this.options.store.db.collection<MetaDoc>('meta');
    const current = await meta.findOne({ _id: LEGACY_MARK });
    const newest = Math.max(current?.newest_received_at.getTime() ?? 0, ...withLegacyRaw);
    await meta.replaceOne({ _id: LEGACY_MARK }, { newest_received_at: new Date(newest) }, { upsert: true });
  }

  /** The earlier layout's raw bytes go whole once retention has passed the newest of them. */
  private async dropLegacyRaw(now: number): Promise<boolean> {
    const { store, rawRetentionMs } = this.options;
    const meta = store.db.collection<MetaDoc>('meta');
    const mark = await meta.findOne({ _id: LEGACY_MARK });
    if (!mark || mark.newest_received_at.getTime() > now - rawRetentionMs) return false;
    if ((await store.messages.countDocuments({ raw_id: { $exists: true } }, { limit: 1 })) > 0) return false;
    for (const name of LEGACY_RAW) await store.db.dropCollection(name).catch(() => false);
    await meta.deleteOne({ _id: LEGACY_MARK });
    return true;
  }
}
