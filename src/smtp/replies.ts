// Our SMTP replies carry their own enhanced status code. smtp-server prefixes every reply with a
// code it picks from the numeric reply alone (550 is always 5.1.1), which cannot tell "relaying
// denied" (5.7.1) from "no such user" (5.1.1). So a reply text that already starts with an
// enhanced code of the reply's class is sent as it is. Library replies are unchanged.
import { SMTPConnection } from 'smtp-server/lib/smtp-connection.js';

const ENHANCED_PREFIX = /^([245])\.\d{1,3}\.\d{1,3} /;

type Send = (code: number, data: unknown, context?: unknown) => void;

let installed = false;

/** The session of the connection a reply goes to (what smtp-server keeps on it). */
export interface ConnectionLike {
  session: import('smtp-server').SMTPServerSession;
}

/**
 * Told of the refusals smtp-server sends by itself, before any of our callbacks runs: today the
 * 552 for a SIZE= announced in MAIL FROM over the limit.
 */
let onLibraryRefusal: ((connection: ConnectionLike, reply: string) => void) | undefined;

export function observeLibraryRefusals(listener: (connection: ConnectionLike, reply: string) => void): void {
  onLibraryRefusal = listener;
}

export function useOwnEnhancedCodes(): void {
  if (installed) return;
  installed = true;
  const proto = SMTPConnection.prototype as unknown as { send: Send };
  const librarySend = proto.send;
  proto.send = function send(this: unknown, code, data, context) {
    // at MAIL FROM the sender is not set yet; at the end of DATA it is, and onData reports that one
    if (
      code === 552 &&
      context === 'MESSAGE_TOO_BIG' &&
      !(this as ConnectionLike).session?.envelope?.mailFrom
    )
      onLibraryRefusal?.(this as ConnectionLike, `552 5.3.4 ${String(data)}`);
    const match = typeof data === 'string' && context === undefined ? ENHANCED_PREFIX.exec(data) : null;
    if (match && match[1] === String(code)[0]) return librarySend.call(this, code, data, false);
    return librarySend.call(this, code, data, context);
  };
}
