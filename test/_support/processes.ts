// Processes as the operating system sees them (Linux /proc): whether one is still there, its
// resident memory, and whether it is stopped, for tests that watch processes from outside.
import { readdirSync, readFileSync } from 'node:fs';

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

/**
 * Stops a process with SIGSTOP and resolves once every one of its threads is stopped. The signal
 * stops each thread as it next runs: on a loaded machine a thread of a server could still answer
 * a request sent right after `kill` returned.
 */
export async function stopProcess(pid: number, timeoutMs = 5000): Promise<void> {
  process.kill(pid, 'SIGSTOP');
  const deadline = Date.now() + timeoutMs;
  const state = (task: string) => readFileSync(`/proc/${pid}/task/${task}/stat`, 'utf8').split(') ')[1]?.[0];
  while (!readdirSync(`/proc/${pid}/task`).every((task) => state(task) === 'T')) {
    if (Date.now() > deadline) throw new Error(`process ${pid} not stopped within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
