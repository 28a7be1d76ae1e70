// The pino logger. JSON to stdout; secrets are redacted wherever they might appear.
import { pino } from 'pino';

export type Logger = pino.Logger;

/** Paths that may carry secrets in a logged object; pino replaces their values. */
const REDACT = [
  'apiKey',
  'config.apiKey',
  'req.headers["x-api-key"]',
  'req.headers.authorization',
  'headers["x-api-key"]',
  'webhook_secret',
  '*.webhook_secret',
  'secret',
];

export function createLogger(level: string, bindings: Record<string, unknown> = {}): Logger {
  return pino({
    level,
    base: { pid: process.pid, ...bindings },
    redact: { paths: REDACT, censor: '[redacted]' },
    // ISO 8601, readable without a tool; the field is still `time`
    timestamp: pino.stdTimeFunctions.isoTime,
  });
}
