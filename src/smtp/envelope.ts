// What a session's envelope says, in the forms the checks and the message record use.
import type { SMTPServerSession } from 'smtp-server';

/** The client as SPF sees it: an IPv4 address as such, not IPv4-mapped IPv6 (a dual-stack listener). */
export function clientOf(session: SMTPServerSession): { ip: string; helo: string } {
  return {
    ip: session.remoteAddress.replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/i, ''),
    helo: session.hostNameAppearsAs ?? '',
  };
}

/** The envelope sender as given, '' for a bounce. */
export function senderOf(session: SMTPServerSession): string {
  return session.envelope.mailFrom ? session.envelope.mailFrom.address : '';
}

/** The envelope sender as routes' filters see it: lowercase, '' for a bounce. */
export function mailFromOf(session: SMTPServerSession): string {
  return senderOf(session).toLowerCase();
}

export function domainOf(address: string): string {
  return address.slice(address.lastIndexOf('@') + 1).toLowerCase();
}
