// Where a message waits from its 250 until it is final or needs a write: an intake of the process
// that accepted it, one collection per span of acceptance time (`intake_<process number>_<span
// start>`; a quarter of LEASE_TIME, at most 2 s; on FerretDB in a database of their own,
// Connection.intakeDb), written only by inserts and dropped whole once
// every message in it has departed. FerretDB 1.24 runs each removal of a document as a read and a
// write transaction of its own, each holding SQLite's one writer while the next sender's insert
// waited; dropping a collection costs the same whatever it holds
// (docs/decisions/0001-intake-collections.md, 0003-separate-intake-database.md).
//
// A process also keeps the parked messages it claims (parking.ts), and the records it restores for
// a replay (history.ts), in intakes of their own, of the kind `claims` (`claims_<process
// number>_<span start>`, a span of claim time, not of acceptance): the same insert-only
// collections, dropped whole, so that a drained or replayed message is never deleted from
// `messages` (FerretDB runs each such delete as a read and a transaction of its own). Its id does
// not name such an intake, so readers look in every live one.
//
// A message departs its intake when its final record is stored (history.ts), or at its first
// other write (a retry's release, a lease renewal, a failure): it then moves into `messages` at the
// next epoch, taking that lease as any claimant would (leases.ts), and every fenced write works
// there as before. Departures are noted in the intake, one marker document per batch, so that
// readers take the newer copy until the drop (they compare versions anyway). The registry
// (`intakes`, one small document per live intake) tells readers and claimants which intakes
// exist; an intake whose span ended more than half a lease ago is stale (its owner died or
// stalls), and any process's scheduler takes its due messages over (`claimFromIntake`).
import { Batcher } from './batcher.ts';
import { DURABLE } from './connection.ts';
import { storePointer } from './due-buckets.ts';
import { retryTransient } from './failures.ts';
import { findStoredRecord, isSuperseded, recordKind, storedKinds } from './history.ts';
import { isDuplicateKey, ownProcessNumber, processNumberOf } from './ids.ts';
import { insertAtEpoch, insertClaimed, takeLease } from './leases.ts';
import { SUMMARY_FIELDS } from './listing.ts';
import { type MessageDoc, type Ownership, retryDueOf } from './messages.ts';
import type { LocalIntake, Store } from './mongo.ts';
import { idMs } from './partitions.ts';
import { type IntakeRecord, packedFor, packIntake, unpackIntake } from './records.ts';

export const INTAKE_REGISTRY = 'intakes';

/** What this process keeps of each message in its intakes for listings: a summary and its version. */
const LISTED_FIELDS = [...SUMMARY_FIELDS, 'version'] as const;

/** Messages this process accepted, or parked messages it claimed (their ids name another intake). */
export type IntakeKind = 'intake' | 'claims';

/** A live intake: its collection, whose ids it holds, and the span of their acceptance (or claim) times (ms). */
export interface IntakeEntry {
  _id: string;
  number: string;
  owner: string;
  start: number;
  end: number;
  /** absent for accepted messages */
  kind?: 'claims';
}

const isClaims = (entry: IntakeEntry) => entry.kind === 'claims';

/** The key of an intake in Store.localIntakes: its owner's name, and its kind unless `intake`. */
export function localIntakeKey(owner: string, kind: IntakeKind | undefined): string {
  return kind === 'claims' ? `${owner}#claims` : owner;
}

/** Messages that have left an intake (final, or moved into `messages`); never a message id. */
interface DepartureMarker {
  _id: string;
  departed: string[];
}

/** An accepted message (packed) or a departure note. */
type IntakeDocument = IntakeRecord | DepartureMarker;

const isMarker = (doc: IntakeDocument): doc is DepartureMarker => 'departed' in doc;

/**
 * A quarter of the lease, so that a live owner has dropped a span long before it could look stale,
 * and at most 2 s: a listing reads the intakes whole, and an intake is dropped only after its span
 * has ended, so longer spans make the first pages after a burst slower
 * (docs/decisions/0003-separate-intake-database.md).
 */
export function intakeSpanMs(leaseMs: number): number {
  return Math.max(250, Math.min(2000, Math.floor(leaseMs / 4)));
}

const registry = (store: Store) => store.db.collection<IntakeEntry>(INTAKE_REGISTRY);

