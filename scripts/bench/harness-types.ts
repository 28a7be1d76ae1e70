// The shapes the bench's harness (harness.ts) and its parts share. Most parts import the harness;
// outage.ts gets its functions handed over by scripts/bench.ts and imports only these types.
import type { ServiceProcess } from '../service-process.ts';
import type { Arrival } from './webhook-sink.ts';

/** A database server the bench started: its URI (no database name) and what its CPU is. */
export interface BenchDatabase {
  uri: string;
  backend: 'sqlite' | 'postgresql' | 'other';
  pid(): number | undefined;
  /** the server's processes: FerretDB, and with PostgreSQL every PostgreSQL process on the machine */
  pids(): number[];
}

export interface EndpointSample {
  /** latency of each answered request, ms */
  times: number[];
  /** answers other than 200 */
  errors: number;
  /** requests given up after `timeoutMs` */
  timeouts: number;
  /** the first answer that was not a 200: `<status> <body>` */
  firstError?: string;
}

export interface PostfixTools {
  source: string;
  sink: string;
  env: NodeJS.ProcessEnv;
  version: string;
}

export interface RunningService {
  service: ServiceProcess;
  statsFile: string;
  pids(): number[];
}

export interface ServiceTarget {
  /** the server; the shared parts' database by default */
  database?: BenchDatabase;
  /** an existing database on it (seeded, say); a fresh one by default */
  dbName?: string;
  /** more settings for the service (RETRY_DELAYS, STORAGE_PROFILE, ...) */
  env?: Record<string, string>;
}

export interface Sink {
  port: number;
  /** arrivals answered 200, and the requests refused while told another status (setStatus) */
  count(): Promise<{
    count: number;
    lastArrivalAt: number;
    refused: number;
    firstRefusedAt: number;
    lastRefusedAt: number;
  }>;
  /** answers every request with this status from now on: 200 delivers, anything else refuses */
  /** answer `status` from now on (200: take arrivals), with this Retry-After when given */
  setStatus(status: number, retryAfter?: string): Promise<void>;
  take(): Promise<Arrival[]>;
  pid: number;
  stop(): void;
}

export interface SmtpSourceLoad {
  sessions: number;
  total: number;
  /** -d: all of a session's messages over one connection */
  persistent: boolean;
  /** -l: smtp-source's own generated message of this many bytes; default our 3 KB text message (-F) */
  bytes?: number;
  /** the recipients' domain; default the bench domain */
  domain?: string;
  /** smtp-source is killed after this long; default 10 minutes */
  timeoutMs?: number;
}
