// The development database's launcher makes sure that what answers on the port is the server it
// started: a port found free can be taken by another listener before the server binds it (tests
// and services start listeners on free ports all the time), and a connection alone cannot tell.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import test from 'ava';
import { ferretDbEnvironment, findExecutable, startLocalServer } from '../../src/local-db/server.ts';
import { freePort, listensOn } from '../../src/util/ports.ts';

async function listener(): Promise<{ server: net.Server; port: number }> {
  const server = net.createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as net.AddressInfo).port };
}

test('listensOn tells the process that holds a listening port from any other', async (t) => {
  const { server, port } = await listener();
  t.teardown(() => server.close());
  const other = spawn('sleep', ['30']);
  t.teardown(() => other.kill('SIGKILL'));
  t.is(listensOn(process.pid, port), true);
  t.is(listensOn(other.pid!, port), false);
  // a port nobody listens on
  server.close();
  await new Promise((resolve) => server.once('close', resolve));
  t.is(listensOn(process.pid, port), false);
});

(process.platform === 'linux' ? test : test.skip)(
  'freePort picks below the range of outgoing connections, where no client socket can take it, and it can be listened on',
  async (t) => {
    const range = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
      .trim()
      .split(/\s+/)
      .map(Number);
    for (let i = 0; i < 20; i++) {
      const port = await freePort();
      t.true(port >= 10_000 && port < range[0]!, `port ${port}`);
      const server = net.createServer();
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, '127.0.0.1', resolve);
      });
      await new Promise((resolve) => server.close(resolve));
    }
  },
);

const ferretdbPresent = findExecutable('ferretdb', [path.join(os.homedir(), 'go', 'bin')]) !== undefined;
if (!ferretdbPresent)
  console.warn(
    'SKIPPED: the launcher tests that start FerretDB (it is not installed: bash scripts/install-ferretdb.sh)',
  );

(ferretdbPresent ? test : test.skip)(
  'a server whose port another listener holds is not taken for started',
  async (t) => {
    const { server, port } = await listener();
    t.teardown(() => server.close());
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-taken-'));
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
    // the port is given: it is not for the launcher to move, so it says what happened
    const error = await t.throwsAsync(startLocalServer({ dataDir, port, ferretBackend: 'sqlite' }));
    t.regex(error?.message ?? '', /exited during startup/);
  },
);

/** The environment a running process was started with (Linux's /proc). */
function environmentOf(pid: number): Map<string, string> {
  const pairs = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter(Boolean);
  return new Map(
    pairs.map((pair) => {
      const at = pair.indexOf('=');
      return [pair.slice(0, at), pair.slice(at + 1)];
    }),
  );
}

/** Sets (or, for undefined, removes) environment variables until the test ends. */
function withEnvironment(t: { teardown(fn: () => void): void }, values: Record<string, string | undefined>) {
  for (const [name, value] of Object.entries(values)) {
    const saved = process.env[name];
    t.teardown(() => {
      if (saved === undefined) delete process.env[name];
      else process.env[name] = saved;
    });
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
}

(ferretdbPresent && process.platform === 'linux' ? test.serial : test.skip)(
  "the FerretDB the launcher starts over SQLite runs with GOGC=400 and half the cores' processors, unless the operator set them",
  async (t) => {
    const started = async () => {
      const dataDir = mkdtempSync(path.join(os.tmpdir(), 'mailroute-gogc-'));
      t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
      const server = await startLocalServer({ dataDir, ferretBackend: 'sqlite' });
      t.teardown(() => server.stop());
      return environmentOf(server.pid!()!);
    };
    withEnvironment(t, { GOGC: undefined, GOMAXPROCS: undefined });
    const ours = await started();
    t.is(ours.get('GOGC'), '400');
    t.is(ours.get('GOMAXPROCS'), String(Math.max(1, Math.floor(os.availableParallelism() / 2))));
    withEnvironment(t, { GOGC: '150', GOMAXPROCS: '3' });
    const operators = await started();
    t.is(operators.get('GOGC'), '150');
    t.is(operators.get('GOMAXPROCS'), '3');
  },
);

test.serial("over PostgreSQL the launched FerretDB keeps Go's processors: only GOGC is ours", (t) => {
  withEnvironment(t, { GOGC: undefined, GOMAXPROCS: undefined });
  const environment = ferretDbEnvironment('postgresql');
  t.is(environment.GOGC, '400');
  t.false('GOMAXPROCS' in environment);
});
