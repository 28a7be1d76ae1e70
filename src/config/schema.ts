// The one configuration schema: every setting with its env name, flag name, default and check.
// Precedence: defaults < environment < command-line flags. Parsed once at startup, every problem
// listed in one go, the result frozen.
import { isIP } from 'node:net';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { formatDuration, parseDuration, parseSize } from './units.ts';
import { VERSION } from './version.ts';

type Parsed<T> = { ok: true; value: T } | { ok: false; problem: string };

interface Setting<T> {
  env: string;
  flag: string;
  /** shown in README's configuration table; the default itself when it is a valid value */
  defaultText: string;
  description: string;
  /** only where defaultText describes the default instead of being one ("empty (off)") */
  defaultValue?: () => T;
  parse: (text: string) => Parsed<T>;
}

const ok = <T>(value: T): Parsed<T> => ({ ok: true, value });
const bad = <T>(problem: string): Parsed<T> => ({ ok: false, problem });

function text(): Setting<string>['parse'] {
  return (value) => ok(value);
}

function port(value: string): Parsed<number> {
  const n = Number(value);
  return /^\d+$/.test(value) && n <= 65535 ? ok(n) : bad('must be a port number from 0 to 65535');
}

function host(value: string): Parsed<string> {
  return /^[\w.:-]+$/.test(value) && value.length <= 255
    ? ok(value)
    : bad('must be a host name or IP address');
}

function integer(min: number, max: number) {
  return (value: string): Parsed<number> => {
    const n = Number(value);
    return /^\d+$/.test(value) && n >= min && n <= max
      ? ok(n)
      : bad(`must be a whole number from ${min} to ${max}`);
  };
}

function duration(minMs: number, maxMs: number) {
  return (value: string): Parsed<number> => {
    const ms = parseDuration(value);
    if (ms === undefined) return bad('must be a duration such as 500ms, 30s, 5m, 1h or 7d');
    if (ms < minMs || ms > maxMs)
      return bad(`must be between ${formatDuration(minMs)} and ${formatDuration(maxMs)}`);
    return ok(ms);
  };
}

function durationList(maxEntries: number) {
  const one = duration(1, 24 * 3_600_000);
  return (value: string): Parsed<readonly number[]> => {
    const parts = value.split(',').map((part) => part.trim());
    if (parts.length > maxEntries) return bad(`must list at most ${maxEntries} delays`);
    const delays: number[] = [];
    for (const part of parts) {
      const parsed = one(part);
      if (!parsed.ok) return bad(`"${part}" ${parsed.problem} (a comma-separated list such as 1m,5m,15m)`);
      delays.push(parsed.value);
    }
    return ok(Object.freeze(delays));
  };
}

function size(minBytes: number, maxBytes: number) {
  return (value: string): Parsed<number> => {
    const bytes = parseSize(value);
    if (bytes === undefined) return bad('must be a size such as 512KB or 25MB');
    if (bytes < minBytes || bytes > maxBytes) return bad(`must be between ${minBytes} and ${maxBytes} bytes`);
    return ok(bytes);
  };
}

/** A percentage such as `10%` (or `10`), as a fraction. */
function percent(maxPercent: number) {
  return (value: string): Parsed<number> => {
    const match = /^(\d{1,3}(?:\.\d+)?)\s*%?$/.exec(value.trim());
    const number = match ? Number(match[1]) : Number.NaN;
    if (!(number >= 0 && number <= maxPercent)) return bad(`must be a percentage from 0% to ${maxPercent}%`);
    return ok(number / 100);
  };
}

/** The backend profiles STORAGE_PROFILE can name: what each lays out differently is src/store/profile.ts */
export const STORAGE_PROFILES = ['mongodb', 'ferretdb', 'ferretdb-postgresql'] as const;
export type StorageProfileName = (typeof STORAGE_PROFILES)[number];

function oneOf<T extends string>(choices: readonly T[]) {
  return (value: string): Parsed<T> =>
    (choices as readonly string[]).includes(value)
      ? ok(value as T)
      : bad(`must be one of ${choices.join(', ')}`);
}

function boolean(value: string): Parsed<boolean> {
  if (/^(true|1|yes)$/i.test(value)) return ok(true);
  if (/^(false|0|no)$/i.test(value)) return ok(false);
  return bad('must be true or false');
}

