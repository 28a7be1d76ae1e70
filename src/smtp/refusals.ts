// Every SMTP refusal of ours: the catalog entry it is answered with, counted in the metrics and
// logged at info (`smtp.rejected`) with who sent what to whom and what they were told.
import type { SMTPServerSession } from 'smtp-server';
import { type ErrorCode, type ServiceError, smtpError } from '../errors/catalog.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { metrics, type SmtpReason } from '../metrics/metrics.ts';
import { DEFAULT_REJECT_REPLY } from '../route/actions.ts';
import { senderOf } from './envelope.ts';

export type RefusalReason = Exclude<SmtpReason, 'accepted' | 'route_rejected'>;

/** The catalog entry each refusal is answered with. */
const REFUSALS: Readonly<Record<RefusalReason, ErrorCode>> = Object.freeze({
  unknown_domain: 'relay_denied',
  no_route: 'no_such_recipient',
  too_big: 'message_too_big',
  too_many_recipients: 'too_many_recipients',
  storage_unavailable: 'storage_unavailable',
  memory_budget: 'memory_budget_exhausted',
});

export interface Refusals {
  /** A refusal for `reason`; `sent` is the reply when smtp-server sent its own. */
  refuse(
    session: SMTPServerSession,
    reason: RefusalReason,
    recipient?: string,
    sent?: string,
    detail?: Record<string, unknown>,
  ): ServiceError;
  /** A recipient a `reject` route refuses, with the route's reply (the route API checked its form). */
  refuseByRoute(session: SMTPServerSession, recipient: string, routeReply: string | undefined): Error;
}

export function refusals(log: Logger): Refusals {
  const logRefusal = (
    session: SMTPServerSession,
    reason: RefusalReason | 'route_rejected',
    reply: string,
    fields: Record<string, unknown>,
  ) =>
    log.info(
      {
        event: EVENTS.smtpRejected,
        reason,
        client: session.remoteAddress,
        mail_from: senderOf(session),
        ...fields,
        reply,
      },
      'refused',
    );
  return {
    refuse(session, reason, recipient, sent, detail) {
      const reply = smtpError(REFUSALS[reason]);
      metrics.smtpReply(reason);
      logRefusal(session, reason, sent ?? `${reply.responseCode} ${reply.message}`, {
        ...(recipient !== undefined ? { rcpt_to: recipient } : {}),
        ...detail,
      });
      return reply;
    },
    refuseByRoute(session, recipient, routeReply) {
      const sent = routeReply ?? DEFAULT_REJECT_REPLY;
      const code = Number(sent.slice(0, 3));
      metrics.smtpReply('route_rejected', code < 500 ? '4xx' : '5xx');
      logRefusal(session, 'route_rejected', sent, { rcpt_to: recipient });
      return Object.assign(new Error(sent.slice(4)), { responseCode: code });
    },
  };
}
