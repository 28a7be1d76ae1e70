// Owns the pool of parse worker threads the event loop hands raw messages to. Parsing a message
// (MIME walk, charset decoding, base64, JSON) is CPU work that must not stall SMTP and HTTP, so it
// runs in piscina workers with a bounded queue and a heap limit sized for the largest message.
// Infrastructure failures come back as results, never as rejections.
import { setFlagsFromString } from 'node:v8';
import { Piscina } from 'piscina';
import { metrics } from '../metrics/metrics.ts';
import type { StoredAuth } from '../store/messages.ts';
import type { AttachmentOutput, ParseInput, ParseOutput } from './payload.ts';
import type { AuthRequest } from './sender-auth.ts';
import type { ParseThreadData } from './thread.ts';

export interface ParsePoolOptions {
  threads: number;
  /** tasks queued in piscina for a thread (more callers wait in parse()); default threads × 2 */
  maxQueue?: number;
  /** largest raw message the heap limit is sized for; default 25 MiB */
  maxMessageBytes?: number;
  /**
   * start the threads with the first task rather than at once, and let them go after 10 idle
   * minutes; default false
   */
  onDemand?: boolean;
  /**
   * tasks one thread runs at once (they interleave while they wait, for DNS: sender
   * authentication); default 1. The heap limit is not raised for it: only for small messages.
   */
  tasksPerThread?: number;
}

// a thread started on demand stays this long after its last task
const ON_DEMAND_IDLE_MS = 10 * 60_000;

export type PoolFailure = { ok: false; code: 'pool_unavailable' | 'worker_crashed'; message: string };
export type PoolParseOutput = ParseOutput | PoolFailure;

/** The tasks of the parse thread (thread.ts), by piscina `name`. */
interface Tasks {
  default: { input: ParseInput; output: ParseOutput };
  authenticate: { input: { raw: Uint8Array; check: AuthRequest }; output: StoredAuth };
  attachment: { input: { raw: Uint8Array; index: number }; output: AttachmentOutput };
}

const WORKER_URL = new URL('./thread.ts', import.meta.url).href;

const DEFAULTS = Object.freeze({
  // small: a task in piscina's queue holds its own copy of the message, while a caller waiting
  // for a place (see parse) holds nothing new
  queuePerThread: 2,
  maxMessageBytes: 25 * 1024 * 1024,
} as const);

// A parse holds the raw bytes, decoded parts, base64 strings and the JSON text at once: about six
// times the message, plus a fixed allowance for the parser's own code and data.
const HEAP = Object.freeze({ perMessageByte: 6, baseMb: 64 } as const);
const MIB = 1024 * 1024;

// V8 grows an old generation bounded under 256 MB by a factor of 1.3 after each full collection, as
// if on a small device, with a floor of 8 MB. Here the bound only stops a MIME bomb: a parse
// thread allocates ArrayBuffers with every message, which count towards the same limit, so the
// threads collected their whole heap every few hundred messages. Growing by 4, the factor V8
// itself gives a heap bounded above 2 GB such as the main thread's, cuts that to a quarter at the
// cost of some resident memory; the bound stays (docs/decisions/0006-parse-heap-growth.md).
// The flag is V8's, for every isolate of the process: the main thread's factor was up to 4 already.
setFlagsFromString('--heap-growing-percent=300');

/**
 * How much nicer than the event loop a parse thread runs (Linux; elsewhere threads share their
 * process's priority). The event loop answers the SMTP sessions and the database's replies, and
 * every sender waits on those: four round trips and a durable insert per message. A parse is
 * queued work that nobody waits on the moment it runs. On busy cores the scheduler then gives a
 * parse thread about a third of the share of a thread at the process's priority, so the replies go
 * first; on idle cores nothing changes (it is a share, never a cap)
 * (docs/decisions/0005-parse-threads-nicer.md).
 */
export const PARSE_THREAD_NICENESS = 5;

// piscina rejects with plain Errors; these messages mean "not taken on", not "died while parsing".
const NOT_TAKEN_ON: ReadonlySet<string> = new Set([
  'Task queue is at limit',
  'No task queue available and all Workers are busy',
  'Terminating worker thread',
]);

export class ParsePool implements Parser {
  #pool: Piscina;
  #closed: Promise<void> | null = null;
  /** tasks handed to piscina and not finished: at most its threads × tasks per thread plus its queue */
  #admitted = 0;
  readonly #capacity: number;
  /** callers waiting for a place: a full queue is back-pressure, never a failed parse */
  readonly #waiting: Array<() => void> = [];

