// The read model of messages, for the API and a replay's look-up: one by id, newest-first listings,
// the raw bytes. Reads only; every move is the queue seam's (queue.ts).
export { isId } from './ids.ts';
export type { MessageSummary } from './listing.ts';
export type { MessageDoc, ReplayTarget } from './messages.ts';
export { openRawStream, readRaw } from './raw.ts';
export { findDeadLetter, getMessage, listMessages, locateMessage, type MessageQuery } from './reads.ts';
