// One piece of work in flight per key, shared by whoever asks for it while it runs: the actors that
// start together and all need the same read or the same write then make one.

export class InFlight<K, V> {
  readonly #running = new Map<K, Promise<V>>();

  /**
   * The work in flight for `key`, else `start()`'s, shared until it settles. `own`: begun anew
   * (its caller needs one that starts after something it saw), and shared from then on.
   */
  run(key: K, start: () => Promise<V>, own = false): Promise<V> {
    const running = own ? undefined : this.#running.get(key);
    if (running) return running;
    const started = start().finally(() => {
      if (this.#running.get(key) === started) this.#running.delete(key);
    });
    this.#running.set(key, started);
    return started;
  }
}
