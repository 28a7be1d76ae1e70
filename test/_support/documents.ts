// Message documents written straight into the working set, as the database may hold them: for
// tests of what the service does with a document it finds (a fence, a stuck state, a takeover).
import type { MessageDoc } from '../../src/store/messages.ts';

/** A message in flight to `recipient`, at epoch 1, version 1, nothing parsed yet; `fields` on top. */
export function workingSetDoc(id: string, recipient: string, fields: Partial<MessageDoc> = {}): MessageDoc {
  const at = fields.received_at ?? new Date();
  return {
    _id: id,
    message_id: '',
    from: 's@sender.example',
    to: [recipient],
    subject: '',
    received_at: at,
    state: 'queued',
    envelope: { mail_from: 's@sender.example', rcpt_to: [recipient] },
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
