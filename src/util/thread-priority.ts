// A thread's CPU priority. On Linux every thread is a task with a nice value of its own, and
// setpriority(2) with `who` 0 sets the calling thread's alone (its man page: BUGS); raising one's
// own niceness needs no privilege. Elsewhere 0 names the whole process, so a thread there keeps
// its process's priority.
import os from 'node:os';

/** Nice values stop here (the lowest priority). */
const LOWEST = 19;

/**
 * Makes the calling thread `by` nicer than it is (capped at the lowest priority). False where the
 * platform has no per-thread priority or the call was refused: the thread then runs as before.
 */
export function lowerOwnPriority(by: number): boolean {
  if (process.platform !== 'linux') return false;
  try {
    // 0: the calling thread (not the process) on Linux
    os.setPriority(0, Math.min(LOWEST, os.getPriority(0) + by));
    return true;
  } catch {
    return false;
  }
}
