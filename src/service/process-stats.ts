// STATS_FILE diagnostics for benchmarks: the database commands this process sent (from the
// driver's command monitoring, so the count is the same on MongoDB and FerretDB) and the
// event-loop delay it saw. Appended as one JSON line when the process stops.
import { appendFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { MongoClient } from 'mongodb';

export interface ProcessStats {
  pid: number;
  role: string;
  /** commands sent, by command name (insert, update, find, ...) */
  commands: Record<string, number>;
  eventLoopDelayMs: { p50: number; p99: number; max: number };
  uptimeMs: number;
}

export interface StatsRecorder {
  snapshot(): ProcessStats;
  /** appends the snapshot to the file; never throws (diagnostics must not break a shutdown) */
  write(): void;
}

export function recordProcessStats(client: MongoClient, file: string, role: string): StatsRecorder {
  const commands: Record<string, number> = {};
  client.on('commandStarted', (event) => {
    commands[event.commandName] = (commands[event.commandName] ?? 0) + 1;
  });
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const startedAt = Date.now();
  const ms = (ns: number) => Math.round(ns / 1e4) / 100;
  const snapshot = (): ProcessStats => ({
    pid: process.pid,
    role,
    commands: { ...commands },
    eventLoopDelayMs: { p50: ms(delay.percentile(50)), p99: ms(delay.percentile(99)), max: ms(delay.max) },
    uptimeMs: Date.now() - startedAt,
  });
  return {
    snapshot,
    write() {
      try {
        appendFileSync(file, `${JSON.stringify(snapshot())}\n`);
      } catch {}
    },
  };
}
