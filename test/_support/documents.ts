// Message documents written straight into the working set, as the database may hold them: for
// tests of what the service does with a document it finds (a fence, a stuck state, a takeover).
import type { MessageDoc } from '../../src/store/messages.ts';

/**
 * A message in flight to `recipient`, at epoch 1, version 1, nothing parsed yet; `fields` on top
 * (a `from` given there is the envelope's sender too). Its type is MessageDoc with `fields`' own
 * (an AcceptedMessage, given the lifecycle's state and history).
 */
export function workingSetDoc<Fields extends Partial<MessageDoc> = Partial<MessageDoc>>(
  id: string,
  recipient: string,
  fields: Fields = {} as Fields,
): MessageDoc & Fields {
  const at = fields.received_at ?? new Date();
  const from = fields.from ?? 's@sender.example';
  return {
    _id: id,
    message_id: '',
    from,
    to: [recipient],
    subject: '',
    received_at: at,
    state: 'queued',
    envelope: { mail_from: from, rcpt_to: [recipient] },
    domains: [recipient.slice(recipient.lastIndexOf('@') + 1)],
    size: 10,
    history: [],
    attempts: [],
    deliveries: [],
    version: 1,
    lease_epoch: 1,
    ...fields,
  };
}
