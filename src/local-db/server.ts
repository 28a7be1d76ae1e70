// Starts a throwaway or development MongoDB-compatible server when no MONGODB_URI is given:
// mongod if it is on PATH, else FerretDB (PATH or ~/go/bin) over SQLite, else
// mongodb-memory-server (which fetches a real mongod on machines with internet).
// Used by `npm start`'s development default, the test runner and harness, and the benchmark: one
// place for all. Not on a message's path: the service itself only ever gets a URI.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { answers, freePort, listensOn } from '../util/ports.ts';
import { watchSqliteIds } from './sqlite-id-indexes.ts';

export interface LocalServer {
  uri: string;
  kind: 'mongod' | 'ferretdb' | 'mongodb-memory-server';
  /** the server process, for fault drills (SIGSTOP/SIGCONT); absent for the memory server */
  pid?: () => number | undefined;
  /** kills the process and starts it again on the same port and storage (fault drills) */
  restart?: () => Promise<void>;
  stop(): Promise<void>;
}

export interface LocalServerOptions {
  /** folder for the server's files; created if missing */
  dataDir: string;
  /** port to listen on; 0 (default) picks a free one */
  port?: number;
  /**
   * when neither mongod nor ferretdb is installed but Go is, build FerretDB first (about a minute)
   * with this bash script, which installs it into ~/go/bin (the repository's
   * scripts/install-ferretdb.sh); default: no build
   */
  buildFerretDb?: string;
  /**
   * FerretDB's storage: 'sqlite' (files under dataDir) or 'auto', which uses a throwaway database
   * and role on the PostgreSQL at FERRETDB_POSTGRESQL_URL or 127.0.0.1:5432 when one answers
   * (SQLite answers SQLITE_BUSY under concurrent writers), else SQLite. Default 'sqlite'.
   */
  ferretBackend?: 'sqlite' | 'auto';
}

/**
 * FerretDB 1.24 over PostgreSQL deadlocks when its pool is full: an update or findAndModify holds
 * its query's connection while it waits for a second one to write, so once as many of them as the
 * pool has connections meet (the backlog after a SIGSTOP or a restart), none ever proceeds and
 * FerretDB serves nobody, fresh clients included. Its role may open fewer connections than its pool
 * may ask for, so the pool never fills: a command that finds no connection gets PostgreSQL's refusal
 * at once (an error, answered 451 or retried) instead of waiting forever. The limit is well above
 * what a burst of our tests needs (50 concurrent claimants), and idle connections go back after a
 * minute (FerretDB sets pool_max_conn_idle_time to 1m whenever the URL has it), so that another
 * server on the same PostgreSQL (max_connections 100) gets its turn.
 */
const FERRETDB_PG_CONNECTIONS = 80;
const FERRETDB_POOL_MAX_CONNS = FERRETDB_PG_CONNECTIONS + 10;

/**
 * FerretDB 1.24 sends a lookup by id as `_jsonb->'_id' @> $1`, which the btree index it creates
 * cannot serve: every `{_id: X}` (and every fenced write, which starts with one) scans the table.
 * In a database of our own, an event trigger gives every table FerretDB creates, every partition
 * included, a GIN index on exactly that expression (docs/decisions/0022-id-index-for-our-ferretdb.md),
 * and custom plans make statements FerretDB prepared before the index existed use it too. Without
 * GIN's pending list (`fastupdate = off`): a lookup reads the whole list, and on a table of many
 * inserts and deletes (`messages` in a drain) the list made the planner scan the table instead, 17-28
 * ms a lookup. FerretDB does not know the index is there; it goes with its table.
 */
const ID_INDEXES = [
  `CREATE FUNCTION mailroute_index_id() RETURNS event_trigger LANGUAGE plpgsql AS $$
   DECLARE created record;
   BEGIN
     FOR created IN SELECT objid, object_identity FROM pg_event_trigger_ddl_commands()
       WHERE command_tag = 'CREATE TABLE' AND object_type = 'table'
     LOOP
       IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = created.objid AND attname = '_jsonb') THEN
         EXECUTE format('CREATE INDEX %I ON %s USING gin ((_jsonb->''_id'') jsonb_path_ops) WITH (fastupdate = off)',
           'mailroute_id_' || created.objid, created.object_identity);
       END IF;
     END LOOP;
   END $$`,
  `CREATE EVENT TRIGGER mailroute_index_id ON ddl_command_end WHEN TAG IN ('CREATE TABLE')
   EXECUTE FUNCTION mailroute_index_id()`,
];

