// The inbound MX: smtp-server set up for receiving (no AUTH, no relaying) from two parts, the
// session's policy (session-policy.ts: limits, MAIL FROM and RCPT TO checks) and the receive path
// (receive.ts: DATA, stored durably, then 250), which answer refusals alike (refusals.ts).
import { SMTPServer } from 'smtp-server';
import type { ActorSystem } from '../actor/system.ts';
import type { Config } from '../config/schema.ts';
import type { Logger } from '../log/logger.ts';
import type { RouteDirectory } from '../route/directory.ts';
import type { Store } from '../store/queue.ts';
import type { MemoryBudget } from './memory-budget.ts';
import { receiver, type SmtpAuthCheck } from './receive.ts';
import { refusals } from './refusals.ts';
import { observeLibraryRefusals, useOwnEnhancedCodes } from './replies.ts';
import { enforceSessionLimit, type SessionConfig, sessionPolicy } from './session-policy.ts';

export { type SmtpAuthCheck, STORE_DEADLINE_MS } from './receive.ts';
export { CLOSE_TIMEOUT_MS, enforceSessionLimit, MAX_RECIPIENTS } from './session-policy.ts';

export interface SmtpDeps {
  config: SessionConfig & Pick<Config, 'leaseTime' | 'smtpSessionLimit'>;
  store: Store;
  directory: RouteDirectory;
  actors: ActorSystem;
  logger: Logger;
  /** the worker's MEMORY_BUDGET: what a message takes of it is given back when its parse ends */
  budget: MemoryBudget;
  /** absent: no route's DMARC policy is applied at SMTP time */
  auth?: SmtpAuthCheck;
}

export function createSmtpServer(deps: SmtpDeps): SMTPServer {
  useOwnEnhancedCodes();
  const { config, directory, budget } = deps;
  const log = deps.logger.child({ component: 'smtp' });
  const refused = refusals(log);
  const policy = sessionPolicy({ config, directory, budget, log, refusals: refused });
  const onData = receiver({
    config,
    store: deps.store,
    directory,
    actors: deps.actors,
    log,
    budget,
    auth: deps.auth,
    refusals: refused,
    takeAnnouncedShare: policy.takeAnnouncedShare,
  });
  const server = new SMTPServer({ ...policy.options, onData });
  observeLibraryRefusals((connection, reply) => {
    if (server.connections.has(connection as never))
      refused.refuse(connection.session, 'too_big', undefined, reply);
  });
  // the idle timeout alone lets a slow-drip client hold a session forever
  enforceSessionLimit(server, config.smtpSessionLimit);
  return server;
}
