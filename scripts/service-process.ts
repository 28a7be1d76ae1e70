// Runs the real service (workers/primary.ts, what `npm start` runs) as a child process on random
// ports, and reads its ports from the ready line it logs: for the process tests and the benchmark.
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const PRIMARY = fileURLToPath(new URL('../workers/primary.ts', import.meta.url));

export interface ServiceProcess {
  child: ChildProcess;
  httpPort: number;
  smtpPort: number;
  baseUrl: string;
  /** everything the service wrote so far */
  output(): string;
  /** SIGTERM (to the primary, which stops its workers) and wait; resolves to the exit code. SIGKILL
   * kills the whole process group at once, as a crash of the machine would. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** pids of the workers, from their log lines */
  workerPids(): number[];
}

export interface StartOptions {
  /** `npm start`, as README runs it (npm's process is then the child); default the primary itself */
  viaNpm?: boolean;
  args?: string[];
  env?: Record<string, string>;
  /** how long to wait for the ready line, ms */
  timeoutMs?: number;
}

const REPOSITORY = fileURLToPath(new URL('..', import.meta.url));

/** `npm start -- <args>` with the npm that runs the tests (else the one on PATH). */
export function npmStartCommand(args: readonly string[]): [string, string[]] {
  const npm = process.env.npm_execpath;
  return npm ? [process.execPath, [npm, 'start', '--', ...args]] : ['npm', ['start', '--', ...args]];
}

export function startService(options: StartOptions = {}): Promise<ServiceProcess> {
  const args = [
    '--http-port',
    '0',
    '--smtp-port',
    '0',
    '--http-host',
    '127.0.0.1',
    '--smtp-host',
    '127.0.0.1',
    ...(options.args ?? []),
  ];
  const [command, commandArgs] = options.viaNpm
    ? npmStartCommand(args)
    : [process.execPath, [PRIMARY, ...args]];
  const child = spawn(command, commandArgs, {
    cwd: REPOSITORY,
    env: { ...process.env, LOG_LEVEL: 'info', WORKERS: '1', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    // its own process group, so that a kill reaches the workers too
    detached: true,
  });
  let out = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  // 'close' comes once the pipes are read to their end: the last lines (`service.stopped`) may
  // still be in them at 'exit', on a busy machine
  const drained = new Promise<void>((resolve) => child.once('close', () => resolve()));

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`service not ready in time:\n${out}`));
    }, options.timeoutMs ?? 30_000);
    const onData = () => {
      for (const line of out.split('\n')) {
        if (!line.includes('"service.ready"')) continue;
        const ready = JSON.parse(line) as { http_port: number; smtp_port: number; worker_pids: number[] };
        clearTimeout(timer);
        child.stdout?.off('data', onData);
        resolve({
          child,
          httpPort: ready.http_port,
          smtpPort: ready.smtp_port,
          baseUrl: `http://127.0.0.1:${ready.http_port}`,
          output: () => out,
          async stop(signal: NodeJS.Signals = 'SIGTERM') {
            if (signal === 'SIGKILL') {
              try {
                process.kill(-child.pid!, 'SIGKILL');
              } catch {
                // already gone
              }
            } else if (child.exitCode === null && child.signalCode === null) child.kill(signal);
            const code = await exited;
            // a process of the group that outlives the primary keeps the pipes open: not for long
            await Promise.race([drained, new Promise((resolve) => setTimeout(resolve, 2000).unref())]);
            return code;
          },
          workerPids() {
            // the first ones from the ready line (their own log lines may come a moment later),
            // replacements from their log lines
            const pids = new Set<number>(ready.worker_pids);
            for (const line of out.split('\n')) {
              const match = /"pid":(\d+),"role":"worker"/.exec(line);
              if (match) pids.add(Number(match[1]));
            }
            return [...pids];
          },
        });
        return;
      }
    };
    child.stdout?.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`service exited with ${code} before it was ready:\n${out}`));
    });
  });
}

/** Runs the service expecting it to exit by itself (bad configuration); resolves code and output. */
export function runToExit(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, [PRIMARY, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  // 'close', not 'exit': the process may be gone before its last output has been read from the pipes
  return new Promise((resolve) =>
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    }),
  );
}
