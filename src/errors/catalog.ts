// The one catalog of stable error codes. Each entry knows its HTTP status and, where it applies,
// its SMTP reply and whether the failure is temporary (the sender or the actor should try again).
// Callers match on `code`, never on classes or messages.

export interface CatalogEntry {
  readonly http: number;
  readonly smtp?: { readonly code: number; readonly enhanced: string; readonly text: string };
  readonly retryable: boolean;
}

export const ERRORS = Object.freeze({
  // REST API
  unauthorized: { http: 401, retryable: false },
  invalid_request: { http: 400, retryable: false },
  invalid_json: { http: 400, retryable: false },
  invalid_query: { http: 400, retryable: false },
  invalid_domain_name: { http: 400, retryable: false },
  unknown_domain: { http: 400, retryable: false },
  invalid_webhook_url: { http: 400, retryable: false },
  invalid_recipient_pattern: { http: 400, retryable: false },
  forbidden: { http: 403, retryable: false },
  not_found: { http: 404, retryable: false },
  domain_exists: { http: 409, retryable: false },
  route_exists: { http: 409, retryable: false },
  invalid_state: { http: 409, retryable: false },
  raw_expired: { http: 410, retryable: false },
  payload_too_large: { http: 413, retryable: false },
  unsupported_media_type: { http: 415, retryable: false },
  service_unavailable: { http: 503, retryable: true },
  internal_error: { http: 500, retryable: true },
  // SMTP
  storage_unavailable: {
    http: 503,
    smtp: { code: 451, enhanced: '4.3.0', text: 'Temporary storage failure, try again later' },
    retryable: true,
  },
  shutting_down: {
    http: 503,
    smtp: { code: 421, enhanced: '4.3.2', text: 'Service shutting down, try again later' },
    retryable: true,
  },
  relay_denied: {
    http: 400,
    smtp: { code: 550, enhanced: '5.7.1', text: 'Relaying denied: domain not served here' },
    retryable: false,
  },
  no_such_recipient: {
    http: 400,
    smtp: { code: 550, enhanced: '5.1.1', text: 'No such recipient here' },
    retryable: false,
  },
  too_many_recipients: {
    http: 400,
    smtp: { code: 452, enhanced: '4.5.3', text: 'Too many recipients' },
    retryable: true,
  },
  message_too_big: {
    http: 413,
    smtp: { code: 552, enhanced: '5.3.4', text: 'Message size exceeds fixed maximum message size' },
    retryable: false,
  },
  dmarc_rejected: {
    http: 403,
    smtp: { code: 550, enhanced: '5.7.1', text: 'Message rejected by the DMARC policy of the sender domain' },
    retryable: false,
  },
  bad_sequence: {
    http: 400,
    smtp: { code: 503, enhanced: '5.5.1', text: 'Bad sequence of commands' },
    retryable: false,
  },
} as const satisfies Record<string, CatalogEntry>);

export type ErrorCode = keyof typeof ERRORS;

/** An error that carries a catalog code; the API error handler and the SMTP layer translate it. */
export class ServiceError extends Error {
  readonly code: ErrorCode;
  readonly statusCode: number;
  /** smtp-server reads responseCode; set it so an outage never becomes a 5xx bounce */
  readonly responseCode: number | undefined;

  constructor(code: ErrorCode, message?: string) {
    const entry: CatalogEntry = ERRORS[code];
    super(message ?? (entry.smtp ? `${entry.smtp.enhanced} ${entry.smtp.text}` : code));
    this.name = 'ServiceError';
    this.code = code;
    this.statusCode = entry.http;
    this.responseCode = entry.smtp?.code;
  }
}

/** The SMTP answer for a catalog code, with the enhanced status code leading the text. */
export function smtpError(code: ErrorCode, detail?: string): ServiceError {
  const entry: CatalogEntry = ERRORS[code];
  const smtp = entry.smtp ?? ERRORS.storage_unavailable.smtp;
  return new ServiceError(code, `${smtp.enhanced} ${detail ?? smtp.text}`);
}
