// Processes as the operating system sees them (Linux /proc): whether one is still there, and its
// resident memory, for tests that watch a service's workers from outside.
import { readFileSync } from 'node:fs';

/** Whether a process with this id exists (one that exited and was reaped does not). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // it exists, but is not ours to signal
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Its resident memory now (VmRSS), MB; throws when there is none to read (it has exited). */
export function rssMb(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!match) throw new Error(`no VmRSS for ${pid}`);
  return Number(match[1]) / 1024;
}