/** A PostgreSQL database and role of our own for FerretDB, or undefined without a PostgreSQL to use. */
function createPostgresDatabase(): { url: string; drop(): void } | undefined {
  const base = process.env.FERRETDB_POSTGRESQL_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  if (!findExecutable('psql')) return undefined;
  const name = `ferretdb_${process.pid}_${Date.now().toString(36)}`;
  const password = randomBytes(16).toString('hex');
  // psql refuses the query parameters meant for FerretDB's pool (pool_max_conns, say)
  const admin = new URL(base);
  admin.search = '';
  // statements in one session, each its own transaction (CREATE/DROP DATABASE refuse a block)
  const psqlIn = (database: string, ...statements: string[]) =>
    spawnSync(
      'psql',
      [database, '-v', 'ON_ERROR_STOP=1', '-qtA', ...statements.flatMap((sql) => ['-c', sql])],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
        // DROP DATABASE ... WITH (FORCE) can wait several seconds for busy backends on a loaded machine
        timeout: 30_000,
      },
    ).status === 0;
  const psql = (...statements: string[]) => psqlIn(admin.href, ...statements);
  let dropped = false;
  const drop = () => {
    if (dropped) return;
    dropped = true;
    process.off('exit', drop);
    // the role only once its database is gone: PostgreSQL keeps a role that owns one
    psql(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`, `DROP ROLE IF EXISTS ${name}`);
  };
  // a non-superuser role: PostgreSQL exempts superusers from connection limits
  const role = `LOGIN NOSUPERUSER PASSWORD '${password}' CONNECTION LIMIT ${FERRETDB_PG_CONNECTIONS}`;
  const inDatabase = new URL(admin.href);
  inDatabase.pathname = `/${name}`;
  const created =
    psql(
      `CREATE ROLE ${name} ${role}`,
      `CREATE DATABASE ${name} OWNER ${name}`,
      `ALTER DATABASE ${name} SET plan_cache_mode = force_custom_plan`,
    ) && psqlIn(inDatabase.href, ...ID_INDEXES);
  if (!created) {
    drop();
    return undefined;
  }
  // a throwaway database goes with our process, however it ends short of SIGKILL
  process.once('exit', drop);
  const url = new URL(base);
  url.username = name;
  url.password = password;
  url.pathname = `/${name}`;
  url.searchParams.set('pool_max_conns', String(FERRETDB_POOL_MAX_CONNS));
  url.searchParams.set('pool_max_conn_idle_time', '1m');
  return { url: url.href, drop };
}

function buildFerretDb(script: string): string | undefined {
  process.stderr.write(`No mongod or ferretdb found: building FerretDB with Go (${script})...\n`);
  const result = spawnSync('bash', [script], { stdio: ['ignore', 'inherit', 'inherit'] });
  return result.status === 0 ? findExecutable('ferretdb', [path.join(os.homedir(), 'go', 'bin')]) : undefined;
}

const NO_SERVER_ADVICE =
  'No MongoDB-compatible server could be started. Set MONGODB_URI (or --mongodb-uri) to a MongoDB 7+ ' +
  'server, or install mongod, or build FerretDB with `bash scripts/install-ferretdb.sh`.';

/**
 * A server that exited while it started. On a port found free a moment before, that is most often
 * another listener that took the port first: the server is started again on another.
 */
class ExitedWhileStarting extends Error {}
const START_TRIES = 3;

/** Runs `start` on `given`, or on a free port, and on another should the server exit while starting there. */
async function onSomePort<T>(given: number | undefined, start: (port: number) => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    const port = given || (await freePort());
    try {
      return await start(port);
    } catch (err) {
      if (given || tries >= START_TRIES || !(err instanceof ExitedWhileStarting)) throw err;
    }
  }
}

/** No development database could be started: the message says why and what to do instead. */
export class NoServerError extends Error {
  readonly code = 'no_database_server';

  constructor(cause: string) {
    super(`${NO_SERVER_ADVICE} (${cause})`);
    this.name = 'NoServerError';
  }
}

export function findExecutable(name: string, extraDirs: string[] = []): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter), ...extraDirs];
  for (const dir of dirs) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

/**
 * Go's collector target for the FerretDB we start. FerretDB converts every document it reads or
 * writes between BSON, its own types and SQL, and at Go's default (GOGC=100) its collector took
 * about a fifth of its CPU per message, for less memory (docs/decisions/0013-ferretdb-gogc-400.md).
 */
const FERRETDB_GOGC = '400';

/**
 * Go's processors for the FerretDB we start over SQLite: half the cores, at least one (the service
 * takes the other half, as WORKERS does). SQLite runs inside FerretDB's process and writes one
 * transaction at a time, so more processors add little but Go's hand-offs of goroutines between
 * threads, each a wake-up (docs/decisions/0014-ferretdb-gomaxprocs.md). Over
 * PostgreSQL the SQL runs in PostgreSQL's processes and FerretDB keeps Go's default.
 */
function ferretDbProcessors(): string {
  return String(Math.max(1, Math.floor(os.availableParallelism() / 2)));
}

/** The FerretDB we start: our GOGC (and over SQLite, GOMAXPROCS), unless the operator set their own. */
export function ferretDbEnvironment(backend: 'sqlite' | 'postgresql'): NodeJS.ProcessEnv {
  return {
    ...process.env,
    GOGC: process.env.GOGC ?? FERRETDB_GOGC,
    ...(backend === 'sqlite' ? { GOMAXPROCS: process.env.GOMAXPROCS ?? ferretDbProcessors() } : {}),
  };
}

/** Starts the server process and waits until it answers on `port`. */
async function launch(
  kind: string,
  file: string,
  args: string[],
  port: number,
  env: NodeJS.ProcessEnv,
): Promise<ChildProcess> {
  const child: ChildProcess = spawn(file, args, { stdio: ['ignore', 'ignore', 'pipe'], env });
  // never leave a server behind when our process exits without stopping it,
  // and never keep our process alive just because the server runs
  child.unref();
  (child.stderr as unknown as { unref?: () => void } | null)?.unref?.();
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);
  child.once('exit', () => process.off('exit', killOnExit));
  let stderrTail = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderrTail = (stderrTail + chunk.toString()).slice(-2000);
  });
  const deadline = Date.now() + 20_000;
  // it answers, and it is the one that answers: another listener may have taken the port first
  while (!(await answers(port)) || listensOn(child.pid ?? 0, port) === false) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new ExitedWhileStarting(`${kind} exited during startup: ${stderrTail.trim()}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${kind} did not answer on port ${port} within 20s: ${stderrTail.trim()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return child;
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

async function startProcess(
  kind: 'mongod' | 'ferretdb',
  file: string,
  args: string[],
  port: number,
  env: NodeJS.ProcessEnv = process.env,
): Promise<LocalServer> {
  let child = await launch(kind, file, args, port, env);
  let stopped: Promise<void> | undefined;
  return {
    uri: `mongodb://127.0.0.1:${port}/`,
    kind,
    pid: () => child.pid,
    async restart() {
      // the same port and storage: what a database that crashed and came back looks like
      if (!exited(child)) {
        const gone = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGKILL');
        await gone;
      }
      child = await launch(kind, file, args, port, env);
    },
    stop() {
      stopped ??= new Promise<void>((resolve) => {
        if (exited(child)) return resolve();
        // a referenced timer: the child itself is unref'd, and stopping must finish before we exit
        const force = setTimeout(() => child.kill('SIGKILL'), 5000);
        child.once('exit', () => {
          clearTimeout(force);
          resolve();
        });
        child.kill('SIGTERM');
      });
      return stopped;
    },
  };
}

export async function startLocalServer(options: LocalServerOptions): Promise<LocalServer> {
  const dataDir = path.resolve(options.dataDir);

  const mongod = findExecutable('mongod');
  if (mongod) {
    const dbPath = path.join(dataDir, 'mongod');
    mkdirSync(dbPath, { recursive: true });
    return onSomePort(options.port, (port) =>
      startProcess(
        'mongod',
        mongod,
        ['--dbpath', dbPath, '--port', String(port), '--bind_ip', '127.0.0.1', '--quiet'],
        port,
      ),
    );
  }

  let ferretdb = findExecutable('ferretdb', [path.join(os.homedir(), 'go', 'bin')]);
  if (!ferretdb && options.buildFerretDb && findExecutable('go', ['/usr/local/go/bin'])) {
    ferretdb = buildFerretDb(options.buildFerretDb);
  }
  if (ferretdb) {
    const dir = path.join(dataDir, 'ferretdb');
    mkdirSync(dir, { recursive: true });
    const postgres = options.ferretBackend === 'auto' ? createPostgresDatabase() : undefined;
    const storage = postgres
      ? ['--handler=postgresql', `--postgresql-url=${postgres.url}`]
      : ['--handler=sqlite', `--sqlite-url=file:${dir}/`];
    const server = await onSomePort(options.port, (port) =>
      startProcess(
        'ferretdb',
        ferretdb,
        [
          ...storage,
          `--listen-addr=127.0.0.1:${port}`,
          '--debug-addr=127.0.0.1:0',
          `--state-dir=${dir}`,
          '--telemetry=disable',
          '--log-level=error',
        ],
        port,
        ferretDbEnvironment(postgres ? 'postgresql' : 'sqlite'),
      ),
    );
    if (!postgres) {
      const indexes = watchSqliteIds(dir);
      return {
        ...server,
        async stop() {
          indexes.stop();
          await server.stop();
        },
      };
    }
    return {
      ...server,
      async stop() {
        await server.stop();
        postgres.drop();
      },
    };
  }

  try {
    const { MongoMemoryServer } = await import('mongodb-memory-server-core');
    const dbPath = path.join(dataDir, 'memory-server');
    mkdirSync(dbPath, { recursive: true });
    const server = await MongoMemoryServer.create({
      instance: { port: options.port || (await freePort()), dbPath, storageEngine: 'wiredTiger' },
    });
    return {
      uri: server.getUri(),
      kind: 'mongodb-memory-server',
      async stop() {
        await server.stop({ doCleanup: false });
      },
    };
  } catch (err) {
    throw new NoServerError(`mongodb-memory-server: ${(err as Error).message.split('\n')[0]}`);
  }
}