/** The live intakes, as registered. */
export function listIntakes(store: Store): Promise<IntakeEntry[]> {
  return registry(store).find({}).toArray();
}

/**
 * A read or removal in an intake: one dropped meanwhile holds nothing (FerretDB over PostgreSQL
 * can fail a query on a table dropped under it, rather than find nothing).
 */
export async function fromIntake<T>(store: Store, name: string, read: () => Promise<T>, none: T): Promise<T> {
  try {
    return await read();
  } catch (err) {
    if ((await registry(store).countDocuments({ _id: name })) === 0) return none;
    throw err;
  }
}

/**
 * An intake's messages that have not departed it (a missing intake has none). A projection names
 * fields to include; those packed in an intake document (records.ts) come unpacked.
 */
export async function readIntake(
  store: Store,
  name: string,
  projection?: Record<string, 1>,
): Promise<MessageDoc[]> {
  const fields = projection && { ...projection, departed: 1, ...packedFor(projection) };
  const docs = await fromIntake(
    store,
    name,
    () =>
      store.intakeDb
        .collection<IntakeDocument>(name)
        .find({}, fields ? { projection: fields } : {})
        .toArray(),
    [],
  );
  const departed = new Set(docs.flatMap((doc) => (isMarker(doc) ? doc.departed : [])));
  const messages: MessageDoc[] = [];
  for (const doc of docs) if (!isMarker(doc) && !departed.has(doc._id)) messages.push(unpackIntake(doc));
  return messages;
}

/** Every live intake's messages in flight (listings, counts, raw retention). */
export async function readIntakes(store: Store, projection?: Record<string, 1>): Promise<MessageDoc[]> {
  const intakes = await listIntakes(store);
  return (await Promise.all(intakes.map((entry) => readIntake(store, entry._id, projection)))).flat();
}

/**
 * A message's copies in the intakes its id names (the accepting process's, for its time) and in
 * every intake of claims (a few per process: a claimed message stays there for one attempt).
 */
export async function findInIntakes(store: Store, id: string): Promise<MessageDoc | null> {
  const at = idMs(id);
  const number = processNumberOf(id);
  const names = (await listIntakes(store))
    .filter((entry) => isClaims(entry) || (entry.number === number && entry.start <= at && at < entry.end))
    .map((entry) => entry._id);
  const found = await Promise.all(
    names.map((name) =>
      fromIntake(
        store,
        name,
        async () => {
          const doc = await store.intakeDb.collection<IntakeRecord | MessageDoc>(name).findOne({ _id: id });
          return doc && unpackIntake(doc);
        },
        null,
      ),
    ),
  );
  return newestCopy(found.filter((doc) => doc !== null));
}

/** Of several copies of one message, the one its latest write made. */
function newestCopy<T extends { version: number }>(copies: readonly T[]): T | null {
  return copies.reduce<T | null>(
    (newest, copy) => (!newest || copy.version > newest.version ? copy : newest),
    null,
  );
}

/**
 * Drops an intake, its registry entry first: every message in it has left, so a reader that no
 * longer finds the entry misses nothing, and one that read the entry before finds the collection
 * or nothing (`fromIntake`).
 */
export async function dropIntake(store: Store, name: string): Promise<void> {
  await registry(store).deleteOne({ _id: name });
  await store.intakeDb.dropCollection(name).catch(() => false);
}

/** Intakes whose span ended more than half a lease ago: their owner should have dropped them. */
export async function staleIntakes(store: Store, now: number, leaseMs: number): Promise<IntakeEntry[]> {
  return (await listIntakes(store)).filter((entry) => entry.end + leaseMs / 2 <= now);
}

/**
 * Moves a message out of its intake into `messages`, as `doc` (its state after the owner's write),
 * at the next epoch: its owner takes that lease as a claimant would, so that an owner that
 * stalled past its lease and a claimant cannot both have it. The moved document, or undefined
 * when another process holds the message.
 */
export async function moveFromIntake(
  store: Store,
  owner: Ownership,
  doc: MessageDoc,
  ownerName: string,
  leaseMs: number,
): Promise<MessageDoc | undefined> {
  const epoch = await takeLease(store, owner.id, owner.epoch, ownerName, new Date(Date.now() + leaseMs));
  if (epoch === undefined) return undefined;
  return insertAtEpoch(store, { ...doc, lease_epoch: epoch, version: owner.version + 1 });
}

