// The 451 clean-up. The sender of a message answered 451 (storing failed or took too long) will
// send it again; but a stalled database may still apply the insert that was in flight. For a while
// the process that answered removes such a record whenever it appears (its raw bytes are left:
// disk, not mail), and never claims the message itself.
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import type { Intake, Store } from '../store/queue.ts';
import * as queue from '../store/queue.ts';

/** how long a refused acceptance's late writes are looked for */
const ABANDONED_WATCH_MS = 10 * 60_000;

export class AbandonedAcceptances {
  /** id -> when to stop looking */
  private readonly until = new Map<string, number>();
  private readonly intake: Intake | undefined;

  /** the intake the refused messages were to go into: each one leaves it once no longer watched */
  constructor(intake: Intake | undefined) {
    this.intake = intake;
  }

  add(id: string): void {
    this.until.set(id, Date.now() + ABANDONED_WATCH_MS);
    this.intake?.refused(id);
  }

  /** Never claimed by this process while it watches them. */
  has(id: string): boolean {
    return this.until.has(id);
  }

  /** Removes the records that have landed since; forgets the ids watched long enough. */
  async sweep(store: Store, logger: Logger): Promise<void> {
    if (this.until.size === 0) return;
    const now = Date.now();
    for (const [id, until] of this.until)
      if (now > until) {
        this.until.delete(id);
        this.intake?.depart(id, false);
      }
    const removed = await queue.abandon(store, [...this.until.keys()]);
    if (removed > 0)
      logger.warn(
        { event: EVENTS.smtpStoreFailed, removed },
        'removed records of messages answered 451 that were stored after all',
      );
  }
}
