// The SMTP session's policy, before any message byte: the greeting and the extensions offered, TLS,
// the connection, idle and session-time limits, the memory an announced SIZE takes at MAIL FROM,
// and the recipient checks at RCPT TO (recipient count, served domain, a route, a `reject` route).
import { readFileSync } from 'node:fs';
import type { SMTPServer, SMTPServerOptions, SMTPServerSession } from 'smtp-server';
import type { Config } from '../config/schema.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { metrics } from '../metrics/metrics.ts';
import type { RouteDirectory } from '../route/directory.ts';
import { domainOf, mailFromOf } from './envelope.ts';
import type { MemoryBudget, Reservation } from './memory-budget.ts';
import type { Refusals } from './refusals.ts';

export const MAX_RECIPIENTS = 100;
/** How long sessions in progress may go on after shutdown begins before they are closed with 421. */
export const CLOSE_TIMEOUT_MS = 10_000;

export type SessionConfig = Pick<
  Config,
  'maxMessageSize' | 'smtpTlsCert' | 'smtpTlsKey' | 'smtpMaxConnections' | 'smtpIdleTimeout'
>;

export interface SessionPolicy {
  /** smtp-server's options and the session's callbacks, all but onData */
  options: Omit<SMTPServerOptions, 'onData'>;
  /** The share of the budget the session's announced SIZE took, handed over to its DATA. */
  takeAnnouncedShare(session: SMTPServerSession): Reservation | undefined;
}

export function sessionPolicy(deps: {
  config: SessionConfig;
  directory: RouteDirectory;
  budget: MemoryBudget;
  log: Logger;
  refusals: Refusals;
}): SessionPolicy {
  const { config, directory, budget, log } = deps;
  const { refuse, refuseByRoute } = deps.refusals;
  /** the share a sender's announced SIZE took at MAIL FROM, until its DATA (or the session) ends */
  const announcedShares = new WeakMap<SMTPServerSession, Reservation>();
  const dropAnnouncedShare = (session: SMTPServerSession) => {
    announcedShares.get(session)?.release();
    announcedShares.delete(session);
  };
  const tls = config.smtpTlsCert
    ? { cert: readFileSync(config.smtpTlsCert), key: readFileSync(config.smtpTlsKey) }
    : undefined;

  const options: SessionPolicy['options'] = {
    banner: 'mailroute inbound MX',
    size: config.maxMessageSize,
    // onData answers an oversized message itself (552 5.3.4 from the catalog): what is sent is what is logged
    rejectOversized: false,
    // the 101st recipient is refused in onRcptTo: counted and logged like every refusal
    hideENHANCEDSTATUSCODES: false,
    hideSMTPUTF8: false,
    hide8BITMIME: false,
    hidePIPELINING: false,
    disableReverseLookup: true,
    authOptional: true,
    disabledCommands: tls ? ['AUTH'] : ['AUTH', 'STARTTLS'],
    maxClients: config.smtpMaxConnections,
    socketTimeout: config.smtpIdleTimeout,
    closeTimeout: CLOSE_TIMEOUT_MS,
    logger: false,
    ...(tls ?? {}),

    onConnect(_session, callback) {
      metrics.smtpConnected();
      // the greeting goes after this turn's reads: smtp-server judges a client early only if it
      // reads its bytes before the 100 ms greeting delay ends, and a process that ran late (a
      // loaded machine) fired that timer first, then read what was sent long before as commands
      setImmediate(callback);
    },

    onMailFrom(address, session, callback) {
      // a new transaction (after RSET, or a first one): what an earlier MAIL FROM took goes back
      dropAnnouncedShare(session);
      // smtp-server has checked SIZE's syntax and refused one over MAX_MESSAGE_SIZE already
      const announced = Number(address.args ? address.args.SIZE : 0) || 0;
      if (announced > 0) {
        const share = budget.reserve(Math.min(announced, config.maxMessageSize));
        if (!share)
          return callback(
            refuse(session, 'memory_budget', undefined, undefined, {
              mail_from: address.address,
              size: announced,
              in_flight: budget.used,
            }),
          );
        announcedShares.set(session, share);
      }
      callback();
    },

    onClose(session) {
      dropAnnouncedShare(session);
    },

    onRcptTo(address, session, callback) {
      const recipient = address.address.toLowerCase();
      const known = session.envelope.rcptTo.some((r) => r.address.toLowerCase() === recipient);
      if (!known && session.envelope.rcptTo.length >= MAX_RECIPIENTS)
        return callback(refuse(session, 'too_many_recipients', address.address));
      void (async () => {
        if (!(await directory.servesDomain(domainOf(recipient)))) {
          return callback(refuse(session, 'unknown_domain', address.address));
        }
        // at RCPT only the envelope is known: a route filtering on a header or DMARC is decided
        // once the message is parsed, and the recipient is accepted for it meanwhile
        const found = await directory.match(recipient, { mailFrom: mailFromOf(session) });
        if (!found) return callback(refuse(session, 'no_route', address.address));
        if (found.route.action === 'reject' && !found.undecided) {
          return callback(refuseByRoute(session, address.address, found.route.reject_reply));
        }
        callback();
      })().catch((err: unknown) => {
        log.error({ err, event: EVENTS.databaseUnavailable }, 'recipient check failed');
        callback(refuse(session, 'storage_unavailable', address.address));
      });
    },
  };

  return {
    options,
    takeAnnouncedShare(session) {
      const share = announcedShares.get(session);
      announcedShares.delete(session);
      return share;
    },
  };
}

/** Closes sessions older than `limitMs` with 421 4.4.2; checked every few seconds. */
export function enforceSessionLimit(server: SMTPServer, limitMs: number): void {
  const started = new WeakMap<object, number>();
  const sweep = setInterval(
    () => {
      const now = Date.now();
      for (const connection of server.connections) {
        const since = started.get(connection);
        if (since === undefined) started.set(connection, now);
        else if (now - since > limitMs) {
          connection.send(421, '4.4.2 Session time limit exceeded, closing connection');
          connection.close();
        }
      }
    },
    Math.min(5000, Math.max(50, Math.floor(limitMs / 4))),
  );
  sweep.unref();
  server.server.once('close', () => clearInterval(sweep));
}
