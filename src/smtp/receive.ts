// The receive path, DATA to the reply: the bytes gathered within the memory budget and streamed to
// the raw store, sender authentication where a route asks for it before the 250, the message record
// (the working set), both durable, then 250 and the message handed to its actor. Any storage failure
// is 451, so the sending MTA tries again later: an outage never turns into bounces.
import type { SMTPServerDataStream, SMTPServerSession } from 'smtp-server';
import type { ActorSystem } from '../actor/system.ts';
import type { Config } from '../config/schema.ts';
import { ServiceError, smtpError } from '../errors/catalog.ts';
import { accept } from '../lifecycle/lifecycle.ts';
import { EVENTS } from '../log/events.ts';
import type { Logger } from '../log/logger.ts';
import { metrics } from '../metrics/metrics.ts';
import type { Parser } from '../parse/pool.ts';
import type { RouteDirectory } from '../route/directory.ts';
import type { AcceptedMessage, RawUpload, Store, StoredAuth } from '../store/queue.ts';
import * as queue from '../store/queue.ts';
import { withDeadline } from '../util/deadline.ts';
import { clientOf, domainOf, mailFromOf, senderOf } from './envelope.ts';
import { Gathered } from './gathered.ts';
import type { MemoryBudget, Reservation } from './memory-budget.ts';
import type { Refusals } from './refusals.ts';

/** How long storing one message may take before the sender is told to try again (451). */
export const STORE_DEADLINE_MS = 20_000;

/** Sender authentication before the 250: only for a message one of whose routes refuses DMARC failures. */
export interface SmtpAuthCheck {
  pool: Pick<Parser, 'authenticate'>;
  dnsServers: readonly string[];
  budgetMs: number;
}

type OnData = (
  stream: SMTPServerDataStream,
  session: SMTPServerSession,
  callback: (err?: Error | null, message?: string) => void,
) => void;

export function receiver(deps: {
  config: Pick<Config, 'maxMessageSize' | 'leaseTime'>;
  store: Store;
  directory: RouteDirectory;
  actors: ActorSystem;
  log: Logger;
  budget: MemoryBudget;
  auth: SmtpAuthCheck | undefined;
  refusals: Refusals;
  /** the share of the budget an announced SIZE took at MAIL FROM, if any */
  takeAnnouncedShare: (session: SMTPServerSession) => Reservation | undefined;
}): OnData {
  const { config, store, directory, actors, log, budget } = deps;
  const { refuse } = deps.refusals;

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
    const mailFrom = senderOf(session);
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
      mailFrom: senderOf(session),
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

  return (stream, session, callback) => {
    const id = queue.newId('m');
    const upload = queue.openRawUpload(store, id);
    // the share of the budget: the announced SIZE's, else one that grows with the bytes
    const share = deps.takeAnnouncedShare(session) ?? budget.reserve(0)!;
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
          if (!actors.hasRoom()) {
            // stored: a scheduler takes it over once its lease expires (ActorSystem.hasRoom)
            share.release();
            return;
          }
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
  };
}