/** Comma-separated IP addresses or CIDR ranges (IPv4 or IPv6). */
function addressList(value: string): Parsed<readonly string[]> {
  const entries = value
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  for (const entry of entries) {
    const [address = '', prefix, ...rest] = entry.split('/');
    const family = isIP(address);
    const bits = family === 4 ? 32 : 128;
    const prefixOk = prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= bits);
    if (family === 0 || !prefixOk || rest.length > 0)
      return bad(
        `"${entry}" is not an IP address or CIDR range (a comma-separated list such as 10.0.0.1,fd00::/8)`,
      );
  }
  return ok(Object.freeze(entries));
}

function dnsServerList(value: string): Parsed<readonly string[]> {
  const servers = value
    .split(',')
    .map((part) => part.trim())
    .filter((part) => part !== '');
  if (servers.length > 8) return bad('must list at most 8 servers');
  for (const server of servers) {
    const address = server.replace(/^\[([^\]]+)\](:\d+)?$/, '$1').replace(/^([\d.]+):\d+$/, '$1');
    if (isIP(address) === 0) return bad(`"${server}" is not an IP address (with an optional :port)`);
  }
  return ok(Object.freeze(servers));
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/**
 * Half the cores: a worker's event loop is only part of the CPU a message costs. Its parse threads
 * (its share of the cores less one) and, on one machine, the database take the rest, and every
 * worker more splits the batched writes into smaller ones
 * (docs/decisions/0007-one-worker-per-two-cores.md).
 */
export function defaultWorkers(): number {
  return Math.max(1, Math.floor(os.availableParallelism() / 2));
}

