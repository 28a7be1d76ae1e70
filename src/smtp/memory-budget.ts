// The memory budget of one worker (MEMORY_BUDGET): the bytes of the messages it has in flight
// (being received, waiting for a parse thread, being parsed) never add up to more than this. A
// message takes its share when its sender announces a SIZE at MAIL FROM, or byte by byte while its
// DATA arrives, and gives it back once its parse has ended. A sender that would overflow it is told
// 452 4.3.1 and tries again later: a burst of large mail from several senders waits in their
// queues, not in this process's memory. Pure accounting: it neither delays nor orders anyone, so a
// small message is refused only when the budget is as good as spent.
import type { Parser } from '../parse/pool.ts';

/** One message's share of the budget. */
export class Reservation {
  #bytes = 0;
  #released = false;
  readonly #budget: MemoryBudget;

  constructor(budget: MemoryBudget) {
    this.#budget = budget;
  }

  get bytes(): number {
    return this.#bytes;
  }

  /** Makes the share at least `total` bytes; false (and unchanged) when the budget cannot give it. */
  cover(total: number): boolean {
    if (this.#released) return false;
    if (total <= this.#bytes) return true;
    if (!this.#budget.take(total - this.#bytes)) return false;
    this.#bytes = total;
    return true;
  }

  /** Makes the share exactly `total` bytes (the size received, once it is known); false as cover. */
  settle(total: number): boolean {
    if (total > this.#bytes) return this.cover(total);
    this.#budget.give(this.#bytes - total);
    this.#bytes = total;
    return true;
  }

  /** Gives the whole share back; safe to call more than once. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#budget.give(this.#bytes);
    this.#bytes = 0;
  }
}

export class MemoryBudget {
  readonly limit: number;
  #used = 0;
  /** the share of each received message, by its bytes, until its parse ends */
  readonly #held = new WeakMap<object, Reservation>();
  // the backstop for a message whose held bytes are let go without a parse (its owner failed
  // before it, or lost it to another): its share comes back when they are collected
  readonly #collected = new FinalizationRegistry<Reservation>((reservation) => reservation.release());

  constructor(limit: number) {
    if (!Number.isSafeInteger(limit) || limit < 1)
      throw new RangeError(`MemoryBudget: limit must be a positive integer, got ${limit}`);
    this.limit = limit;
  }

  /** Bytes of messages in flight. */
  get used(): number {
    return this.#used;
  }

  /** A share of `bytes` (0: grown later with cover), or undefined when the budget cannot give it. */
  reserve(bytes: number): Reservation | undefined {
    const reservation = new Reservation(this);
    return reservation.cover(bytes) ? reservation : undefined;
  }

  /** Only for Reservation. */
  take(bytes: number): boolean {
    if (this.#used + bytes > this.limit) return false;
    this.#used += bytes;
    return true;
  }

  /** Only for Reservation. */
  give(bytes: number): void {
    this.#used = Math.max(0, this.#used - bytes);
  }

  /** The share of a message goes with its bytes as received, until they are parsed. */
  hold(raw: Uint8Array, reservation: Reservation): void {
    this.#held.set(raw, reservation);
    this.#collected.register(raw, reservation, reservation);
  }

  #releaseHeld(raw: Uint8Array): void {
    const reservation = this.#held.get(raw);
    if (!reservation) return;
    this.#held.delete(raw);
    this.#collected.unregister(reservation);
    reservation.release();
  }

  /**
   * The parser the actors use: a parse of bytes held here gives their share back when it ends (the
   * thread has let go of them by then; what is left is the payload, a fraction of the message when
   * its attachments go by URL).
   */
  parser<P extends Parser>(parser: P): Parser {
    return {
      parse: async (input) => {
        const { raw } = input;
        try {
          return await parser.parse(input);
        } finally {
          this.#releaseHeld(raw);
        }
      },
      authenticate: (raw, check) => parser.authenticate(raw, check),
      attachment: (raw, index) => parser.attachment(raw, index),
      close: () => parser.close(),
    };
  }
}
