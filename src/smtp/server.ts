// The inbound MX: smtp-server set up for receiving (no AUTH, no relaying), recipients checked
// against the domains and routes at RCPT time, and the receive path: the exact bytes (raw.ts) and
// the message record (the working set), both durable, before the 250. Any storage failure is 451, so
// the sending MTA tries again later: an outage never turns into bounces.
import { readFileSync } from 'node:fs';
import {
  SMTPServer,
  type SMTPServerDataStream,
  type SMTPServerOptions,
  type SMTPServerSession,
} from 'smtp-server';
import type { ActorSystem } from '../actor/system.ts';
import type { Config } from '../config/schema.ts';
import { type ErrorCode, ServiceError, smtpError } from '../errors/catalog.ts';
import { accept } from '../lifecycle/lifecycle.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { metrics, type SmtpReason } from '../metrics/metrics.ts';
import type { Parser } from '../parse/pool.ts';
import { DEFAULT_REJECT_REPLY } from '../route/actions.ts';
import type { RouteDirectory } from '../route/directory.ts';
import type { AcceptedMessage, RawUpload, Store, StoredAuth } from '../store/queue.ts';
import * as queue from '../store/queue.ts';
import { withDeadline } from '../util/deadline.ts';
import type { MemoryBudget, Reservation } from './memory-budget.ts';
import { observeLibraryRefusals, useOwnEnhancedCodes } from './replies.ts';

export const MAX_RECIPIENTS = 100;
/** How long storing one message may take before the sender is told to try again (451). */
export const STORE_DEADLINE_MS = 20_000;
/** How long sessions in progress may go on after shutdown begins before they are closed with 421. */
export const CLOSE_TIMEOUT_MS = 10_000;

/** Sender authentication before the 250: only for a message one of whose routes refuses DMARC failures. */
export interface SmtpAuthCheck {
  pool: Pick<Parser, 'authenticate'>;
  dnsServers: readonly string[];
  budgetMs: number;
}

export interface SmtpDeps {
  config: Pick<
    Config,
    | 'maxMessageSize'
    | 'smtpTlsCert'
    | 'smtpTlsKey'
    | 'leaseTime'
    | 'smtpMaxConnections'
    | 'smtpIdleTimeout'
    | 'smtpSessionLimit'
  >;
  store: Store;
  directory: RouteDirectory;
  actors: ActorSystem;
  logger: Logger;
  /** the worker's MEMORY_BUDGET: what a message takes of it is given back when its parse ends */
  budget: MemoryBudget;
  /** absent: no route's DMARC policy is applied at SMTP time */
  auth?: SmtpAuthCheck;
}

/** The client as SPF sees it: an IPv4 address as such, not IPv4-mapped IPv6 (a dual-stack listener). */
function clientOf(session: SMTPServerSession): { ip: string; helo: string } {
  return {
    ip: session.remoteAddress.replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/i, ''),
    helo: session.hostNameAppearsAs ?? '',
  };
}

/** The catalog entry each refusal is answered with. */
const REFUSALS: Readonly<Record<Exclude<SmtpReason, 'accepted' | 'route_rejected'>, ErrorCode>> =
  Object.freeze({
    unknown_domain: 'relay_denied',
    no_route: 'no_such_recipient',
    too_big: 'message_too_big',
    too_many_recipients: 'too_many_recipients',
    storage_unavailable: 'storage_unavailable',
    memory_budget: 'memory_budget_exhausted',
  });

/** The envelope sender as routes' filters see it: lowercase, '' for a bounce. */
function mailFromOf(session: SMTPServerSession): string {
  return session.envelope.mailFrom ? session.envelope.mailFrom.address.toLowerCase() : '';
}

function domainOf(address: string): string {
  return address.slice(address.lastIndexOf('@') + 1).toLowerCase();
}

