// The actors of one process: it starts an actor for each message this process accepts, claims
// messages that are due (a retry whose time has come, or a lease that expired because its owner
// died) through the unique-insert claim, renews the leases of running actors, and on shutdown
// finishes or releases what it holds. Any number of processes and machines share the work this way.
// Taking a message back for a replay is in replay.ts, the 451 clean-up in abandoned.ts.
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import type { MessageStateName } from '../lifecycle/tables.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { metrics } from '../metrics/metrics.ts';
import * as queue from '../store/queue.ts';
import {
  BUCKET_GRACE_MS,
  bucketDroppableAt,
  bucketStart,
  DUE_BUCKET_MS,
  Intake,
  type MessageDoc,
  type ReplayTarget,
} from '../store/queue.ts';
import { concurrently } from '../util/concurrently.ts';
import { AbandonedAcceptances } from './abandoned.ts';
import { type ActorDeps, MessageActor } from './actor.ts';
import { type ReplayOutcome, takeForReplay } from './replay.ts';

export interface ActorSystemOptions extends Omit<ActorDeps, 'logger'> {
  logger: Logger;
  /** most messages driven at once by this process; default 1000 */
  maxActors?: number;
}

/** how often a refused acceptance's late writes are looked for and removed (abandoned.ts) */
const ABANDONED_SWEEP_MS = 1000;
/**
 * An owner's message is taken over only once its owner has looked gone this long to this process
 * (its intake stale, or its lease in `messages` expired): a stalled database that answers again may
 * then apply inserts whose senders were told 451, made with leases that expired meanwhile, and
 * their owner's clean-up (every ABANDONED_SWEEP_MS) removes them first.
 */
const STALE_CONFIRM_MS = 3 * ABANDONED_SWEEP_MS;
/** claims in flight at once in one poll: each is decided by its own unique lease insert */
const CLAIMS_AT_ONCE = 16;
/**
 * parked messages claimed at once: their writes go to the database together (writes.ts: one lease
 * insert, one insert into `messages`, one delete and one listing set for many), so the drain of a
 * backlog goes at the pace of those batches, not of one claim's round trips
 */
const PARKED_CLAIMS_AT_ONCE = 128;
/**
 * A retry bucket whose span is still open to new pointers is read again at most every this many
 * polls (and at most every 2 s), and no sooner than BUCKET_REREAD_PER_POINTER_MS for each pointer
 * its last read held (FerretDB decodes 40-160 µs of each: the rereads take at most about a tenth
 * of its time); in between, its due pointers come from the last read. Read at every poll, a
 * bucket of 100,000 pointers all due at once (an outage's backlog) was decoded whole for each
 * poll's claims. A pointer that lands meanwhile is claimed that much later, never earlier.
 */
const BUCKET_REREAD_POLLS = 10;
const BUCKET_REREAD_MAX_MS = 2000;
const BUCKET_REREAD_PER_POINTER_MS = 1;
/**
 * Where retries are parked (the FerretDB profile), `messages` holds owned messages only, but for
 * those of an owner that died and a park cut short; FerretDB answers its poll by decoding every
 * message in it (a bulk replay holds up to 1,000 there, a drain as many as its actors), and polled
 * at every poll that took most of its time in a replay. So it is polled at most this often: an
 * expired lease is taken over only once it has looked so for STALE_CONFIRM_MS anyway.
 */
const WORKING_SET_POLL_MS = STALE_CONFIRM_MS / 2;
/** how long a replay waits for this process's actor to finish moving the final message */
const REPLAY_WAIT_MS = 5000;

/**
 * When this process first saw each of a set of owners' things look gone (a stale intake, an
 * expired lease): one is taken over only once it has looked so for STALE_CONFIRM_MS.
 */
class GoneSince {
  private readonly since = new Map<string, number>();