/**
 * Whether a copy of the message newer than this one is stored: in `messages`, or a record of any
 * kind. Its owner stores the final record, moves the message into `messages`, or parks it
 * (parking.ts) before the intake notes its departure, and the departure is noted later, in a batch:
 * a stale intake's copy may be one that moved on. A record counts even if superseded, as it is taken
 * out only once the copy that took it back is in. A parked record whose owner died before storing
 * its pointer gets it here: nothing else would claim it.
 */
async function hasDeparted(store: Store, doc: MessageDoc): Promise<boolean> {
  const [moved, records] = await Promise.all([
    store.messages.findOne({ _id: doc._id }, { projection: { _id: 1 } }),
    Promise.all(storedKinds(store).map((kind) => findStoredRecord(store, kind, doc._id))),
  ]);
  if (moved) return true;
  const newest = newestCopy(records.filter((record) => record !== null));
  if (!newest || newest.version <= doc.version) return false;
  // the record is read already: only its marker says whether it still waits for a claim
  if (recordKind(newest) === 'retry' && !(await isSuperseded(store, 'retry', doc._id)))
    await storePointer(store, newest, retryDueOf(newest));
  return true;
}

/**
 * Takes over a message of a stale intake, as the scheduler takes over an expired lease: its lease
 * at the next epoch, then the message into `messages`. 'departed' when it has left the intake
 * after all (a newer copy is stored: hasDeparted); undefined when another process holds it.
 */
export async function claimFromIntake(
  store: Store,
  doc: MessageDoc,
  ownerName: string,
  leaseMs: number,
): Promise<MessageDoc | 'departed' | undefined> {
  // A message that has departed needs no lease. Asked first: after a few takeovers its next epochs
  // are all taken by expired leases (kept an hour), takeLease gives up, and an intake whose every
  // message is final would never be dropped.
  if (await hasDeparted(store, doc)) return 'departed';
  const expiresAt = new Date(Date.now() + leaseMs);
  const epoch = await takeLease(store, doc._id, doc.lease_epoch, ownerName, expiresAt);
  if (epoch === undefined) return undefined;
  // asked again under the lease: the owner may have stored the record or moved it meanwhile
  if (await hasDeparted(store, doc)) {
    await store.leases.deleteOne({ _id: `${doc._id}:${epoch}` }).catch(() => {});
    return 'departed';
  }
  const claimed = await insertClaimed(store, doc, epoch, ownerName, expiresAt);
  return claimed ?? 'departed';
}

/**
 * A parked message this process claimed (its lease won: parking.ts), as `claimed` (claimedCopy),
 * into its current intake of claims: the document as stored, or undefined when a copy of it is in
 * `messages` (a replay's, or one a crash while parking left: the unique `_id` there told this when
 * claims went into `messages`). `lookInMessages: false` where the claimant knows no copy can be
 * there (parking.ts). A message claimed twice within one span by this process (a short retry
 * delay) goes into `messages` the second time: an intake holds an id once.
 */
export async function claimIntoIntake(
  store: Store,
  claims: Intake,
  claimed: MessageDoc,
  { lookInMessages = true } = {},
): Promise<{ doc: MessageDoc; intake?: Intake } | undefined> {
  const id = claimed._id;
  if (lookInMessages && (await store.messages.findOne({ _id: id }, { projection: { _id: 1 } })))
    return undefined;
  if (!claims.canEnter(id)) {
    const inserted = await insertAtEpoch(store, claimed);
    return inserted && { doc: inserted };
  }
  try {
    const name = await claims.enter(id);
    await retryTransient(async () => {
      const outcome = await store.writes.intakeInserts.submit(name, packIntake(claimed));
      // an earlier try of this insert that went in: the id entered this span only now
      if (outcome && !isDuplicateKey(outcome)) throw outcome;
    });
  } catch (err) {
    claims.depart(id, false);
    throw err;
  }
  claims.stored(claimed);
  return { doc: claimed, intake: claims };
}

