// The one catalog of stable error codes. Each entry knows its HTTP status and, where it applies,
// its SMTP reply (a 4xx one tells the sender to try again).
// Callers match on `code`, never on classes or messages.

export interface CatalogEntry {
  readonly http: number;
  readonly smtp?: { readonly code: number; readonly enhanced: string; readonly text: string };
}

export const ERRORS = Object.freeze({
  // REST API
  unauthorized: { http: 401 },
  invalid_request: { http: 400 },
  invalid_json: { http: 400 },
  invalid_query: { http: 400 },
  invalid_domain_name: { http: 400 },
  unknown_domain: { http: 400 },
  invalid_webhook_url: { http: 400 },
  invalid_recipient_pattern: { http: 400 },
  forbidden: { http: 403 },
  not_found: { http: 404 },
  domain_exists: { http: 409 },
  route_exists: { http: 409 },
  invalid_state: { http: 409 },
  raw_expired: { http: 410 },
  payload_too_large: { http: 413 },
  unsupported_media_type: { http: 415 },
  service_unavailable: { http: 503 },
  internal_error: { http: 500 },
  // a delivery: its route's webhook_url can never be posted to (dlq at once, in its history)
  invalid_webhook_destination: { http: 422 },
  // SMTP
  storage_unavailable: {
    http: 503,
    smtp: { code: 451, enhanced: '4.3.0', text: 'Temporary storage failure, try again later' },
  },
  relay_denied: {
    http: 400,
    smtp: { code: 550, enhanced: '5.7.1', text: 'Relaying denied: domain not served here' },
  },
  no_such_recipient: {
    http: 400,
    smtp: { code: 550, enhanced: '5.1.1', text: 'No such recipient here' },
  },
  too_many_recipients: {
    http: 400,
    smtp: { code: 452, enhanced: '4.5.3', text: 'Too many recipients' },
  },
  message_too_big: {
    http: 413,
    smtp: { code: 552, enhanced: '5.3.4', text: 'Message size exceeds fixed maximum message size' },
  },
  // MEMORY_BUDGET is spent: the sender keeps the message and tries again later
  memory_budget_exhausted: {
    http: 503,
    smtp: {
      code: 452,
      enhanced: '4.3.1',
      text: 'Insufficient system resources: too much mail in progress, try again later',
    },
  },
  dmarc_rejected: {
    http: 403,
    smtp: { code: 550, enhanced: '5.7.1', text: 'Message rejected by the DMARC policy of the sender domain' },
  },
} as const satisfies Record<string, CatalogEntry>);

export type ErrorCode = keyof typeof ERRORS;

/** An error that carries a catalog code; the API error handler and the SMTP layer translate it. */
export class ServiceError extends Error {
  readonly code: ErrorCode;
  readonly statusCode: number;
  /** smtp-server reads responseCode; set it so an outage never becomes a 5xx bounce */
  readonly responseCode: number | undefined;
  /** when to try again, seconds: the HTTP answer's Retry-After (absent: none is sent) */
  readonly retryAfterSeconds: number | undefined;

  constructor(code: ErrorCode, message?: string, options: { retryAfterSeconds?: number } = {}) {
    const entry: CatalogEntry = ERRORS[code];
    super(message ?? (entry.smtp ? `${entry.smtp.enhanced} ${entry.smtp.text}` : code));
    this.name = 'ServiceError';
    this.code = code;
    this.statusCode = entry.http;
    this.responseCode = entry.smtp?.code;
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

/** The SMTP answer for a catalog code, with the enhanced status code leading the text. */
export function smtpError(code: ErrorCode, detail?: string): ServiceError {
  const entry: CatalogEntry = ERRORS[code];
  const smtp = entry.smtp ?? ERRORS.storage_unavailable.smtp;
  return new ServiceError(code, `${smtp.enhanced} ${detail ?? smtp.text}`);
}
