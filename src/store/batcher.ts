// Coalesces concurrent writes into one database command: the writes of one turn of the event loop
// go together, and while a command is in flight the writes that arrive wait and then go together.
// A lone write goes at the end of its turn (no delay); under load, many messages share one round
// trip and one commit, and a batcher with `lingerMs` also lets the writes gather for that long
// after its previous command.
import { withDeadline } from '../util/deadline.ts';

export interface BatcherOptions<Op, Result> {
  /** performs the writes together; the results in the same order (one rejection fails them all) */
  flush(ops: Op[]): Promise<Result[]>;
  /** commands in flight at once: lets the database work on several while batches form */
  maxInFlight: number;
  /** most writes in one command */
  maxBatch: number;
  /**
   * under load, a command waits until this long after the previous one started (or until a full
   * batch is there), so that the writes of that time go together. A write that finds the batcher
   * quiet for that long goes at once. Default 0: only the writes of one turn, and those that come
   * while a command is in flight, wait for each other.
   */
  lingerMs?: number;
  /**
   * a flush not settled by then fails its writes and frees its place; default 45 s (past the
   * driver's socketTimeoutMS). The driver can leave a command pending forever when its connection
   * dies at the wrong moment, and a place held forever would stop every later write.
   */
  deadlineMs?: number;
}

const DEFAULT_DEADLINE_MS = 45_000;

export class BatchDeadlineError extends Error {
  constructor(ms: number) {
    super(`database write unanswered after ${ms} ms: its outcome is unknown`);
    this.name = 'BatchDeadlineError';
  }
}

export class Batcher<Op, Result> {
  private readonly options: BatcherOptions<Op, Result>;
  private queue: Array<{ op: Op; resolve: (result: Result) => void; reject: (err: unknown) => void }> = [];
  private inFlight = 0;
  /** performance.now() when the last command started */
  private lastFlushAt = Number.NEGATIVE_INFINITY;
  private lingering: NodeJS.Timeout | undefined;
  /** a drain is due at the end of this turn of the event loop */
  private gathering = false;

  constructor(options: BatcherOptions<Op, Result>) {
    this.options = options;
  }

  submit(op: Op): Promise<Result> {
    return new Promise((resolve, reject) => {
      this.queue.push({ op, resolve, reject });
      // the other writes of this turn (a batch's waiters resuming, sockets read in one poll) join
      // it: a first write sent alone made the rest wait a round trip for the next command
      if (this.gathering) return;
      this.gathering = true;
      setImmediate(() => {
        this.gathering = false;
        this.drain();
      });
    });
  }

  private drain(): void {
    while (this.inFlight < this.options.maxInFlight && this.queue.length > 0) {
      if (this.linger()) return;
      this.lastFlushAt = performance.now();
      const batch = this.queue.splice(0, this.options.maxBatch);
      this.inFlight++;
      const deadlineMs = this.options.deadlineMs ?? DEFAULT_DEADLINE_MS;
      withDeadline(
        this.options.flush(batch.map((entry) => entry.op)),
        deadlineMs,
        () => new BatchDeadlineError(deadlineMs),
      )
        .then(
          (results) => {
            for (const [i, entry] of batch.entries()) entry.resolve(results[i] as Result);
          },
          (err: unknown) => {
            for (const entry of batch) entry.reject(err);
          },
        )
        .finally(() => {
          this.inFlight--;
          this.drain();
        });
    }
  }

  /** True while the next command should wait for more writes (a timer then drains). */
  private linger(): boolean {
    const lingerMs = this.options.lingerMs ?? 0;
    if (lingerMs <= 0 || this.queue.length >= this.options.maxBatch) {
      clearTimeout(this.lingering);
      this.lingering = undefined;
      return false;
    }
    const wait = this.lastFlushAt + lingerMs - performance.now();
    if (wait <= 0) return false;
    this.lingering ??= setTimeout(() => {
      this.lingering = undefined;
      this.drain();
    }, wait);
    return true;
  }
}

/** A batcher per collection name, for writes spread over partitions. */
export class BatcherPerName<Op, Result> {
  private readonly make: (name: string) => Batcher<Op, Result>;
  private readonly batchers = new Map<string, Batcher<Op, Result>>();

  constructor(make: (name: string) => Batcher<Op, Result>) {
    this.make = make;
  }

  submit(name: string, op: Op): Promise<Result> {
    let batcher = this.batchers.get(name);
    if (!batcher) {
      // partitions go by the day or hour: the oldest ones are not written to again
      if (this.batchers.size >= 48) this.batchers.delete(this.batchers.keys().next().value!);
      batcher = this.make(name);
      this.batchers.set(name, batcher);
    }
    return batcher.submit(op);
  }
}
