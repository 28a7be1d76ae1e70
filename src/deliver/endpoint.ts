// What an endpoint is: one webhook URL (without its fragment), the unit of isolation, in-flight
// limits and health. Two paths of one origin are two endpoints, so a hanging path never holds a
// healthy one's requests. Its id is a digest of the URL: safe in a path, fixed length, the same in
// every process, and it does not show a token the URL may carry in its query.
import { createHash } from 'node:crypto';

/** The endpoint a webhook_url posts to: the URL as parsed, without a fragment (never sent). */
export function endpointUrl(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.hash = '';
    return parsed.href;
  } catch {
    return url;
  }
}

/** `e-` and 20 hex digits of the URL's SHA-256: the endpoint's `_id` and its id in the API. */
export function endpointId(url: string): string {
  return `e-${createHash('sha256').update(endpointUrl(url)).digest('hex').slice(0, 20)}`;
}

/**
 * At most `limit` holders per key, the rest waiting in order. Waiting costs nothing but a promise:
 * a delivery waiting here has not been sent, and its deadline has not started. A key's entry is
 * dropped as soon as nobody holds or waits for it, so the map is bounded by the endpoints in use.
 */
export class InFlightGate {
  readonly #limit: number;
  readonly #lanes = new Map<string, { held: number; waiting: Array<() => void> }>();

  constructor(limit: number) {
    this.#limit = limit;
  }

  /** Resolves once the caller holds one of the key's places; call the returned function to give it back. */
  acquire(key: string): Promise<() => void> | (() => void) {
    let lane = this.#lanes.get(key);
    if (!lane) {
      lane = { held: 0, waiting: [] };
      this.#lanes.set(key, lane);
    }
    const release = this.#releaser(key);
    if (lane.held < this.#limit) {
      lane.held++;
      return release;
    }
    const queue = lane.waiting;
    return new Promise((resolve) => queue.push(() => resolve(release)));
  }

  /** Requests of `key` sent and not yet finished. */
  held(key: string): number {
    return this.#lanes.get(key)?.held ?? 0;
  }

  /** Requests of `key` waiting for a place. */
  waiting(key: string): number {
    return this.#lanes.get(key)?.waiting.length ?? 0;
  }

  get keys(): number {
    return this.#lanes.size;
  }

  #releaser(key: string): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const lane = this.#lanes.get(key);
      if (!lane) return;
      const next = lane.waiting.shift();
      // the place passes straight to the next in line
      if (next) next();
      else if (--lane.held === 0) this.#lanes.delete(key);
    };
  }
}