  constructor(options: ParsePoolOptions) {
    const threads = positiveInteger('threads', options.threads);
    const maxQueue = positiveInteger('maxQueue', options.maxQueue ?? threads * DEFAULTS.queuePerThread);
    const maxMessageBytes = positiveInteger(
      'maxMessageBytes',
      options.maxMessageBytes ?? DEFAULTS.maxMessageBytes,
    );
    const tasksPerThread = positiveInteger('tasksPerThread', options.tasksPerThread ?? 1);
    this.#capacity = threads * tasksPerThread + maxQueue;
    this.#pool = new Piscina({
      filename: WORKER_URL,
      minThreads: options.onDemand ? 0 : threads,
      maxThreads: threads,
      concurrentTasksPerWorker: tasksPerThread,
      ...(options.onDemand ? { idleTimeout: ON_DEMAND_IDLE_MS } : {}),
      maxQueue,
      // piscina's run- and wait-time histograms: nothing reads them (parse durations are ours)
      recordTiming: false,
      workerData: { niceness: PARSE_THREAD_NICENESS } satisfies ParseThreadData,
      resourceLimits: {
        maxOldGenerationSizeMb: Math.ceil((maxMessageBytes * HEAP.perMessageByte) / MIB) + HEAP.baseMb,
      },
    });
    // piscina emits 'error' for a worker that dies with no task on it (it then starts a replacement)
    // and for a close that times out (it then terminates the workers). Neither concerns a caller,
    // and an unhandled 'error' event would take the whole process down.
    this.#pool.on('error', () => {});
  }

  /**
   * Parses one message in a worker thread. Takes ownership of `input.raw`: when it spans its whole
   * ArrayBuffer that buffer is transferred, and the caller's view is detached once the task reaches
   * a thread; otherwise the bytes are copied into a buffer of their own first (`new Uint8Array`:
   * Buffer#slice would share memory), so the message never drags along the rest of a larger buffer.
   * A pool_unavailable answer means the task never reached a thread and `input.raw` is untouched.
   * When threads and queue are full, the call waits for a place (messages are not failed for load).
   */
  parse(input: ParseInput): Promise<PoolParseOutput> {
    return this.#submit('default', input);
  }

  /** Sender authentication alone (SMTP's DMARC policy check); takes ownership of `raw` as parse does. */
  authenticate(raw: Uint8Array, check: AuthRequest): Promise<StoredAuth | PoolFailure> {
    return this.#submit('authenticate', { raw, check });
  }

  /** The decoded bytes of attachment `index` of a raw message; takes ownership of `raw`. */
  attachment(raw: Uint8Array, index: number): Promise<AttachmentOutput | PoolFailure> {
    return this.#submit('attachment', { raw, index });
  }

  /** Waits for a place (threads and queue full is back-pressure, never a failure), then runs. */
  async #submit<N extends keyof Tasks>(
    name: N,
    input: Tasks[N]['input'],
  ): Promise<Tasks[N]['output'] | PoolFailure> {
    while (this.#closed === null && this.#admitted >= this.#capacity)
      await new Promise<void>((resolve) => this.#waiting.push(resolve));
    if (this.#closed !== null) return failure('pool_unavailable', 'parse pool is closed');
    this.#admitted++;
    try {
      return await this.#run(name, input);
    } finally {
      this.#admitted--;
      this.#waiting.shift()?.();
    }
  }

  async #run<N extends keyof Tasks>(
    name: N,
    input: Tasks[N]['input'],
  ): Promise<Tasks[N]['output'] | PoolFailure> {
    const raw = ownsWholeBuffer(input.raw) ? input.raw : new Uint8Array(input.raw);
    const started = performance.now();
    try {
      const output = (await this.#pool.run(
        { ...input, raw },
        { name, transferList: [raw.buffer] },
      )) as Tasks[N]['output'];
      if (name === 'default') metrics.parsed(performance.now() - started);
      return output;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      // queued tasks that close() abandons end here too: the pool went away, the message did not fail
      if (this.#closed !== null || NOT_TAKEN_ON.has(message)) {
        return failure('pool_unavailable', `parse pool unavailable: ${message}`);
      }
      return failure('worker_crashed', `parse worker failed: ${message}`);
    }
  }

  /** Messages waiting for a thread: in piscina's queue, and callers waiting for a place in it. */
  get queued(): number {
    return this.#pool.queueSize + this.#waiting.length;
  }

  /** Waits for running parses, then stops the threads. Safe to call more than once. */
  close(): Promise<void> {
    this.#closed ??= this.#pool.close();
    for (const resolve of this.#waiting.splice(0)) resolve();
    return this.#closed;
  }
}

function ownsWholeBuffer(bytes: Uint8Array): bytes is Uint8Array<ArrayBuffer> {
  return (
    bytes.buffer instanceof ArrayBuffer &&
    bytes.byteOffset === 0 &&
    bytes.byteLength === bytes.buffer.byteLength
  );
}

function failure(code: 'pool_unavailable' | 'worker_crashed', message: string): PoolFailure {
  return { ok: false, code, message };
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`ParsePool: ${name} must be a positive integer, got ${value}`);
  }
  return value;
}