export const SETTINGS = Object.freeze({
  apiKey: {
    env: 'SERVICE_API_KEY',
    flag: 'api-key',
    defaultText: 'empty (no authentication; a warning is logged)',
    description:
      'API key required in the X-API-Key header of every API request but /health and /openapi.yaml',
    defaultValue: () => '',
    parse: text(),
  } satisfies Setting<string>,
  mongodbUri: {
    env: 'MONGODB_URI',
    flag: 'mongodb-uri',
    defaultText: 'development default: 127.0.0.1:27017 if it answers, else a local server under DATA_DIR',
    description: 'MongoDB connection string (MongoDB 7+ replica set in production)',
    defaultValue: () => '',
    parse: (value) => (/^mongodb(\+srv)?:\/\//.test(value) ? ok(value) : bad('must start with mongodb://')),
  } satisfies Setting<string>,
  storageProfile: {
    env: 'STORAGE_PROFILE',
    flag: 'storage-profile',
    defaultText: 'auto',
    description:
      'How the store lays out its data: auto (detected from the server), mongodb, ferretdb, or ferretdb-postgresql for a FerretDB whose storage is PostgreSQL (README, "Backend profiles")',
    defaultValue: () => 'auto' as const,
    parse: oneOf(['auto', ...STORAGE_PROFILES] as const),
  } satisfies Setting<'auto' | StorageProfileName>,
  httpHost: {
    env: 'HTTP_HOST',
    flag: 'http-host',
    defaultText: '0.0.0.0',
    description: 'Address the REST API listens on',
    parse: host,
  } satisfies Setting<string>,
  httpPort: {
    env: 'HTTP_PORT',
    flag: 'http-port',
    defaultText: '8080',
    description: 'Port of the REST API (0 picks a free one)',
    parse: port,
  } satisfies Setting<number>,
  trustProxy: {
    env: 'TRUST_PROXY',
    flag: 'trust-proxy',
    defaultText: 'empty (the TCP peer is the client)',
    description:
      'Addresses or CIDR ranges of the proxies in front of the API: from them, the client address is taken from X-Forwarded-For (it counts failed authentications)',
    defaultValue: (): readonly string[] => Object.freeze([]),
    parse: addressList,
  } satisfies Setting<readonly string[]>,
  smtpHost: {
    env: 'SMTP_HOST',
    flag: 'smtp-host',
    defaultText: '0.0.0.0',
    description: 'Address the SMTP listener binds',
    parse: host,
  } satisfies Setting<string>,
  smtpPort: {
    env: 'SMTP_PORT',
    flag: 'smtp-port',
    defaultText: '2525',
    description: 'Port of the SMTP listener (0 picks a free one)',
    parse: port,
  } satisfies Setting<number>,
  workers: {
    env: 'WORKERS',
    flag: 'workers',
    defaultText: 'half the cores, at least 1',
    description:
      "Number of cluster worker processes (each with parse threads of its own: its share of the cores less one, at least 1; on Linux they run 5 nicer than the worker's event loop, so SMTP replies go first on busy cores)",
    defaultValue: () => defaultWorkers(),
    parse: integer(1, 256),
  } satisfies Setting<number>,
  standbyWorker: {
    env: 'STANDBY_WORKER',
    flag: 'standby-worker',
    defaultText: 'true',
    description: 'Keep one started, idle worker that takes over the moment a worker dies',
    parse: boolean,
  } satisfies Setting<boolean>,
  retryDelays: {
    env: 'RETRY_DELAYS',
    flag: 'retry-delays',
    defaultText: '1m,5m,15m',
    description: 'Delays before each webhook retry; the list length is the number of retries',
    parse: durationList(20),
  } satisfies Setting<readonly number[]>,
  retryJitter: {
    env: 'RETRY_JITTER',
    flag: 'retry-jitter',
    defaultText: '10%',
    description:
      "How far each retry's delay moves at random, either way (a Retry-After only later), so that deliveries failed together do not come back together; 0% keeps the schedule exact",
    parse: percent(50),
  } satisfies Setting<number>,
  webhookTimeout: {
    env: 'WEBHOOK_TIMEOUT',
    flag: 'webhook-timeout',
    defaultText: '30s',
    description:
      'Deadline for one whole webhook exchange, counted from when the request is sent (not while it waits for its endpoint)',
    parse: duration(10, 10 * 60_000),
  } satisfies Setting<number>,
  webhookMaxInFlight: {
    env: 'WEBHOOK_MAX_IN_FLIGHT',
    flag: 'webhook-max-in-flight',
    defaultText: '64',
    description:
      'Webhook requests sent at once to one endpoint (one webhook URL) by one worker; more wait unsent, without spending an attempt',
    parse: integer(1, 10_000),
  } satisfies Setting<number>,
  webhookRetryAfterMax: {
    env: 'WEBHOOK_RETRY_AFTER_MAX',
    flag: 'webhook-retry-after-max',
    defaultText: '1h',
    description:
      "Longest delay a receiver's Retry-After (on 429 and 503) may set before the next attempt; 0s ignores Retry-After",
    parse: duration(0, 7 * 24 * 3_600_000),
  } satisfies Setting<number>,
  endpointPauseAfter: {
    env: 'ENDPOINT_PAUSE_AFTER',
    flag: 'endpoint-pause-after',
    defaultText: '20',
    description:
      'Consecutive failed attempts after which an endpoint is paused (its deliveries wait, one probe at growing intervals); 0 never pauses',
    parse: integer(0, 1_000_000),
  } satisfies Setting<number>,
  endpointProbeInterval: {
    env: 'ENDPOINT_PROBE_INTERVAL',
    flag: 'endpoint-probe-interval',
    defaultText: '30s',
    description: "A paused endpoint's first probe comes after this; each failed probe doubles it, up to 1h",
    parse: duration(10, 3_600_000),
  } satisfies Setting<number>,
  maxMessageSize: {
    env: 'MAX_MESSAGE_SIZE',
    flag: 'max-message-size',
    defaultText: '25MB',
    description: 'Largest message accepted over SMTP (KB and MB are multiples of 1024)',
    parse: size(1024, 1024 ** 3),
  } satisfies Setting<number>,
  memoryBudget: {
    env: 'MEMORY_BUDGET',
    flag: 'memory-budget',
    defaultText: '64MB',
    description:
      'Bytes of messages one worker has in flight (being received, waiting for a parse, being parsed; its memory peaks at about three times this above its resting size); a sender that would overflow it is answered 452 4.3.1 and tries again later. Raised to MAX_MESSAGE_SIZE when smaller',
    parse: size(1024 * 1024, 64 * 1024 ** 3),
  } satisfies Setting<number>,
  smtpTlsCert: {
    env: 'SMTP_TLS_CERT',
    flag: 'smtp-tls-cert',
    defaultText: 'empty (no STARTTLS)',
    description: 'PEM certificate file; with SMTP_TLS_KEY enables STARTTLS',
    defaultValue: () => '',
    parse: text(),
  } satisfies Setting<string>,
  smtpTlsKey: {
    env: 'SMTP_TLS_KEY',
    flag: 'smtp-tls-key',
    defaultText: 'empty (no STARTTLS)',
    description: 'PEM private key file for STARTTLS',
    defaultValue: () => '',
    parse: text(),
  } satisfies Setting<string>,
  smtpMaxConnections: {
    env: 'SMTP_MAX_CONNECTIONS',
    flag: 'smtp-max-connections',
    defaultText: '1000',
    description: 'SMTP connections per worker; beyond it a new connection is answered 421',
    parse: integer(1, 100_000),
  } satisfies Setting<number>,
  smtpIdleTimeout: {
    env: 'SMTP_IDLE_TIMEOUT',
    flag: 'smtp-idle-timeout',
    defaultText: '60s',
    description: 'An SMTP client silent this long is disconnected',
    parse: duration(100, 60 * 60_000),
  } satisfies Setting<number>,
  smtpSessionLimit: {
    env: 'SMTP_SESSION_LIMIT',
    flag: 'smtp-session-limit',
    defaultText: '10m',
    description: 'The longest one SMTP session may last, however active; then 421',
    parse: duration(100, 24 * 3_600_000),
  } satisfies Setting<number>,
  recordRetention: {
    env: 'RECORD_RETENTION',
    flag: 'record-retention',
    defaultText: '30d',
    description:
      'How long records of delivered and dead-lettered messages are kept (whole UTC days of history are dropped once past it)',
    parse: duration(3_600_000, 3650 * 86_400_000),
  } satisfies Setting<number>,
  rawRetention: {
    env: 'RAW_RETENTION',
    flag: 'raw-retention',
    defaultText: '7d',
    description:
      'How long the raw bytes of messages are kept; after it the record stays and GET /messages/{id}/raw answers 410',
    parse: duration(3_600_000, 3650 * 86_400_000),
  } satisfies Setting<number>,
  leaseTime: {
    env: 'LEASE_TIME',
    flag: 'lease-time',
    defaultText: '30s',
    description: 'How long a process owns a message before another may take it over',
    parse: duration(500, 60 * 60_000),
  } satisfies Setting<number>,
  maxActors: {
    env: 'MAX_ACTORS',
    flag: 'max-actors',
    defaultText: '1000',
    description:
      'Messages one worker drives at once; a message accepted beyond it waits, stored, until its lease expires and the scheduler takes it over',
    parse: integer(1, 1_000_000),
  } satisfies Setting<number>,
  dataDir: {
    env: 'DATA_DIR',
    flag: 'data-dir',
    defaultText: './data',
    description: 'Where the development-default database keeps its files',
    parse: text(),
  } satisfies Setting<string>,
  logLevel: {
    env: 'LOG_LEVEL',
    flag: 'log-level',
    defaultText: 'info',
    description: `Log level: ${LOG_LEVELS.join(', ')}`,
    parse: oneOf(LOG_LEVELS),
  } satisfies Setting<(typeof LOG_LEVELS)[number]>,
  httpRequestLog: {
    env: 'HTTP_REQUEST_LOG',
    flag: 'http-request-log',
    defaultText: 'true',
    description: 'Log one line per API request (method, route pattern, status, duration) at info',
    parse: boolean,
  } satisfies Setting<boolean>,
  webhookDenyPrivate: {
    env: 'WEBHOOK_DENY_PRIVATE',
    flag: 'webhook-deny-private',
    defaultText: 'false',
    description: 'Refuse webhook destinations on loopback, private and link-local addresses',
    parse: boolean,
  } satisfies Setting<boolean>,
  publicUrl: {
    env: 'PUBLIC_URL',
    flag: 'public-url',
    defaultText:
      'empty (http://<HTTP_HOST, 127.0.0.1 for 0.0.0.0>:<the API port>: not reachable from outside)',
    description:
      'How webhook receivers reach this service: the base of the attachment URLs in payloads (http or https, no query)',
    defaultValue: () => '',
    parse: (value) =>
      /^https?:\/\/[^\s?#]+$/.test(value) && value.length <= 2048
        ? ok(value.replace(/\/+$/, ''))
        : bad('must be an absolute http or https URL without query or fragment'),
  } satisfies Setting<string>,
  maxInlineAttachment: {
    env: 'MAX_INLINE_ATTACHMENT',
    flag: 'max-inline-attachment',
    defaultText: '5MB',
    description: 'Largest attachment sent inline (base64) in a payload; a larger one is sent as a signed URL',
    parse: size(0, 1024 ** 3),
  } satisfies Setting<number>,
  maxWebhookBody: {
    env: 'MAX_WEBHOOK_BODY',
    flag: 'max-webhook-body',
    defaultText: '10MB',
    description:
      'Largest webhook body wanted: while a body would be larger, its largest inline attachments are sent as URLs instead',
    parse: size(1024, 1024 ** 3),
  } satisfies Setting<number>,
  attachmentUrlTtl: {
    env: 'ATTACHMENT_URL_TTL',
    flag: 'attachment-url-ttl',
    defaultText: '24h',
    description:
      'How long an attachment URL in a payload stays valid (counted from the attempt that sent it)',
    parse: duration(1000, 30 * 24 * 3_600_000),
  } satisfies Setting<number>,
  dnsServers: {
    env: 'DNS_SERVERS',
    flag: 'dns-servers',
    defaultText: "empty (the system's resolvers)",
    description:
      'DNS servers for sender authentication (SPF, DKIM, DMARC, ARC): comma-separated addresses, each optionally with :port ([v6]:port)',
    defaultValue: (): readonly string[] => Object.freeze([]),
    parse: dnsServerList,
  } satisfies Setting<readonly string[]>,
  authDnsBudget: {
    env: 'AUTH_DNS_BUDGET',
    flag: 'auth-dns-budget',
    defaultText: '10s',
    description:
      'Time all DNS lookups of one message may take together; past it the unfinished checks are temperror',
    parse: duration(100, 60_000),
  } satisfies Setting<number>,
  statsFile: {
    env: 'STATS_FILE',
    flag: 'stats-file',
    defaultText: 'empty (off)',
    description:
      'Diagnostics for benchmarks: each worker counts its database commands and measures event-loop delay, and appends them to this file as a JSON line when it stops',
    defaultValue: () => '',
    parse: text(),
  } satisfies Setting<string>,
});

type Settings = typeof SETTINGS;
type ValueOf<Parse> = Parse extends (text: string) => Parsed<infer T> ? T : never;
export type Config = { readonly [K in keyof Settings]: ValueOf<Settings[K]['parse']> };

/** A setting's default: stated once, as README shows it, unless it can only be described there. */
function defaultOf<T>(setting: Setting<T>): T {
  if (setting.defaultValue) return setting.defaultValue();
  const parsed = setting.parse(setting.defaultText);
  if (!parsed.ok) throw new Error(`${setting.env}: the default "${setting.defaultText}" ${parsed.problem}`);
  return parsed.value;
}

export type ConfigResult = { ok: true; config: Config } | { ok: false; problems: string[] };

/** Reads defaults < env < flags. Unknown flags and bad values are all reported together. */
export function loadConfig(argv: readonly string[], env: NodeJS.ProcessEnv): ConfigResult {
  const problems: string[] = [];
  const options: Record<string, { type: 'string' }> = {};
  for (const setting of Object.values(SETTINGS)) options[setting.flag] = { type: 'string' };

  let flags: Record<string, string | undefined> = {};
  try {
    flags = parseArgs({ args: [...argv], options, strict: true, allowPositionals: false }).values as Record<
      string,
      string | undefined
    >;
  } catch (err) {
    problems.push((err as Error).message);
  }

  const config: Record<string, unknown> = {};
  for (const [key, setting] of Object.entries(SETTINGS) as [string, Setting<unknown>][]) {
    const fromFlag = flags[setting.flag];
    const fromEnv = env[setting.env];
    // an empty variable is an unset one (compose files and shells leave them empty): the default
    const raw = fromFlag ?? (fromEnv === '' ? undefined : fromEnv);
    if (raw === undefined) {
      config[key] = defaultOf(setting);
      continue;
    }
    const parsed = setting.parse(raw);
    const source = fromFlag !== undefined ? `--${setting.flag}` : setting.env;
    if (parsed.ok) config[key] = parsed.value;
    else problems.push(`${source}: ${parsed.problem} (got "${truncate(raw)}")`);
  }
  if (Boolean(config.smtpTlsCert) !== Boolean(config.smtpTlsKey))
    problems.push('SMTP_TLS_CERT and SMTP_TLS_KEY: set both or neither');
  // a budget smaller than the largest message would refuse that message for ever
  if (typeof config.memoryBudget === 'number' && typeof config.maxMessageSize === 'number')
    config.memoryBudget = Math.max(config.memoryBudget, config.maxMessageSize);
  if ((config.rawRetention as number) > (config.recordRetention as number))
    problems.push('RAW_RETENTION: must not be longer than RECORD_RETENTION (raw bytes without their record)');

  if (problems.length > 0) return { ok: false, problems };
  return { ok: true, config: Object.freeze(config) as Config };
}

/**
 * The configuration as the start-up line shows it: the API key and any password in MONGODB_URI
 * replaced by `[redacted]`, durations and sizes as given units.
 */
export function describeConfig(config: Config): Record<string, unknown> {
  const shown: Record<string, unknown> = { ...config };
  if (config.apiKey) shown.apiKey = '[redacted]';
  shown.mongodbUri = config.mongodbUri.replace(/^(mongodb(?:\+srv)?:\/\/[^:/@]*):[^@/]*@/, '$1:[redacted]@');
  shown.retryDelays = config.retryDelays.map(formatDuration);
  for (const key of ['webhookTimeout', 'smtpIdleTimeout', 'smtpSessionLimit', 'leaseTime'] as const)
    shown[key] = formatDuration(config[key]);
  shown.smtpTls = Boolean(config.smtpTlsCert);
  return shown;
}

/** Secrets are never echoed back in full. */
function truncate(value: string): string {
  return value.length > 40 ? `${value.slice(0, 37)}...` : value;
}

/** The Markdown table README carries; a test checks that README holds exactly this. */
export function configTableMarkdown(): string {
  const rows = Object.values(SETTINGS).map(
    (s) => `| \`${s.env}\` | \`--${s.flag}\` | ${s.defaultText} | ${s.description} |`,
  );
  return ['| env | flag | default | meaning |', '|---|---|---|---|', ...rows].join('\n');
}

/** `--help`: every setting on one line (flag, env, default, meaning), then the two info flags. */
export function helpText(): string {
  const rows = Object.values(SETTINGS).map((s) => [
    `--${s.flag} <value>`,
    s.env,
    s.defaultText,
    s.description,
  ]);
  const width = (column: number) => Math.max(...rows.map((row) => row[column]!.length));
  const [flagWidth, envWidth] = [width(0), width(1)];
  const lines = rows.map(
    ([flag, env, defaultText, description]) =>
      `  ${flag!.padEnd(flagWidth)}  ${env!.padEnd(envWidth)}  ${description} (default: ${defaultText})`,
  );
  return [
    `mailroute ${VERSION}: inbound email routing (SMTP in, signed JSON webhooks out)`,
    '',
    'Usage: npm start -- [flags]    (or: node workers/primary.ts [flags])',
    'Every setting is a flag or an environment variable; the flag wins.',
    '',
    ...lines,
    `  ${'--help'.padEnd(flagWidth)}  ${''.padEnd(envWidth)}  Print this and exit`,
    `  ${'--version'.padEnd(flagWidth)}  ${''.padEnd(envWidth)}  Print the version and exit`,
    '',
  ].join('\n');
}

/** `--help` or `--version` anywhere among the flags (not as another flag's value), if given. */
export function infoRequest(argv: readonly string[]): 'help' | 'version' | undefined {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = {
    help: { type: 'boolean', short: 'h' },
    version: { type: 'boolean' },
  };
  for (const setting of Object.values(SETTINGS)) options[setting.flag] = { type: 'string' };
  const { tokens } = parseArgs({
    args: [...argv],
    options,
    strict: false,
    allowPositionals: true,
    tokens: true,
  });
  const names = new Set(tokens.filter((token) => token.kind === 'option').map((token) => token.name));
  if (names.has('help')) return 'help';
  if (names.has('version')) return 'version';
  return undefined;
}

/**
 * For entry files: the config, or every problem on stderr and exit code 2. `--help` and
 * `--version` print to stdout and exit 0.
 */
export function loadConfigOrExit(argv: readonly string[] = process.argv.slice(2), env = process.env): Config {
  const info = infoRequest(argv);
  if (info) {
    process.stdout.write(info === 'help' ? helpText() : `${VERSION}\n`);
    process.exit(0);
  }
  const loaded = loadConfig(argv, env);
  if (loaded.ok) return loaded.config;
  for (const problem of loaded.problems) process.stderr.write(`config: ${problem}\n`);
  process.exit(2);
}