interface Span {
  start: number;
  end: number;
  /** the collection, once registered */
  name: Promise<string>;
  /** the same, once known */
  registered?: string;
  failed: boolean;
  /** messages entered and not yet departed */
  outstanding: Set<string>;
  /** every message that ever entered it (an intake of claims holds an id once) */
  entered?: Set<string>;
  /** the messages stored in it and not departed, summarised: what a listing of it finds */
  stored: Map<string, MessageDoc>;
  markers?: Batcher<string, undefined>;
}

/**
 * This process's intakes: where its accepted messages go, and when each span can be dropped. It
 * knows what each of its intakes holds, so this process's listings read them from memory: an
 * intake is read whole on FerretDB, raw bytes and all, and right after a burst the first pages
 * each took 70-140 ms to read the intakes of the burst's last seconds
 * (docs/decisions/0003-separate-intake-database.md).
 */
export class Intake implements LocalIntake {
  private readonly store: Store;
  readonly kind: IntakeKind;
  /** of an intake of claims: the span each claimed message entered, by id */
  private readonly claimedIn = new Map<string, number>();
  /** this process's name in leases (the owner of what it accepts) */
  readonly ownerName: string;
  readonly leaseMs: number;
  private readonly spanMs: number;
  private readonly spans = new Map<number, Span>();
  /** spans being dropped: a late message of one (its DATA began long ago) waits and registers it anew */
  private readonly dropping = new Map<number, Promise<void>>();
  private markerSequence = 0;
  /** intakes this process is dropping: they list nothing */
  private readonly emptied = new Set<string>();

  constructor(store: Store, ownerName: string, leaseMs: number, kind: IntakeKind = 'intake') {
    this.store = store;
    this.ownerName = ownerName;
    this.leaseMs = leaseMs;
    this.kind = kind;
    this.spanMs = intakeSpanMs(leaseMs);
    store.localIntakes.set(localIntakeKey(ownerName, kind), this);
  }

  /** The message is stored in its intake (its insert acknowledged): listings find it from now on. */
  stored(doc: MessageDoc): void {
    const span = this.spans.get(this.startOf(doc._id));
    if (!span?.outstanding.has(doc._id)) return;
    // what a listing reads of it, as a projection would give it
    const summary = Object.fromEntries(
      LISTED_FIELDS.filter((field) => doc[field] !== undefined).map((field) => [field, doc[field]]),
    );
    span.stored.set(doc._id, summary as unknown as MessageDoc);
  }

  /** Its sender was told 451: never listed, whether or not its insert lands (it is removed if so). */
  refused(id: string): void {
    this.spans.get(this.startOf(id))?.stored.delete(id);
  }

  listed(name: string): readonly MessageDoc[] | undefined {
    for (const span of this.spans.values()) if (span.registered === name) return [...span.stored.values()];
    // dropped, or being dropped, by this process: every message had departed
    return this.emptied.has(name) ? [] : undefined;
  }

  /** This process stops: its listings read its intakes from the database again. */
  close(): void {
    const key = localIntakeKey(this.ownerName, this.kind);
    if (this.store.localIntakes.get(key) === this) this.store.localIntakes.delete(key);
  }

  /** Whether a claimed message can enter the current span of claims (it has not been in it before). */
  canEnter(id: string): boolean {
    return !this.spans.get(this.spanStart(Date.now()))?.entered?.has(id);
  }

  /** Counts a message in its span, registered first: the collection its insert goes to. */
  async enter(id: string): Promise<string> {
    if (this.kind === 'claims') this.claimedIn.set(id, this.spanStart(Date.now()));
    const span = this.spanOf(id);
    span.outstanding.add(id);
    if (this.kind === 'claims') {
      span.entered ??= new Set();
      span.entered.add(id);
    }
    try {
      return await span.name;
    } catch (err) {
      span.outstanding.delete(id);
      throw err;
    }
  }

  /**
   * A message has left its intake (its final record is stored, or it moved into `messages`), or
   * never entered it (its sender was told 451 and the watch for its late insert is over:
   * `noted` false). Once a span has ended and every message has left, it is dropped.
   */
  depart(id: string, noted = true): void {
    const span = this.spans.get(this.startOf(id));
    this.claimedIn.delete(id);
    if (!span?.outstanding.has(id)) return;
    // its newer copy (final record, or `messages`) is stored by now: listings find that one
    span.stored.delete(id);
    const note = noted ? this.note(span, id) : Promise.resolve(undefined);
    void note
      .catch(() => undefined)
      .then(() => {
        span.outstanding.delete(id);
        this.dropIfDone(span);
      });
  }