export interface ParseLanesOptions {
  /** threads of each lane */
  threads: number;
  /** largest raw message (each lane's heap is sized for it); default 25 MiB */
  maxMessageBytes?: number;
  /** messages of this many bytes or more take the large lane; default 256 KiB */
  largeFromBytes?: number;
  /** the small lane's threads start with start() or the first message, not now; default false */
  deferSmallLane?: boolean;
}

/** What actors parse with: one pool, or lanes of pools. */
export interface Parser {
  parse(input: ParseInput): Promise<PoolParseOutput>;
  authenticate(raw: Uint8Array, check: AuthRequest): Promise<StoredAuth | PoolFailure>;
  attachment(raw: Uint8Array, index: number): Promise<AttachmentOutput | PoolFailure>;
  close(): Promise<void>;
}

const DEFAULT_LARGE_FROM_BYTES = 256 * 1024;
/** small-lane tasks one thread interleaves (see ParseLanes) */
const SMALL_TASKS_PER_THREAD = 8;

/**
 * Small messages and large ones parse on threads of their own. A message with megabytes of
 * attachments keeps a thread busy for hundreds of milliseconds; in one shared queue, every text
 * message behind it waited that long (at half the saturated rate, the webhook p99 of the text class
 * was ten times its p50). With lanes the two kinds share the cores, not a queue.
 */
export class ParseLanes implements Parser {
  #small: ParsePool | undefined;
  readonly #large: ParsePool;
  readonly #largeFromBytes: number;
  readonly #makeSmall: () => ParsePool;

  constructor(options: ParseLanesOptions) {
    this.#largeFromBytes = positiveInteger(
      'largeFromBytes',
      options.largeFromBytes ?? DEFAULT_LARGE_FROM_BYTES,
    );
    // the same heap limit in both: a small message can still expand (10,000 parts) in a parse
    const pool = (onDemand: boolean, tasksPerThread: number): ParsePool =>
      new ParsePool({
        threads: options.threads,
        onDemand,
        tasksPerThread,
        ...(options.maxMessageBytes === undefined ? {} : { maxMessageBytes: options.maxMessageBytes }),
      });
    // A parse waits for sender authentication's DNS answers (up to AUTH_DNS_BUDGET when a server
    // is silent): small messages share a thread while they wait, so a DNS outage does not cut the
    // rate to one message per budget. Large ones do not (the heap is sized for one at a time).
    this.#makeSmall = () => pool(false, SMALL_TASKS_PER_THREAD);
    if (!options.deferSmallLane) this.start();
    // on demand: a process starting (a standby replacing a killed worker, on busy cores) boots one
    // parse thread, as before the lanes; the first large message pays the second one's start
    this.#large = pool(true, 1);
  }

  /**
   * Starts the small lane's threads when they were deferred (else its first message would start
   * them, and wait). A standby worker defers them until it listens: on busy cores it spends its
   * start on getting ready to listen, not on threads it may never use.
   */
  start(): void {
    this.#smallLane();
  }

  #smallLane(): ParsePool {
    this.#small ??= this.#makeSmall();
    return this.#small;
  }

  parse(input: ParseInput): Promise<PoolParseOutput> {
    return this.#lane(input.raw).parse(input);
  }

  authenticate(raw: Uint8Array, check: AuthRequest): Promise<StoredAuth | PoolFailure> {
    return this.#lane(raw).authenticate(raw, check);
  }

  attachment(raw: Uint8Array, index: number): Promise<AttachmentOutput | PoolFailure> {
    return this.#lane(raw).attachment(raw, index);
  }

  #lane(raw: Uint8Array): ParsePool {
    return raw.byteLength >= this.#largeFromBytes ? this.#large : this.#smallLane();
  }

  get queued(): number {
    return (this.#small?.queued ?? 0) + this.#large.queued;
  }

  async close(): Promise<void> {
    await Promise.all([this.#small?.close(), this.#large.close()]);
  }
}
