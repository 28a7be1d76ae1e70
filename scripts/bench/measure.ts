// What a run's figures are made of: latency percentiles (by class of the mix too), CPU seconds
// of processes and of their threads, peak RSS, database commands, medians; and waiting for the sink.
import os from 'node:os';
import type { ProcessStats } from '../../src/service/process-stats.ts';
import type { Sink } from './harness-types.ts';
import { type MessageClass, MessageMix } from './mix.ts';
import { cpuSeconds, cpuSecondsByThread, memoryMb } from './proc.ts';
import { ONLY } from './settings.ts';
import type { LoadCommand, LoadResult } from './smtp-load.ts';
import type { Arrival } from './webhook-sink.ts';

// ---------- figures ----------

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

export function latencies(values: number[]): { p50: number; p99: number; p999: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const round = (ms: number) => Math.round(ms * 10) / 10;
  return {
    p50: round(percentile(sorted, 50)),
    p99: round(percentile(sorted, 99)),
    p999: round(percentile(sorted, 99.9)),
    max: round(sorted.at(-1) ?? Number.NaN),
  };
}

export const mixShapes = new MessageMix();

/** Latencies grouped by the class of each message (BENCH_CLASS sends one class only). */
export function byClass(
  samples: Array<[seq: number, ms: number]>,
): Partial<Record<MessageClass, ReturnType<typeof latencies> & { count: number }>> {
  const groups = new Map<MessageClass, number[]>();
  for (const [seq, ms] of samples) {
    const kind = ONLY ?? mixShapes.shape(seq).kind;
    const values = groups.get(kind);
    if (values) values.push(ms);
    else groups.set(kind, [ms]);
  }
  return Object.fromEntries(
    [...groups].map(([kind, values]) => [kind, { count: values.length, ...latencies(values) }]),
  );
}

/** CPU seconds of a set of processes between two moments, by pid (processes may come and go). */
export class CpuMeter {
  private readonly start = new Map<number, number>();
  private readonly pids: () => number[];
  constructor(pids: () => number[]) {
    this.pids = pids;
    for (const pid of pids()) this.start.set(pid, cpuSeconds(pid));
  }
  seconds(): number {
    return this.pids().reduce((sum, pid) => sum + cpuSeconds(pid) - (this.start.get(pid) ?? 0), 0);
  }
}

/** CPU seconds of a set of processes' threads between two moments, by thread name. */
export class ThreadCpuMeter {
  private readonly start = new Map<number, Map<string, number>>();
  private readonly pids: () => number[];
  constructor(pids: () => number[]) {
    this.pids = pids;
    for (const pid of pids()) this.start.set(pid, cpuSecondsByThread(pid));
  }
  seconds(): Map<string, number> {
    const byName = new Map<string, number>();
    for (const pid of this.pids()) {
      const before = this.start.get(pid);
      for (const [name, seconds] of cpuSecondsByThread(pid))
        byName.set(name, (byName.get(name) ?? 0) + seconds - (before?.get(name) ?? 0));
    }
    return byName;
  }
}

