// The actors of one process: it starts an actor for each message this process accepts, claims
// messages that are due (a retry whose time has come, or a lease that expired because its owner
// died) through the unique-insert claim, renews the leases of running actors, and on shutdown
// finishes or releases what it holds. Any number of processes and machines share the work this way.
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { canReplay } from '../lifecycle/lifecycle.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { metrics } from '../metrics/metrics.ts';
import { restoreRecord } from '../store/history.ts';
import {
  claimMessage,
  deleteExpiredLeases,
  findDue,
  type MessageDoc,
  removeAbandonedRecords,
} from '../store/messages.ts';
import { rawExists } from '../store/raw.ts';
import { getMessage } from '../store/reads.ts';
import { type ActorDeps, MessageActor } from './actor.ts';

export interface ActorSystemOptions extends Omit<ActorDeps, 'logger'> {
  logger: Logger;
  /** most messages driven at once by this process; default 1000 */
  maxActors?: number;
}

export type ReplayOutcome = 'ok' | 'not_found' | 'invalid_state' | 'raw_expired';

const LEASE_CLEANUP_EVERY_MS = 60_000;
/** how often, and how long, a refused acceptance's late writes are looked for and removed */
const ABANDONED_RETRY_MS = 1000;
const ABANDONED_WATCH_MS = 10 * 60_000;
/** lease documents are kept a while after they expire: they are the record of who owned what */
const LEASE_KEEP_MS = 60 * 60_000;

export class ActorSystem {
  /** this process's owner name in leases: host, pid and a random part (pids are reused) */
  readonly owner = `${os.hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  private readonly options: ActorSystemOptions;
  private readonly deps: ActorDeps;
  private readonly running = new Map<string, { actor: MessageActor; done: Promise<void> }>();
  private readonly maxActors: number;
  private readonly pollMs: number;
  private timers: NodeJS.Timeout[] = [];
  /** acceptances answered 451 whose record may still land: id -> when to stop looking */
  private readonly abandoned = new Map<string, number>();
  private polling = false;
  private stopping: Promise<void> | undefined;

  constructor(options: ActorSystemOptions) {
    this.options = options;
    this.deps = { ...options, logger: options.logger.child({ owner: this.owner }) };
    this.maxActors = options.maxActors ?? 1000;
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
    schedule(
      () => deleteExpiredLeases(this.options.store, new Date(Date.now() - LEASE_KEEP_MS)),
      LEASE_CLEANUP_EVERY_MS,
    );
    schedule(() => this.removeAbandoned(), ABANDONED_RETRY_MS);
  }

  /**
   * The sender of this message was told 451 (storing failed or took too long), so it will send it
   * again; but a stalled database may still apply the insert that was in flight. For a while this
   * process removes such a record whenever it appears (its raw bytes are left: disk, not mail), and
   * never claims the message itself.
   */
  abandon(id: string): void {
    this.abandoned.set(id, Date.now() + ABANDONED_WATCH_MS);
  }

  private async removeAbandoned(): Promise<void> {
    if (this.abandoned.size === 0) return;
    const now = Date.now();
    for (const [id, until] of this.abandoned) if (now > until) this.abandoned.delete(id);
    const ids = [...this.abandoned.keys()];
    const removed = await removeAbandonedRecords(this.options.store, ids);
    if (removed > 0)
      this.deps.logger.warn(
        { event: EVENTS.smtpStoreFailed, removed },
        'removed records of messages answered 451 that were stored after all',
      );
  }

  /** Drives a message this process has just accepted (it owns epoch 1 from the insert). */
  adopt(doc: MessageDoc, raw: Uint8Array): void {
    this.spawn(doc, raw);
  }

  get size(): number {
    return this.running.size;
  }

  /** Re-queues a message in dlq or failed for a new round of attempts, and drives it here. */
  async replay(id: string): Promise<ReplayOutcome> {
    const doc = await getMessage(this.options.store, id);
    if (!doc) return 'not_found';
    if (!canReplay(doc.state)) return 'invalid_state';
    if (this.running.has(id)) return 'invalid_state';
    // a replay parses the message again: not possible once raw retention has removed its bytes
    if (!(await rawExists(this.options.store, doc))) return 'raw_expired';
    const inFlight = (await this.options.store.messages.countDocuments({ _id: id }, { limit: 1 })) === 1;
    // a final message comes back from its history partition into the working set, owned by us
    const claimed = inFlight
      ? await claimMessage(this.options.store, id, doc.lease_epoch, this.owner, this.options.leaseMs)
      : await restoreRecord(this.options.store, doc, this.owner, this.options.leaseMs);
    // someone else took it in between: it is being worked on, so not replayable now
    if (!claimed || !canReplay(claimed.state)) return 'invalid_state';
    const actor = new MessageActor(this.deps, claimed);
    await actor.replay();
    this.track(actor, actor.run());
    return 'ok';
  }

  private spawn(doc: MessageDoc, raw?: Uint8Array): void {
    const actor = new MessageActor(this.deps, doc);
    this.track(actor, actor.run(raw));
  }

  private track(actor: MessageActor, run: Promise<void>): void {
    const done = run.finally(() => this.running.delete(actor.id));
    this.running.set(actor.id, { actor, done });
  }

  /** Claims due messages up to the free capacity, oldest due first. */
  private async poll(): Promise<void> {
    if (this.polling || this.stopping) return;
    this.polling = true;
    try {
      const capacity = this.maxActors - this.running.size;
      if (capacity <= 0) return;
      const due = await findDue(this.options.store, new Date(), Math.min(capacity, 100));
      for (const candidate of due) {
        if (this.stopping) return;
        if (this.running.has(candidate._id) || this.abandoned.has(candidate._id)) continue;
        const doc = await claimMessage(
          this.options.store,
          candidate._id,
          candidate.lease_epoch,
          this.owner,
          this.options.leaseMs,
        );
        if (!doc) continue;
        // an owner's lease that expired (a retry that came due has no owner left)
        if (candidate.lease_owner) metrics.leaseTakenOver();
        this.deps.logger.debug(
          { event: EVENTS.leaseTakenOver, message: doc._id, epoch: doc.lease_epoch },
          'claimed',
        );
        this.spawn(doc);
      }
    } finally {
      this.polling = false;
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
      const all = Promise.all([...this.running.values()].map(({ done }) => done));
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, deadlineMs);
      });
      await Promise.race([all, deadline]);
      clearTimeout(timer);
    })();
    return this.stopping;
  }
}