export function createSmtpServer(deps: SmtpDeps): SMTPServer {
  useOwnEnhancedCodes();
  const { config, store, directory, actors, logger, budget } = deps;
  /** the share a sender's announced SIZE took at MAIL FROM, until its DATA (or the session) ends */
  const announcedShares = new WeakMap<SMTPServerSession, Reservation>();
  const dropAnnouncedShare = (session: SMTPServerSession) => {
    announcedShares.get(session)?.release();
    announcedShares.delete(session);
  };
  const log = logger.child({ component: 'smtp' });
  const tls = config.smtpTlsCert
    ? { cert: readFileSync(config.smtpTlsCert), key: readFileSync(config.smtpTlsKey) }
    : undefined;

  /** A refusal, counted and logged at info with who sent what to whom and what they were told. */
  function refuse(
    session: SMTPServerSession,
    reason: Exclude<SmtpReason, 'accepted' | 'route_rejected'>,
    recipient?: string,
    sent?: string,
    detail?: Record<string, unknown>,
  ): ServiceError {
    const code = REFUSALS[reason];
    const reply = smtpError(code);
    metrics.smtpReply(reason);
    log.info(
      {
        event: EVENTS.smtpRejected,
        reason,
        client: session.remoteAddress,
        mail_from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
        ...(recipient !== undefined ? { rcpt_to: recipient } : {}),
        ...detail,
        reply: sent ?? `${reply.responseCode} ${reply.message}`,
      },
      'refused',
    );
    return reply;
  }

  /** A recipient a `reject` route refuses, with the route's reply (the route API checked its form). */
  function refuseByRoute(
    session: SMTPServerSession,
    recipient: string,
    routeReply: string | undefined,
  ): Error {
    const sent = routeReply ?? DEFAULT_REJECT_REPLY;
    const code = Number(sent.slice(0, 3));
    metrics.smtpReply('route_rejected', code < 500 ? '4xx' : '5xx');
    log.info(
      {
        event: EVENTS.smtpRejected,
        reason: 'route_rejected',
        client: session.remoteAddress,
        mail_from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
        rcpt_to: recipient,
        reply: sent,
      },
      'refused',
    );
    return Object.assign(new Error(sent.slice(4)), { responseCode: code });
  }

  /**
   * Writes the message record once its bytes are stored (small ones go inside it, the same insert):
   * after this, the 250.
   */
  async function record(
    id: string,
    upload: RawUpload,
    whole: Buffer,
    session: SMTPServerSession,
    auth: StoredAuth | undefined,
    answered: AbortSignal,
  ): Promise<AcceptedMessage> {
    const inline = await upload.finish(whole);
    const receivedAt = new Date();
    const rcptTo = session.envelope.rcptTo.map((r) => r.address);
    const mailFrom = session.envelope.mailFrom ? session.envelope.mailFrom.address : '';
    const doc: AcceptedMessage = {
      _id: id,
      message_id: '',
      from: mailFrom,
      to: rcptTo,
      subject: '',
      received_at: receivedAt,
      envelope: { mail_from: mailFrom, rcpt_to: rcptTo },
      domains: [...new Set(rcptTo.map(domainOf))],
      size: whole.length,
      client: clientOf(session),
      ...(auth ? { auth } : {}),
      ...(inline ? { raw: inline } : {}),
      ...accept(receivedAt, `from ${session.remoteAddress}`),
      attempts: [],
      deliveries: [],
      version: 1,
      lease_epoch: 1,
      lease_owner: actors.owner,
      due_at: new Date(receivedAt.getTime() + config.leaseTime),
      scheduled: true,
    };
    await queue.accept(store, doc, actors.intake, answered);
    return doc;
  }

  /**
   * When a route of the message refuses DMARC failures, sender authentication runs now, before
   * the 250 (in the parse pool): a DMARC fail under the sender domain's p=reject is refused with
   * 550 5.7.1 and the reason; otherwise its results are stored with the message. Without such a
   * route nothing runs here (the check is made with the parse).
   */
  async function dmarcCheck(whole: Buffer, session: SMTPServerSession): Promise<StoredAuth | undefined> {
    const check = deps.auth;
    if (!check || !(await directory.anyRefusesDmarcFailures())) return undefined;
    const routes = await Promise.all(
      session.envelope.rcptTo.map((r) =>
        directory.match(r.address.toLowerCase(), { mailFrom: mailFromOf(session) }),
      ),
    );
    if (!routes.some((found) => found?.route.dmarc_reject)) return undefined;
    // a copy: the pool takes its input over, and these bytes are still to be stored and parsed
    const outcome = await check.pool.authenticate(new Uint8Array(whole), {
      ...clientOf(session),
      mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
      dnsServers: check.dnsServers,
      // within the time storing may take, so that a slow DNS never turns into a 451
      budgetMs: Math.min(check.budgetMs, STORE_DEADLINE_MS / 2),
    });
    // the pool failed, not the message: accept, and let the parse check it as usual
    if ('ok' in outcome) return undefined;
    const { dmarc } = outcome.results;
    if (dmarc.result === 'fail' && dmarc.policy === 'reject') {
      throw smtpError(
        'dmarc_rejected',
        `DMARC: ${dmarc.domain} asks receivers to reject mail that fails its DMARC check, and this message fails it`,
      );
    }
    return outcome;
  }

  const options: SMTPServerOptions = {
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
      callback();
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

    onData(stream: SMTPServerDataStream, session, callback) {
      const id = queue.newId('m');
      const upload = queue.openRawUpload(store, id);
      // the share of the budget: the announced SIZE's, else one that grows with the bytes
      const share = announcedShares.get(session) ?? budget.reserve(0)!;
      announcedShares.delete(session);
      // the bytes as received, gathered in place: stored from, then handed to the parse thread
      const gathered = new Gathered(config.maxMessageSize);
      let bytes = 0;
      // past MAX_MESSAGE_SIZE (552), or more than the budget can take (452): the rest is drained, not kept
      let tooBig = false;
      let overBudget = false;
      stream.on('data', (chunk: Buffer) => {
        if (stream.sizeExceeded) tooBig = true;
        if (tooBig || overBudget) return;
        if (!share.cover(bytes + chunk.length)) {
          overBudget = true;
          gathered.drop();
          share.release();
          return;
        }
        if (!gathered.push(chunk)) {
          tooBig = true;
          gathered.drop();
          share.release();
          return;
        }
        bytes += chunk.length;
        if (!upload.write(chunk)) {
          // the database is behind: stop reading from the client until it catches up
          stream.pause();
          void upload.drained().then(() => stream.resume());
        }
      });
      stream.once('end', () => {
        metrics.smtpBytes(stream.byteLength ?? bytes);
        if (stream.sizeExceeded || tooBig) {
          share.release();
          void upload.abort();
          return callback(refuse(session, 'too_big'));
        }
        if (overBudget) {
          void upload.abort();
          return callback(
            refuse(session, 'memory_budget', undefined, undefined, {
              size: stream.byteLength ?? bytes,
              in_flight: budget.used,
            }),
          );
        }
        // what the message takes is what it is (an announced SIZE is an estimate)
        share.settle(bytes);
        // a buffer of its own, so the parse thread takes it over without another copy
        const whole = gathered.whole();
        // aborted once the sender has been told 451: an insert not yet sent then never goes
        const refused = new AbortController();
        withDeadline(
          dmarcCheck(whole, session).then((auth) => record(id, upload, whole, session, auth, refused.signal)),
          STORE_DEADLINE_MS,
          () => new Error(`storing the message took longer than ${STORE_DEADLINE_MS} ms`),
        ).then(
          (doc) => {
            log.info(
              { event: EVENTS.smtpAccepted, message: id, size: bytes, recipients: doc.to.length },
              'accepted',
            );
            metrics.smtpReply('accepted');
            callback(null, `OK: queued as ${id}`);
            // its share goes back when its parse ends
            budget.hold(whole, share);
            actors.adopt(doc, whole);
          },
          (err: unknown) => {
            if (err instanceof ServiceError && err.code === 'dmarc_rejected') {
              log.info({ event: EVENTS.smtpRejected, reason: 'dmarc_rejected' }, err.message);
              share.release();
              void upload.abort();
              return callback(err);
            }
            log.error({ err, event: EVENTS.smtpStoreFailed }, 'storing a message failed; answered 451');
            refused.abort();
            share.release();
            void upload.abort();
            // writes in flight may still land in a stalled database: they are removed when it answers
            actors.abandon(id);
            callback(refuse(session, 'storage_unavailable'));
          },
        );
      });
    },
  };
  const server = new SMTPServer(options);
  observeLibraryRefusals((connection, reply) => {
    if (server.connections.has(connection as never)) refuse(connection.session, 'too_big', undefined, reply);
  });
  // the idle timeout alone lets a slow-drip client hold a session forever
  enforceSessionLimit(server, config.smtpSessionLimit);
  return server;
}

