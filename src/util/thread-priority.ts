// A thread's CPU priority. On Linux every thread is a task with a nice value of its own, which
// setpriority(2) takes by thread id; raising one's own niceness needs no privilege. Elsewhere
// (and where /proc is not mounted) a thread keeps its process's priority.
import { readlinkSync } from 'node:fs';
import os from 'node:os';

/** Nice values stop here (the lowest priority). */
const LOWEST = 19;

/** The calling thread's id (Linux), or undefined. */
function ownThreadId(): number | undefined {
  if (process.platform !== 'linux') return undefined;
  try {
    // "<pid>/task/<tid>"
    const tid = Number(readlinkSync('/proc/thread-self').split('/').at(-1));
    return Number.isInteger(tid) && tid > 0 ? tid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Makes the calling thread `by` nicer than it is (capped at the lowest priority). False where the
 * platform has no per-thread priority or the call was refused: the thread then runs as before.
 */
export function lowerOwnPriority(by: number): boolean {
  const tid = ownThreadId();
  if (tid === undefined) return false;
  try {
    os.setPriority(tid, Math.min(LOWEST, os.getPriority(tid) + by));
    return true;
  } catch {
    return false;
  }
}
