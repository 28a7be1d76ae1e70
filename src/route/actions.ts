// What a route does with the recipients it matches: deliver them to its webhook (the default),
// refuse them at RCPT (`reject`), or accept and record them without delivering (`drop`).

export const ROUTE_ACTIONS = Object.freeze(['webhook', 'reject', 'drop'] as const);
export type RouteAction = (typeof ROUTE_ACTIONS)[number];

/** What a `reject` route answers at RCPT when it names no reply of its own. */
export const DEFAULT_REJECT_REPLY = '550 5.7.1 Mail to this address is refused';

/** A reply RCPT may give: 45x or 55x, an enhanced code of the same class, printable ASCII text. */
const REJECT_REPLY = /^([45])5\d ([45])\.\d{1,3}\.\d{1,3} [\x20-\x7e]{1,200}$/;

export function isRejectReply(reply: string): boolean {
  const match = REJECT_REPLY.exec(reply);
  return match !== null && match[1] === match[2];
}