/** Waits until the sink has `expected` arrivals, or nothing arrived for `quietMs`, or `deadlineMs` passed. */
export async function awaitDeliveries(
  sink: Sink,
  expected: number,
  quietMs = 60_000,
  deadlineMs = Number.POSITIVE_INFINITY,
): Promise<void> {
  let last = -1;
  let lastChange = Date.now();
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const { count } = await sink.count();
    if (count >= expected || Date.now() > deadline) return;
    if (count !== last) {
      last = count;
      lastChange = Date.now();
    } else if (Date.now() - lastChange > quietMs) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

export interface RunFigures {
  sent: number;
  acknowledged: number;
  refused: number;
  delivered: number;
  lost: number;
  duplicated: number;
  acceptedPerSecond: number;
  deliveredPerSecond: number;
  replyLatencyMs: ReturnType<typeof latencies>;
  webhookLatencyMs: ReturnType<typeof latencies>;
  /** the same, by class of the mix: whether small messages wait behind large ones */
  webhookLatencyByClassMs: Partial<Record<MessageClass, ReturnType<typeof latencies> & { count: number }>>;
  replyLatencyByClassMs: Partial<Record<MessageClass, ReturnType<typeof latencies> & { count: number }>>;
  serviceCpuPer1000: number;
  databaseCpuPer1000: number;
  sinkCpuPer1000: number;
  peakRssMb: Record<string, number>;
  databaseCommandsPerDelivered: number;
  commands: Record<string, number>;
  eventLoopDelayP99Ms: number;
  failures: string[];
}

export interface Scenario {
  label: string;
  workers: number;
  command: (port: number, firstSeq: number) => LoadCommand;
}

/** Peak RSS (VmHWM) of each service process and of FerretDB, in MB. */
export function peakRss(
  servicePids: readonly number[],
  databasePid: number | undefined,
): Record<string, number> {
  const peaks: Record<string, number> = {};
  for (const pid of servicePids) peaks[`service ${pid}`] = Math.round(memoryMb(pid).peak);
  if (databasePid) peaks.ferretdb = Math.round(memoryMb(databasePid).peak);
  return peaks;
}

export function figures(
  result: LoadResult,
  arrivals: Arrival[],
  cpu: { service: number; database: number; sink: number },
  peakRssMb: Record<string, number>,
  stats: ProcessStats[],
  /** delivered before the measurement: their commands are in the workers' counts too */
  warmedWith = 0,
): RunFigures {
  const acknowledged = result.records.filter((r) => r[3] === 250);
  const firstArrival = new Map<number, number>();
  for (const [seq, at] of arrivals) if (!firstArrival.has(seq)) firstArrival.set(seq, at);
  const delivered = acknowledged.filter((r) => firstArrival.has(r[0]));
  const lastReply = Math.max(...result.records.map((r) => r[2]));
  const lastArrival = Math.max(0, ...arrivals.map((a) => a[1]));
  const { byName: commands, total: totalCommands } = sumCommands(stats);
  const per1000 = (seconds: number) =>
    delivered.length ? Math.round((seconds / delivered.length) * 1000 * 100) / 100 : Number.NaN;
  return {
    sent: result.records.length,
    acknowledged: acknowledged.length,
    refused: result.records.length - acknowledged.length,
    delivered: delivered.length,
    lost: acknowledged.length - delivered.length,
    duplicated: arrivals.length - firstArrival.size,
    acceptedPerSecond: Math.round((acknowledged.length / (lastReply - result.startedAt)) * 1000 * 10) / 10,
    deliveredPerSecond: delivered.length
      ? Math.round((delivered.length / (lastArrival - result.startedAt)) * 1000 * 10) / 10
      : 0,
    replyLatencyMs: latencies(acknowledged.map((r) => r[2] - r[1])),
    webhookLatencyMs: latencies(delivered.map((r) => firstArrival.get(r[0])! - r[1])),
    webhookLatencyByClassMs: byClass(delivered.map((r) => [r[0], firstArrival.get(r[0])! - r[1]])),
    replyLatencyByClassMs: byClass(acknowledged.map((r) => [r[0], r[2] - r[1]])),
    serviceCpuPer1000: per1000(cpu.service),
    databaseCpuPer1000: per1000(cpu.database),
    sinkCpuPer1000: per1000(cpu.sink),
    peakRssMb,
    databaseCommandsPerDelivered: delivered.length
      ? Math.round((totalCommands / (delivered.length + warmedWith)) * 100) / 100
      : Number.NaN,
    commands,
    eventLoopDelayP99Ms: Math.max(0, ...stats.map((s) => s.eventLoopDelayMs.p99)),
    failures: result.failures.slice(0, 5),
  };
}

/** Database commands the service's workers sent, by name and in all. */
export function sumCommands(stats: readonly ProcessStats[]): {
  byName: Record<string, number>;
  total: number;
} {
  const byName: Record<string, number> = {};
  for (const one of stats)
    for (const [name, count] of Object.entries(one.commands)) byName[name] = (byName[name] ?? 0) + count;
  return { byName, total: Object.values(byName).reduce((a, b) => a + b, 0) };
}

export function median(values: number[]): { median: number; min: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)]!, min: sorted[0]!, max: sorted.at(-1)! };
}

/** The machine's load (1, 5, 15 minutes), as `uptime` shows it: the machine is shared. */
export function loadAverage(): string {
  return os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
}