  /**
   * Drops the spans that have ended with every message gone (the scheduler calls it each poll);
   * `stopping`: also those that have not ended, as no message will come into them any more.
   */
  tick(stopping = false): Promise<void> {
    const drops = [...this.spans.values()].map((span) => this.dropIfDone(span, stopping));
    return Promise.all(drops).then(() => undefined);
  }

  /** Forgets a span that another process's (or this one's) scheduler found stale and dropped. */
  forget(name: string): void {
    for (const [start, span] of this.spans)
      void span.name.then(
        (mine) => {
          if (mine === name && this.spans.get(start) === span) this.spans.delete(start);
        },
        () => {},
      );
  }

  /** The span a message is in: of its acceptance time, or (claims) of when it was claimed. */
  private startOf(id: string): number {
    if (this.kind === 'claims') return this.claimedIn.get(id) ?? Number.NaN;
    return this.spanStart(idMs(id));
  }

  private spanStart(ms: number): number {
    return Math.floor(ms / this.spanMs) * this.spanMs;
  }

  private spanOf(id: string): Span {
    const start = this.startOf(id);
    const known = this.spans.get(start);
    if (known && !known.failed) return known;
    const span: Span = {
      start,
      end: start + this.spanMs,
      name: Promise.resolve(''),
      failed: false,
      outstanding: known?.outstanding ?? new Set(),
      stored: known?.stored ?? new Map(),
    };
    const dropped = this.dropping.get(start) ?? Promise.resolve();
    span.name = dropped.then(() => this.register(start));
    span.name.then(
      (name) => {
        span.registered = name;
      },
      () => {
        span.failed = true;
      },
    );
    this.spans.set(start, span);
    return span;
  }

  private async register(start: number): Promise<string> {
    const base = `${this.kind}_${ownProcessNumber()}_${start}`;
    // two processes that drew the same number (one in a million): the second names its own
    const names = [base, `${base}_${this.ownerName.split(':').at(-1)}`];
    for (const name of names) {
      const entry: IntakeEntry = {
        _id: name,
        number: ownProcessNumber(),
        owner: this.ownerName,
        start,
        end: start + this.spanMs,
        ...(this.kind === 'claims' ? { kind: 'claims' as const } : {}),
      };
      try {
        await registry(this.store).insertOne(entry, { writeConcern: DURABLE });
        return name;
      } catch (err) {
        if (!isDuplicateKey(err)) throw err;
        // our own entry (an earlier try that went in) is ours to use
        if ((await registry(this.store).findOne({ _id: name }))?.owner === this.ownerName) return name;
      }
    }
    throw new Error(`intake ${base} is registered by two other processes`);
  }

  /** One marker document per batch of departures: readers then need not compare their copies. */
  private async note(span: Span, id: string): Promise<undefined> {
    const name = await span.name;
    span.markers ??= new Batcher<string, undefined>({
      maxInFlight: 1,
      maxBatch: 256,
      flush: async (ids) => {
        const marker: DepartureMarker = {
          _id: `departed-${++this.markerSequence}-${Date.now()}`,
          departed: ids,
        };
        await this.store.intakeDb.collection<IntakeDocument>(name).insertOne(marker);
        return ids.map(() => undefined);
      },
    });
    return span.markers.submit(id);
  }

  private dropIfDone(span: Span, stopping = false): Promise<void> | undefined {
    if (span.outstanding.size > 0 || this.spans.get(span.start) !== span) return undefined;
    if (!stopping && Date.now() < span.end) return undefined;
    this.spans.delete(span.start);
    if (span.registered) this.emptied.add(span.registered);
    const dropped = span.name
      .then((name) => dropIntake(this.store, name))
      .catch(() => {})
      .finally(() => {
        if (span.registered) this.emptied.delete(span.registered);
        if (this.dropping.get(span.start) === dropped) this.dropping.delete(span.start);
      });
    this.dropping.set(span.start, dropped);
    return dropped;
  }
}