const GROWTH_BYTES = 1024 * 1024;

/**
 * A message's bytes gathered as they arrive into one buffer that grows in place: a resizable
 * ArrayBuffer reserves the address space of the largest message allowed and takes memory only as it
 * fills. Never joined from pieces (which held the message twice at the end of DATA), and the
 * message's own, so the parse thread takes it over without a copy.
 */
class Gathered {
  #buffer: ArrayBuffer | undefined;
  #view: Uint8Array | undefined;
  #length = 0;

  constructor(maxBytes: number) {
    this.#buffer = new ArrayBuffer(0, { maxByteLength: maxBytes });
    // tracks the buffer's length as it grows
    this.#view = new Uint8Array(this.#buffer);
  }

  /** false when the bytes would not fit (past MAX_MESSAGE_SIZE) or were dropped */
  push(chunk: Uint8Array): boolean {
    const buffer = this.#buffer;
    if (!buffer || !this.#view) return false;
    const needed = this.#length + chunk.length;
    if (needed > buffer.maxByteLength) return false;
    if (needed > buffer.byteLength)
      buffer.resize(Math.min(buffer.maxByteLength, Math.max(needed, buffer.byteLength + GROWTH_BYTES)));
    this.#view.set(chunk, this.#length);
    this.#length = needed;
    return true;
  }

  drop(): void {
    this.#buffer = undefined;
    this.#view = undefined;
  }

  /** every byte pushed, in a Buffer that spans its whole ArrayBuffer */
  whole(): Buffer {
    const buffer = this.#buffer ?? new ArrayBuffer(0);
    if (buffer.resizable) buffer.resize(this.#length);
    this.drop();
    return Buffer.from(buffer, 0, this.#length);
  }
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
