// The configuration schema: precedence, units, validation, and README's table.
import { readFileSync } from 'node:fs';
import os from 'node:os';
import test from 'ava';
import { configTableMarkdown, loadConfig, SETTINGS } from '../../src/config/schema.ts';
import { parseDuration, parseSize } from '../../src/config/units.ts';
import { parseThreadsPerWorker } from '../../src/service/worker-service.ts';

test('defaults match the documented ones', (t) => {
  const result = loadConfig([], {});
  if (!result.ok) return t.fail(result.problems.join('; '));
  const { config } = result;
  t.is(config.apiKey, '');
  t.is(config.httpHost, '0.0.0.0');
  t.is(config.httpPort, 8080);
  t.is(config.smtpHost, '0.0.0.0');
  t.is(config.smtpPort, 2525);
  t.deepEqual(config.retryDelays, [60_000, 300_000, 900_000]);
  t.is(config.webhookTimeout, 30_000);
  t.is(config.maxMessageSize, 25 * 1024 * 1024);
  // read from the README's default text itself, as most defaults are
  t.is(config.recordRetention, 30 * 86_400_000);
  t.is(config.rawRetention, 7 * 86_400_000);
  t.is(config.standbyWorker, true);
  t.is(config.logLevel, 'info');
  // half the cores, at least one (on a 2-core machine: one worker with one parse thread per lane)
  t.is(config.workers, Math.max(1, Math.floor(os.availableParallelism() / 2)));
  t.true(Object.isFrozen(config));
});

test("a worker's parse lanes get its share of the cores less the one its event loop takes, at least one", (t) => {
  const cores = os.availableParallelism();
  t.is(parseThreadsPerWorker(1), Math.max(1, cores - 1));
  t.is(parseThreadsPerWorker(cores), 1);
  t.is(parseThreadsPerWorker(cores * 4), 1);
});

test('a flag wins over the environment, which wins over the default', (t) => {
  const env = { HTTP_PORT: '9000', SMTP_PORT: '2600', SERVICE_API_KEY: 'from-env' };
  const result = loadConfig(['--http-port', '9100', '--api-key=from-flag'], env);
  if (!result.ok) return t.fail(result.problems.join('; '));
  t.is(result.config.httpPort, 9100);
  t.is(result.config.smtpPort, 2600);
  t.is(result.config.apiKey, 'from-flag');
});

test('an empty environment variable is as good as unset: the default, for every setting', (t) => {
  const env = Object.fromEntries(Object.values(SETTINGS).map((setting) => [setting.env, '']));
  const empty = loadConfig([], env);
  const unset = loadConfig([], {});
  if (!empty.ok || !unset.ok) return t.fail(JSON.stringify([empty, unset]));
  t.deepEqual(empty.config, unset.config);
  // an empty SERVICE_API_KEY included: no key, no authentication (the warning says so)
  t.is(empty.config.apiKey, '');
});

const durations: Array<[string, number | undefined]> = [
  ['500ms', 500],
  ['30s', 30_000],
  ['1.5m', 90_000],
  ['2h', 7_200_000],
  ['30', undefined],
  ['s', undefined],
  ['-1s', undefined],
  ['7d', 7 * 86_400_000],
  ['1w', undefined],
];
for (const [text, ms] of durations) test(`duration ${text}`, (t) => t.is(parseDuration(text), ms));

test('RAW_RETENTION longer than RECORD_RETENTION is refused: raw bytes without their record', (t) => {
  const result = loadConfig([], { RAW_RETENTION: '40d', RECORD_RETENTION: '30d' });
  t.false(result.ok);
  if (!result.ok)
    t.regex(result.problems.join('\n'), /RAW_RETENTION: must not be longer than RECORD_RETENTION/);
  const defaults = loadConfig([], {});
  t.true(
    defaults.ok &&
      defaults.config.recordRetention === 30 * 86_400_000 &&
      defaults.config.rawRetention === 7 * 86_400_000,
  );
});

const sizes: Array<[string, number | undefined]> = [
  ['25MB', 25 * 1024 * 1024],
  ['512KB', 512 * 1024],
  ['100', 100],
  ['1GB', 1024 ** 3],
  ['1.5 MB', 1.5 * 1024 * 1024],
  ['lots', undefined],
  ['-5KB', undefined],
];
for (const [text, bytes] of sizes) test(`size ${text}`, (t) => t.is(parseSize(text), bytes));

test('RETRY_DELAYS sets the number of retries', (t) => {
  const result = loadConfig(['--retry-delays', '100ms, 2s,1m'], {});
  if (!result.ok) return t.fail(result.problems.join('; '));
  t.deepEqual(result.config.retryDelays, [100, 2000, 60_000]);
});

test('STORAGE_PROFILE names a profile, ferretdb-postgresql among them, and refuses others', (t) => {
  const given = (value: string) => {
    const result = loadConfig([], { STORAGE_PROFILE: value });
    return result.ok ? result.config.storageProfile : result.problems.join('; ');
  };
  t.is(given('ferretdb-postgresql'), 'ferretdb-postgresql');
  t.is(given('mongodb'), 'mongodb');
  t.regex(String(given('postgresql')), /STORAGE_PROFILE/);
  const defaults = loadConfig([], {});
  t.is(defaults.ok && defaults.config.storageProfile, 'auto');
});

test('RETRY_JITTER is a percentage from 0% to 50%, 10% by default', (t) => {
  const given = (value: string) => {
    const result = loadConfig([], { RETRY_JITTER: value });
    return result.ok ? result.config.retryJitter : result.problems.join('; ');
  };
  t.is(given('0%'), 0);
  t.is(given('25'), 0.25);
  t.is(given('50%'), 0.5);
  t.regex(String(given('51%')), /must be a percentage from 0% to 50%/);
  t.regex(String(given('-1%')), /must be a percentage/);
  t.regex(String(given('lots')), /must be a percentage/);
  const defaults = loadConfig([], {});
  t.is(defaults.ok && defaults.config.retryJitter, 0.1);
});

test('a secret in a bad value is not echoed in full', (t) => {
  const result = loadConfig(['--mongodb-uri', `http://user:${'p'.repeat(60)}@host/`], {});
  t.false(result.ok);
  if (!result.ok) t.false(result.problems.join('\n').includes('p'.repeat(60)));
});

test('TLS cert and key go together', (t) => {
  const result = loadConfig(['--smtp-tls-cert', '/tmp/cert.pem'], {});
  t.false(result.ok);
  if (!result.ok) t.regex(result.problems.join('\n'), /SMTP_TLS_CERT and SMTP_TLS_KEY/);
});

test('TRUST_PROXY takes addresses and CIDR ranges, and refuses anything else', (t) => {
  const result = loadConfig([], { TRUST_PROXY: '10.0.0.1, 192.168.0.0/16,fd00::/8' });
  if (!result.ok) return t.fail(result.problems.join('; '));
  t.deepEqual(result.config.trustProxy, ['10.0.0.1', '192.168.0.0/16', 'fd00::/8']);
  const none = loadConfig([], {});
  t.true(none.ok && none.config.trustProxy.length === 0);
  for (const bad of ['proxy.example', '10.0.0.1/33', '10.0.0.1/8/1', 'loopback']) {
    const refused = loadConfig(['--trust-proxy', bad], {});
    t.false(refused.ok, bad);
    if (!refused.ok) t.regex(refused.problems.join('\n'), /--trust-proxy/);
  }
});

test("README's configuration table is exactly the schema's", (t) => {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  t.true(
    readme.includes(configTableMarkdown()),
    'run `node scripts/config-table.ts` and paste its output into README',
  );
});
