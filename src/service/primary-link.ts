// What the workers of one instance ask of the primary over cluster IPC, and the primary's answers:
// a change of routing made known to every worker before the API answers, and the failed
// authentications counted once for the instance. The messages are in the IPC schema (ipc.ts).
import type { Worker } from 'node:cluster';
import { FailureWindows } from '../api/failure-windows.ts';
import { onPrimaryMessage, sendToPrimary, sendToWorker, type ToPrimary, type WorkerRequest } from './ipc.ts';

/** How long a worker waits for the primary's answer, ms: past it, the request is given up. */
const REPLY_TIMEOUT_MS = 10_000;
/** How long the primary waits for a worker's acknowledgement of a routing change, ms. */
const ACK_TIMEOUT_MS = 5_000;

/**
 * The worker's end. Created first thing in a worker, before anything can read routes: a routing
 * change announced before it existed cannot be in any snapshot's past.
 */
export class PrimaryLink {
  private nextId = 1;
  private readonly replies = new Map<number, (value: number | undefined) => void>();
  private invalidate: () => void = () => {};

  constructor() {
    onPrimaryMessage((message) => {
      if (message.type === 'mailroute.invalidate') {
        this.invalidate();
        sendToPrimary({ type: 'mailroute.invalidated', id: message.id });
      } else if (message.type === 'mailroute.reply') {
        this.replies.get(message.id)?.(message.value);
      }
    });
    sendToPrimary({ type: 'mailroute.linked' });
  }

  /** What a routing change announced by any worker does here (drop the route snapshot). */
  onInvalidate(invalidate: () => void): void {
    this.invalidate = invalidate;
  }

  /** Resolves once every worker of the instance has dropped its route snapshot. */
  async routingChanged(): Promise<void> {
    await this.ask({ kind: 'routing_changed' });
  }

  /** Counts a failed authentication for the instance; resolves the address's count. */
  async authFailure(address: string): Promise<number> {
    return (await this.ask({ kind: 'auth_failure', address })) ?? 0;
  }

  private ask(request: WorkerRequest): Promise<number | undefined> {
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => settle(undefined), REPLY_TIMEOUT_MS);
      const settle = (value: number | undefined) => {
        clearTimeout(timer);
        this.replies.delete(id);
        resolve(value);
      };
      this.replies.set(id, settle);
      sendToPrimary({ type: 'mailroute.request', id, request });
    });
  }
}

export interface PrimaryBrokerEvents {
  /** a worker did not acknowledge a routing change in time */
  onAckTimeout(workerIds: number[]): void;
}

/** The primary's end: answers the workers' requests. */
export class PrimaryBroker {
  private readonly failures = new FailureWindows();
  private nextId = 1;
  /** routing changes in progress: the workers whose acknowledgement is still awaited */
  private readonly pending = new Map<number, { waiting: Set<Worker>; done: () => void }>();
  private readonly workers: () => Worker[];
  private readonly events: PrimaryBrokerEvents;

  constructor(workers: () => Worker[], events: PrimaryBrokerEvents) {
    this.workers = workers;
    this.events = events;
  }

  /** A worker's routing and authentication messages (the supervisor hands them over). */
  handle(
    worker: Worker,
    message: Extract<ToPrimary, { type: 'mailroute.linked' | 'mailroute.request' | 'mailroute.invalidated' }>,
  ): void {
    if (message.type === 'mailroute.linked') {
      // it may have missed a change announced while it started: it drops its snapshot again
      for (const [id, change] of this.pending)
        if (change.waiting.has(worker)) sendToWorker(worker, { type: 'mailroute.invalidate', id });
    } else if (message.type === 'mailroute.invalidated') {
      this.acknowledged(worker, message.id);
    } else if (message.request.kind === 'auth_failure') {
      const value = this.failures.record(message.request.address);
      sendToWorker(worker, { type: 'mailroute.reply', id: message.id, value });
    } else {
      const requestId = message.id;
      void this.broadcast().then((acks) =>
        sendToWorker(worker, { type: 'mailroute.reply', id: requestId, value: acks }),
      );
    }
  }

  /** A worker that exits acknowledges nothing more. */
  exited(worker: Worker): void {
    for (const id of [...this.pending.keys()]) this.acknowledged(worker, id);
  }

  /** Every live worker drops its route snapshot; resolves the number that acknowledged. */
  private broadcast(): Promise<number> {
    const id = this.nextId++;
    const waiting = new Set(this.workers().filter((w) => !w.isDead()));
    const total = waiting.size;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.events.onAckTimeout([...waiting].map((w) => w.id));
        finish();
      }, ACK_TIMEOUT_MS);
      const finish = () => {
        clearTimeout(timer);
        this.pending.delete(id);
        resolve(total - waiting.size);
      };
      this.pending.set(id, { waiting, done: finish });
      if (waiting.size === 0) finish();
      for (const worker of waiting) sendToWorker(worker, { type: 'mailroute.invalidate', id });
    });
  }

  private acknowledged(worker: Worker, id: number): void {
    const change = this.pending.get(id);
    if (change?.waiting.delete(worker) && change.waiting.size === 0) change.done();
  }
}
