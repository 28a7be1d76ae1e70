// Turns one webhook attempt's result (an HTTP status, or whatever the transport threw) into an
// AttemptOutcome. What follows a failure is decided elsewhere (src/actor/retry-policy.ts): every
// failure is retried but `misconfigured`, a destination that no retry can reach.
// Errors are recognised by `code`/`name`, never by class: undici, node:net, node:tls and
// DOMException all cross realm and version boundaries where instanceof is unreliable.

export type AttemptOutcome =
  | { ok: true; statusCode: number }
  | { ok: false; reason: 'http_status'; statusCode: number }
  /** misconfigured: the webhook_url cannot be posted to (not a URL, not http(s), a refused private address) */
  | { ok: false; reason: 'timeout' | 'connection' | 'misconfigured'; error: string };

/** The code of the socket lookup's refusal of a private destination (destination-guard.ts). */
export const DESTINATION_DENIED_CODE = 'EDESTINATIONDENIED';

/** Codes meaning "a deadline passed", from undici's timers and the OS connect timeout. */
const TIMEOUT_CODES: readonly string[] = Object.freeze([
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CONNECT_TIMEOUT',
  'ETIMEDOUT',
] as const);

/** Names for the same, plus `TimeoutError`: the DOMException our own deadline aborts with. */
const TIMEOUT_NAMES: readonly string[] = Object.freeze([
  'TimeoutError',
  'HeadersTimeoutError',
  'BodyTimeoutError',
  'ConnectTimeoutError',
] as const);

// Errors nest (`cause`, AggregateError from happy-eyeballs connects); bound the walk so a
// self-referencing cause cannot loop.
const MAX_ERROR_DEPTH = 8;

// The error text ends up in delivery logs and the API; a hostile TLS peer or proxy should not be
// able to make it arbitrarily large.
const MAX_ERROR_TEXT = 500;

/** 2xx is success; everything else (3xx included, since redirects are not followed) is a failure. */
export function classifyStatus(statusCode: number): AttemptOutcome {
  if (statusCode >= 200 && statusCode <= 299) {
    return { ok: true, statusCode };
  }
  return { ok: false, reason: 'http_status', statusCode };
}

/**
 * A thrown transport error: `misconfigured` if the destination was refused as private, else
 * `timeout` if any error in its chain is a deadline, else `connection`.
 */
export function classifyError(err: unknown): AttemptOutcome {
  const chain = flatten(err);
  const reason = chain.some(isDeniedDestination)
    ? 'misconfigured'
    : chain.some(isTimeout)
      ? 'timeout'
      : 'connection';
  return { ok: false, reason, error: describe(chain) };
}

function isDeniedDestination(err: unknown): boolean {
  return fieldsOf(err).code === DESTINATION_DENIED_CODE;
}

interface ErrorFields {
  code: string | undefined;
  name: string | undefined;
  message: string | undefined;
}

function fieldsOf(err: unknown): ErrorFields {
  if (typeof err !== 'object' || err === null) {
    return { code: undefined, name: undefined, message: err === undefined ? undefined : String(err) };
  }
  const { code, name, message } = err as Record<string, unknown>;
  return {
    code: typeof code === 'string' ? code : undefined,
    name: typeof name === 'string' ? name : undefined,
    message: typeof message === 'string' ? message : undefined,
  };
}

function flatten(err: unknown): unknown[] {
  const out: unknown[] = [];
  const seen = new Set<unknown>();
  const visit = (e: unknown, depth: number): void => {
    if (depth > MAX_ERROR_DEPTH || seen.has(e)) return;
    seen.add(e);
    out.push(e);
    if (typeof e !== 'object' || e === null) return;
    const { cause, errors } = e as Record<string, unknown>;
    if (Array.isArray(errors)) {
      for (const inner of errors) visit(inner, depth + 1);
    }
    if (cause !== undefined) visit(cause, depth + 1);
  };
  visit(err, 0);
  return out;
}

function isTimeout(err: unknown): boolean {
  const { code, name } = fieldsOf(err);
  return (
    (code !== undefined && TIMEOUT_CODES.includes(code)) ||
    (name !== undefined && TIMEOUT_NAMES.includes(name))
  );
}

function describe(chain: readonly unknown[]): string {
  const parts: string[] = [];
  let fallback = 'unknown error';
  for (const e of chain) {
    const { code, name, message: raw } = fieldsOf(e);
    // OpenSSL messages end in a newline.
    const message = raw?.trim();
    const label = code ?? name;
    // AggregateError carries an empty message; its members say what happened.
    if (message === undefined || message === '') {
      if (label !== undefined && fallback === 'unknown error') fallback = label;
      continue;
    }
    const part = label !== undefined && !message.includes(label) ? `${label}: ${message}` : message;
    if (!parts.includes(part)) parts.push(part);
  }
  const text = parts.length > 0 ? parts.join('; ') : fallback;
  return text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT - 1)}…` : text;
}
