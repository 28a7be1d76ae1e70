// CPU time and memory of processes, from /proc (Linux): what each part of a run cost.
import { readdirSync, readFileSync } from 'node:fs';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/** A `stat` file's name (between the parentheses) and utime + stime in seconds. */
function readStat(file: string): { name: string; seconds: number } {
  const stat = readFileSync(file, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return {
    name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')),
    seconds: (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND,
  };
}

/** utime + stime of every thread of the process, in seconds; 0 once it is gone. */
export function cpuSeconds(pid: number): number {
  try {
    return readStat(`/proc/${pid}/stat`).seconds;
  } catch {
    return 0;
  }
}

/**
 * CPU seconds of each thread of the process by its name (Node: MainThread, WorkerThread for a
 * worker_threads thread, V8Worker for V8's helpers, libuv-worker); empty once it is gone.
 */
export function cpuSecondsByThread(pid: number): Map<string, number> {
  const byName = new Map<string, number>();
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return byName;
  }
  for (const task of tasks) {
    try {
      const { name, seconds } = readStat(`/proc/${pid}/task/${task}/stat`);
      byName.set(name, (byName.get(name) ?? 0) + seconds);
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return byName;
}

/** VmRSS (now) and VmHWM (peak) in MB. */
export function memoryMb(pid: number): { rss: number; peak: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0);
    return { rss: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024 };
  } catch {
    return { rss: 0, peak: 0 };
  }
}

export function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
  } catch {
    return '';
  }
}

export function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (parent === pid) children.push(Number(entry));
    } catch {}
  }
  return children;
}

/** Every PostgreSQL process on the machine (the server FerretDB stores into). */
export function postgresPids(): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number)
    .filter((pid) => /^postgres\b|\/postgres\b/.test(commandLine(pid)));
}

export function sumCpu(pids: readonly number[]): number {
  return pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0);
}
