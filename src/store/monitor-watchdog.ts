// Owns one repair the driver cannot make itself: reconnecting a client whose server monitor has gone
// silent. The MongoDB driver (7.8) learns that a server is back only from its monitor's heartbeat.
// A heartbeat sent on a connection at the moment the server dies can wait forever (the outage drill
// caught it: FerretDB killed under load, a heartbeat "started" and never succeeded nor failed), and
// from then on every operation fails server selection against a description frozen at "Unknown",
// even once the server answers again. A heartbeat outstanding far past the driver's own timeouts
// (connect + handshake, and for an awaited one the server's own wait) can only be that; the client
// is then closed and connected again, which keeps every Collection and GridFSBucket handle valid
// (they reach the server through the client).
import type { MongoClient } from 'mongodb';

export interface MonitorWatchdogOptions {
  /** the client's connectTimeoutMS: a heartbeat's connect and its hello each time out after it */
  connectTimeoutMs: number;
  /** a heartbeat outstanding longer than this has hung; default 2 × connectTimeoutMs + 5 s */
  silentLimitMs?: number;
  /**
   * more allowed to an awaited heartbeat (MongoDB's streaming protocol: the server holds the reply
   * up to heartbeatFrequencyMS when nothing changes); default 10 s, the driver's default frequency
   */
  awaitedExtraMs?: number;
  /** how often outstanding heartbeats are looked at; default 1 s */
  checkEveryMs?: number;
  /** told each time the client is reconnected, with the server and how long its heartbeat hung */
  onReconnect?: (detail: { server: string; silentForMs: number }) => void;
  /** told when a reconnect attempt fails (it is tried again at the next check) */
  onReconnectFailed?: (error: unknown) => void;
}

// past the driver's own limits (connect, then hello, each connectTimeoutMS) with a margin for a
// busy event loop
const SLACK_MS = 5000;
const DEFAULT_AWAITED_EXTRA_MS = 10_000;

export class MonitorWatchdog {
  readonly #client: MongoClient;
  readonly #options: MonitorWatchdogOptions;
  /** heartbeats started and not yet answered, by server address: when they must be answered by */
  readonly #outstanding = new Map<string, { startedAt: number; deadline: number }>();
  readonly #timer: NodeJS.Timeout;
  #reconnecting: Promise<void> | null = null;
  /** the heartbeat that hung, while the client is closed and not yet connected again */
  #wedged: { server: string; silentForMs: number } | null = null;
  #stopped = false;

  constructor(client: MongoClient, options: MonitorWatchdogOptions) {
    this.#client = client;
    this.#options = options;
    const limitMs = options.silentLimitMs ?? 2 * options.connectTimeoutMs + SLACK_MS;
    const awaitedExtraMs = options.awaitedExtraMs ?? DEFAULT_AWAITED_EXTRA_MS;
    client.on('serverHeartbeatStarted', (event) => {
      if (this.#outstanding.has(event.connectionId)) return;
      const startedAt = Date.now();
      const deadline = startedAt + limitMs + (event.awaited ? awaitedExtraMs : 0);
      this.#outstanding.set(event.connectionId, { startedAt, deadline });
    });
    const answered = (event: { connectionId: string }) => this.#outstanding.delete(event.connectionId);
    client.on('serverHeartbeatSucceeded', answered);
    client.on('serverHeartbeatFailed', answered);
    this.#timer = setInterval(() => this.#check(), options.checkEveryMs ?? 1000).unref();
  }

  /** Stops watching (before the client is closed for good). */
  stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    return this.#reconnecting ?? Promise.resolve();
  }

  #check(): void {
    if (this.#stopped || this.#reconnecting) return;
    if (!this.#wedged) {
      const now = Date.now();
      for (const [server, { startedAt, deadline }] of this.#outstanding) {
        if (now > deadline) this.#wedged = { server, silentForMs: now - startedAt };
      }
      if (!this.#wedged) return;
      this.#outstanding.clear();
      // operations in flight fail (their callers retry, or answer 4xx); until connect succeeds,
      // operations fail at once rather than wait for a server that will never be selected
      this.#reconnecting = this.#client
        .close()
        .catch(() => {})
        .then(() => this.#connect());
    } else {
      this.#reconnecting = this.#connect();
    }
    void this.#reconnecting.finally(() => {
      this.#reconnecting = null;
    });
  }

  /** One attempt; a failure leaves #wedged set, so the next check tries again. */
  async #connect(): Promise<void> {
    if (this.#stopped || !this.#wedged) return;
    try {
      await this.#client.connect();
      this.#options.onReconnect?.(this.#wedged);
      this.#wedged = null;
    } catch (error) {
      this.#options.onReconnectFailed?.(error);
    }
  }
}
