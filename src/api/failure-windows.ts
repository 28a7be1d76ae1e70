// Failed authentications counted per client address within a window: the data behind slowing down
// repeated wrong keys (auth.ts). Apart from the API's code so that the primary, which counts for
// all workers of an instance (src/service/primary-link.ts), loads this and nothing else of it.

export interface FailurePolicy {
  /** failed attempts from one client address within the window that are answered at once; default 10 */
  free: number;
  /** ms; default 60000 */
  windowMs: number;
  /** how long each further 401 to that address is held back, ms; default 1000 */
  delayMs: number;
}

export const DEFAULT_FAILURE_POLICY: FailurePolicy = Object.freeze({
  free: 10,
  windowMs: 60_000,
  delayMs: 1000,
});
/** Addresses tracked at once; the oldest is forgotten first, so memory stays bounded under a flood. */
const MAX_TRACKED_ADDRESSES = 10_000;

/**
 * Failed authentications per client address within a window. One instance counts for the whole
 * service instance: the primary holds it for its workers (src/service/primary-link.ts), so the
 * count does not depend on how connections are spread over the workers.
 */
export class FailureWindows {
  private readonly windowMs: number;
  private readonly windows = new Map<string, { start: number; failures: number }>();

  constructor(windowMs = DEFAULT_FAILURE_POLICY.windowMs) {
    this.windowMs = windowMs;
  }

  /** Counts one failure; returns the failures of this address in its current window. */
  record(address: string, now = Date.now()): number {
    const window = this.windows.get(address);
    if (window && now - window.start < this.windowMs) return ++window.failures;
    this.windows.delete(address);
    if (this.windows.size >= MAX_TRACKED_ADDRESSES) this.windows.delete(this.windows.keys().next().value!);
    this.windows.set(address, { start: now, failures: 1 });
    return 1;
  }
}
