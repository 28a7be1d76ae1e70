// A log line that a flood cannot multiply: at most `max` lines per window; the lines held back are
// counted and reported (`suppressed`) with the first line of the next window that logs.

export interface ThrottleOptions {
  /** lines per window; default 10 */
  max?: number;
  /** ms; default 60000 */
  windowMs?: number;
}

export class LogThrottle {
  private readonly max: number;
  private readonly windowMs: number;
  private windowStart = 0;
  private logged = 0;
  private suppressed = 0;

  constructor(options: ThrottleOptions = {}) {
    this.max = options.max ?? 10;
    this.windowMs = options.windowMs ?? 60_000;
  }

  /** Calls `write` with the count held back since the last line, or holds this line back. */
  run(write: (suppressed: number) => void, now = Date.now()): void {
    if (now - this.windowStart >= this.windowMs) {
      this.windowStart = now;
      this.logged = 0;
    }
    if (this.logged >= this.max) {
      this.suppressed++;
      return;
    }
    this.logged++;
    const held = this.suppressed;
    this.suppressed = 0;
    write(held);
  }
}