  /** What looks gone now (the rest is forgotten); returns those that have looked so long enough. */
  confirmed(keys: Iterable<string>, now: number): Set<string> {
    const seen = new Set(keys);
    for (const key of this.since.keys()) if (!seen.has(key)) this.since.delete(key);
    const confirmed = new Set<string>();
    for (const key of seen) {
      const since = this.since.get(key) ?? now;
      this.since.set(key, since);
      if (now - since >= STALE_CONFIRM_MS) confirmed.add(key);
    }
    return confirmed;
  }
}

/** What the scheduler of one process knows of a due retry bucket. */
interface BucketState {
  /** the pointers this process has seen through: claimed, or handled elsewhere */
  handled: Set<string>;
  /** every pointer it can ever hold was handled at its last read: not read again until its drop */
  settled?: boolean;
  /** its last read: when; whether its span was complete then (nothing more can land); whether it could be dropped then */
  lastRead?: { at: number; complete: boolean; droppable: boolean; pointers: queue.DuePointer[] };
}

export class ActorSystem {
  /** this process's owner name in leases: host, pid and a random part (pids are reused) */
  readonly owner = `${os.hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  private readonly options: ActorSystemOptions;
  private readonly deps: ActorDeps;
  private readonly running = new Map<string, { actor: MessageActor; done: Promise<void> }>();
  private readonly maxActors: number;
  private readonly pollMs: number;
  private timers: NodeJS.Timeout[] = [];
  /** where this process's accepted messages wait until final or their first other write */
  readonly intake: Intake | undefined;
  /** where the parked messages this process claims wait, likewise (intake.ts) */
  private readonly claims: Intake | undefined;
  /** acceptances answered 451 whose record may still land */
  private readonly abandoned: AbandonedAcceptances;
  private polling = false;
  /** when `messages` was last polled for due messages (WORKING_SET_POLL_MS) */
  private workingSetPolledAt = 0;
  /** stale intakes, by name */
  private readonly staleIntakes = new GoneSince();
  /** owners' expired leases in `messages`, by `id:epoch` */
  private readonly expiredLeases = new GoneSince();
  /** what this process knows of each due retry bucket (parking.ts), forgotten once it is gone */
  private readonly buckets = new Map<string, BucketState>();
  /** a poll left due parked messages for lack of room: the next poll goes once half the room is free */
  private parkedLeft = false;
  /** a poll set for the next parked message due before the regular one (wakeFor) */
  private wake: { at: number; timer: NodeJS.Timeout } | undefined;
  private stopping: Promise<void> | undefined;

  constructor(options: ActorSystemOptions) {
    this.options = options;
    this.deps = { ...options, logger: options.logger.child({ owner: this.owner }) };
    this.maxActors = options.maxActors ?? 1000;
    this.intake = options.store.profile.intakeCollections
      ? new Intake(options.store, this.owner, options.leaseMs)
      : undefined;
    this.claims = options.store.profile.intakeCollections
      ? new Intake(options.store, this.owner, options.leaseMs, 'claims')
      : undefined;
    this.abandoned = new AbandonedAcceptances(this.intake);
    // poll often enough for short leases and retry delays (tests and drills), at most once a second
    const shortestDelay = Math.min(...options.retryDelays, options.leaseMs);
    this.pollMs = Math.max(
      50,
      Math.min(1000, Math.floor(shortestDelay / 4), Math.floor(options.leaseMs / 4)),
    );
  }

  start(): void {
    const schedule = (fn: () => Promise<unknown>, everyMs: number) => {
      const timer = setInterval(() => void fn().catch(() => {}), everyMs);
      timer.unref();
      this.timers.push(timer);
    };
    schedule(() => this.poll(), this.pollMs);
    schedule(() => this.renewLeases(), Math.max(100, Math.floor(this.options.leaseMs / 3)));
    schedule(() => this.abandoned.sweep(this.options.store, this.deps.logger), ABANDONED_SWEEP_MS);
  }

  /** This message was answered 451: its record, should it land after all, is removed (abandoned.ts). */
  abandon(id: string): void {
    this.abandoned.add(id);
  }

  /** Drives a message this process has just accepted (it owns epoch 1 from the insert). */
  adopt(doc: MessageDoc, raw: Uint8Array): void {
    this.spawn(doc, raw, this.intake);
  }

  /**
   * Whether a message accepted now gets its actor at once. Beyond MAX_ACTORS it does not: it waits,
   * stored, holding no memory here, until its lease expires and a scheduler (this one, when it has
   * room) takes it over, as if its owner had died. An actor for every accepted message let a
   * receiver that hung, or an endpoint paused by the breaker, hold a worker's memory in proportion
   * to the mail accepted meanwhile: 4.2 GB after 100,000 messages.
   */
  hasRoom(): boolean {
    return this.running.size < this.maxActors;
  }

  get size(): number {
    return this.running.size;
  }

  /** Re-queues a message in dlq or failed for a new round of attempts, and drives it here. */
  async replay(id: string, to?: ReplayTarget, listed?: MessageStateName): Promise<ReplayOutcome> {
    const taken = await takeForReplay(
      this.options.store,
      id,
      {
        name: this.owner,
        leaseMs: this.options.leaseMs,
        drives: (other) => this.running.has(other),
        finished: (other) => this.finished(other, REPLAY_WAIT_MS),
        claims: this.claims,
      },
      to,
      listed,
    );
    if (taken.outcome !== 'ok') return taken.outcome;
    const actor = new MessageActor(this.deps, taken.doc, taken.intake);
    if (!taken.written) await actor.replay(to);
    this.track(actor, actor.run(taken.raw));
    return 'ok';
  }

  /** Resolves once this process's actor of `id` has ended, or after `ms`. */
  private finished(id: string, ms: number): Promise<void> {
    const running = this.running.get(id);
    if (!running) return Promise.resolve();
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      running.done,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, ms);
      }),
    ]).finally(() => clearTimeout(timer));
  }

  private spawn(doc: MessageDoc, raw?: Uint8Array, intake?: Intake): void {
    const actor = new MessageActor(this.deps, doc, intake);
    this.track(actor, actor.run(raw));
  }

  private track(actor: MessageActor, run: Promise<void>): void {
    const done = run.finally(() => {
      this.running.delete(actor.id);
      // a backlog drains as fast as its actors finish, not at the poll's interval
      if (this.parkedLeft && !this.polling && !this.stopping && this.running.size <= this.maxActors / 2) {
        this.parkedLeft = false;
        void this.poll().catch(() => {});
      }
    });
    this.running.set(actor.id, { actor, done });
  }

  /** Claims due messages up to the free capacity, oldest due first; then those of stale intakes. */
  private async poll(): Promise<void> {
    if (this.polling || this.stopping) return;
    this.polling = true;
    try {
      void this.intake?.tick();
      void this.claims?.tick();
      const now = Date.now();
      if (!this.options.store.profile.parkRetries || now - this.workingSetPolledAt >= WORKING_SET_POLL_MS) {
        this.workingSetPolledAt = now;
        await this.claimDue();
      }
      if (this.options.store.profile.parkRetries) await this.claimParked();
      await this.claimFromStaleIntakes();
    } finally {
      this.polling = false;
    }
  }

  /** Claims due messages of `messages` up to the free capacity, oldest due first. */
  private async claimDue(): Promise<void> {
    const capacity = this.maxActors - this.running.size;
    if (capacity <= 0) return;
    const now = new Date();
    const due = await queue.dueForTakeOver(this.options.store, now, Math.min(capacity, 100));
    const free = due.filter((one) => !this.running.has(one._id) && !this.abandoned.has(one._id));
    const lease = (one: (typeof due)[number]) => `${one._id}:${one.lease_epoch}`;
    const owned = free.filter((one) => one.lease_owner);
    const confirmed = this.expiredLeases.confirmed(owned.map(lease), now.getTime());
    // a retry that came due has no owner left to wait for
    const candidates = free.filter((one) => !one.lease_owner || confirmed.has(lease(one)));
    await concurrently(candidates, CLAIMS_AT_ONCE, async (candidate) => {
      if (this.stopping) return;
      const doc = await queue.takeOver(
        this.options.store,
        candidate._id,
        candidate.lease_epoch,
        this.owner,
        this.options.leaseMs,
        now,
      );
      if (!doc) return;
      // an owner's lease that expired (a retry that came due has no owner left)
      if (candidate.lease_owner) metrics.leaseTakenOver();
      this.deps.logger.debug(
        { event: EVENTS.leaseTakenOver, message: doc._id, epoch: doc.lease_epoch },
        'claimed',
      );
      this.spawn(doc);
    });
  }

  /**
   * Claims parked messages whose retry is due (parking.ts), up to the free capacity: the buckets
   * whose span begins before the next poll, oldest first, each read whole, earliest due first. A
   * bucket whose every pointer is handled is not read again until it may be dropped (parking.ts),
   * then read once more and dropped if that still holds.
   */
  private async claimParked(): Promise<void> {
    const store = this.options.store;
    const now = Date.now();
    // a bucket that begins before the next poll is read now, for its wake (wakeFor): a backlog due
    // at a bucket's start (a Retry-After names whole seconds) went at the first poll after it, up
    // to a second late: 0.6 s of a drain of 1,000 that took 3.9 s
    const names = await queue.dueRetryBuckets(store, now + this.pollMs);
    for (const name of this.buckets.keys()) if (!names.includes(name)) this.buckets.delete(name);
    for (const name of names) {
      const bucket = this.buckets.get(name) ?? { handled: new Set<string>() };
      this.buckets.set(name, bucket);
      // a pointer acknowledged into a bucket (parking.ts) lands by then: until then it is read again
      const complete = bucketStart(name)! + DUE_BUCKET_MS + BUCKET_GRACE_MS / 2 <= now;
      const droppable = bucketDroppableAt(name) <= now;
      if (bucket.settled && !droppable) continue;
      let left = 0;
      const due: queue.DuePointer[] = [];
      for (const pointer of await this.bucketPointers(name, bucket, now, complete, droppable)) {
        if (bucket.handled.has(pointer._id)) continue;
        const id = pointer.message;
        const dueAt = pointer.due_at.getTime();
        if (dueAt > now) this.wakeFor(dueAt, now);
        if (dueAt > now || this.running.has(id) || this.abandoned.has(id)) left++;
        else due.push(pointer);
      }
      const room = Math.max(0, this.maxActors - this.running.size);
      left += Math.max(0, due.length - room);
      if (due.length > room) this.parkedLeft = true;
      await concurrently(due.slice(0, room), PARKED_CLAIMS_AT_ONCE, async (pointer) => {
        if (this.stopping) {
          left++;
          return;
        }
        const claim = await queue.claim(store, pointer, this.owner, this.options.leaseMs, this.claims);
        if (claim.outcome === 'held') {
          left++;
          return;
        }
        bucket.handled.add(pointer._id);
        if (claim.outcome !== 'claimed') return;
        this.deps.logger.debug(
          { event: EVENTS.leaseTakenOver, message: claim.doc._id, epoch: claim.doc.lease_epoch },
          'claimed a parked message',
        );
        this.spawn(claim.doc, undefined, claim.intake);
      });
      if (this.stopping) return;
      if (left > 0 || !complete) {
        bucket.settled = false;
      } else if (droppable && bucket.lastRead?.droppable) {
        this.buckets.delete(name);
        await queue.dropRetryBucket(store, name);
      } else {
        // every pointer it can ever hold is handled: not read again until it may be dropped, then
        // once more, and dropped on that read
        bucket.settled = true;
      }
    }
  }

  /**
   * Polls at `dueAt`, a parked message's due time, when that comes before the next regular poll: a
   * retry goes at its time, not up to a poll's interval (a second) later, and a backlog that comes
   * due at one moment starts to drain at that moment.
   */
  private wakeFor(dueAt: number, now: number): void {
    if (dueAt - now >= this.pollMs || (this.wake && this.wake.at <= dueAt) || this.stopping) return;
    if (this.wake) clearTimeout(this.wake.timer);
    const timer = setTimeout(() => {
      this.wake = undefined;
      void this.poll().catch(() => {});
    }, dueAt - now);
    timer.unref();
    this.wake = { at: dueAt, timer };
  }

  /**
   * A due bucket's pointers: read again when more could have landed since its last read and that
   * read is old enough (BUCKET_REREAD_*), and for its drop, which must see every pointer in it:
   * once every pointer of the last read is handled (until then it cannot be dropped anyway).
   */
  private async bucketPointers(
    name: string,
    bucket: BucketState,
    now: number,
    complete: boolean,
    droppable: boolean,
  ): Promise<queue.DuePointer[]> {
    const last = bucket.lastRead;
    if (last) {
      const rereadMs = Math.max(
        Math.min(BUCKET_REREAD_MAX_MS, BUCKET_REREAD_POLLS * this.pollMs),
        BUCKET_REREAD_PER_POINTER_MS * last.pointers.length,
      );
      // once complete, one read more: it has every pointer that can land (then it is final)
      const fresh = last.complete || (!complete && now - last.at < rereadMs);
      // for its drop: once it may be dropped and every pointer of the last read is handled
      const forDrop = droppable && bucket.settled === true && !last.droppable;
      if (fresh && !forDrop) return last.pointers;
    }
    const pointers = await queue.readRetryBucket(this.options.store, name);
    bucket.lastRead = { at: now, complete, droppable, pointers };
    return pointers;
  }

  /**
   * The messages of intakes whose owner should have dropped them by now (it died, or stalls): each
   * one due is taken over into `messages` (intake.ts); an intake with none left is dropped.
   */
  private async claimFromStaleIntakes(): Promise<void> {
    const now = Date.now();
    const stale = await queue.findStaleIntakes(this.options.store, now, this.options.leaseMs);
    const confirmed = this.staleIntakes.confirmed(
      stale.map((entry) => entry._id),
      now,
    );
    for (const entry of stale) {
      if (!confirmed.has(entry._id)) continue;
      let left = 0;
      for (const doc of await queue.readStaleIntake(this.options.store, entry._id)) {
        if (this.stopping) return;
        const due = (doc.due_at?.getTime() ?? 0) <= now;
        if (
          !due ||
          this.running.has(doc._id) ||
          this.abandoned.has(doc._id) ||
          this.running.size >= this.maxActors
        ) {
          left++;
          continue;
        }
        const claimed = await queue.takeOverFromIntake(
          this.options.store,
          doc,
          this.owner,
          this.options.leaseMs,
        );
        if (claimed === 'departed') continue;
        if (!claimed) {
          left++;
          continue;
        }
        metrics.leaseTakenOver();
        this.deps.logger.debug(
          { event: EVENTS.leaseTakenOver, message: claimed._id, epoch: claimed.lease_epoch },
          'claimed from a stale intake',
        );
        this.spawn(claimed);
      }
      if (left === 0) {
        this.intake?.forget(entry._id);
        this.claims?.forget(entry._id);
        await queue.dropStaleIntake(this.options.store, entry._id);
      }
    }
  }

  private async renewLeases(): Promise<void> {
    await Promise.all([...this.running.values()].map(({ actor }) => actor.renew()));
  }

  /**
   * Stops claiming, waits up to `deadlineMs` for running actors to finish their current step
   * (an attempt is bounded by WEBHOOK_TIMEOUT); whatever is still running then is left to its lease,
   * which expires and lets another process or the next start take the message over.
   */
  stop(deadlineMs: number): Promise<void> {
    this.stopping ??= (async () => {
      for (const timer of this.timers) clearInterval(timer);
      this.timers = [];
      if (this.wake) clearTimeout(this.wake.timer);
      const all = Promise.all([...this.running.values()].map(({ done }) => done));
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, deadlineMs);
      });
      await Promise.race([all, deadline]);
      clearTimeout(timer);
      // what this process's intakes hold has all left them: nothing more will come
      await Promise.all([this.intake?.tick(true), this.claims?.tick(true)]);
      // what is left in them (actors past the deadline) is listed from the database from now on
      this.intake?.close();
      this.claims?.close();
    })();
    return this.stopping;
  }
}
