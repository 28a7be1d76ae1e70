// Owns the mapping from one raw message to its webhook payload bodies (SPEC "webhook payload JSON"):
// one UTF-8 JSON body per delivery, the shared part serialised once. Runs inside a parse worker
// thread, so it is pure (no I/O) and returns plain objects only.
import { createHash, type Hash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type {
  AttachmentCommon,
  AttachmentStream,
  HeaderLines,
  MailParserOptions,
  MessageText,
} from 'mailparser';
import { MailParser } from 'mailparser';
import { type AttachmentLinks, attachmentUrl } from '../signing/attachment-url.ts';
import { deliveryHeaders } from '../signing/webhook-signature.ts';
import type { StoredAuth } from '../store/messages.ts';
import { collectAll } from '../util/collect.ts';
import type { DefectSink, HeaderField } from './header-text.ts';
import { charsetDecoder, firstAddress, readHeaderField } from './header-text.ts';
import type { MimeStructure } from './mime-structure.ts';
import { scanStructure } from './mime-structure.ts';
import { type AuthRequest, authenticateMessage } from './sender-auth.ts';

export interface Envelope {
  mail_from: string;
  rcpt_to: string[];
}
export interface DeliverySpec {
  /** the delivery's id, sent as webhook-id */
  deliveryId: string;
  to: string[];
  plusTag?: string;
  /** the route's webhook_secret: the body is signed with it here, off the event loop */
  secret?: string;
  /** the secret a rotation replaced, while its overlap lasts: signed with too (webhook-signature) */
  previousSecret?: string;
}
export interface ParseInput {
  /** taken over by parseMessage, which lets go of it (sets it empty) once the message is parsed */
  raw: Uint8Array;
  envelope: Envelope;
  receivedAt: string;
  deliveries: DeliverySpec[];
  /** webhook-timestamp of the attempt these bodies are for; default now */
  timestampSeconds?: number;
  /** sender authentication: the results stored with the message, or what to check it with here;
   * absent: the payload has no `auth` */
  auth?: { stored: StoredAuth } | { check: AuthRequest };
  /** when attachments go by URL instead of inline; absent: all inline */
  attachments?: AttachmentPolicy;
  /** headers whose values the output names (lowercase): what routes' filters read */
  headerNames?: string[];
}
export interface AttachmentPolicy extends AttachmentLinks {
  /** the message's id, part of each URL */
  messageId: string;
  /** largest attachment sent inline, bytes (decoded) */
  inlineMax: number;
  /** largest body wanted, bytes: past it the largest inline attachments go by URL */
  bodyMax: number;
}
export interface DeliveryBody {
  deliveryId: string;
  body: Uint8Array;
  /** content-type, webhook-id, webhook-timestamp and, with a secret, both signatures */
  headers: Record<string, string>;
}
/** The three header fields the message record shows once its message is parsed. */
export interface MessageHeadline {
  message_id: string;
  from: string;
  subject: string;
}
export type Unparseable = { ok: false; code: 'unparseable'; message: string };
export type ParseOutput =
  | {
      ok: true;
      headline: MessageHeadline;
      bodies: DeliveryBody[];
      defects: string[];
      /** the sender authentication the payload carries (computed here when it was asked to check) */
      auth?: StoredAuth;
      /** the decoded values of the headers asked for by `headerNames`, by lowercase name */
      headerValues?: Record<string, string[]>;
    }
  | Unparseable;

/**
 * A piece of a body: JSON text already encoded, or bytes that go into it as base64 (the inside of a
 * JSON string). An attachment's base64 is written straight into the body in slices, so a 15 MB
 * attachment never exists as a 20 MB string, nor as a second copy of the JSON text.
 */
type BodyPart = Uint8Array | string | { base64Of: Buffer };

/**
 * An attachment as read: what the payload says of it, and its decoded bytes unless they were let go
 * while it was read (one that goes by URL is counted, never held whole).
 */
interface ReadAttachment extends Pick<AttachmentCommon, 'filename' | 'contentType' | 'headers'> {
  size: number;
  content: Buffer | undefined;
  /** SHA-256 of the decoded bytes (lowercase hex), hashed as they were read when they were let go */
  sha256: string | undefined;
}

/** The message as read: the header lines, the text bodies and the attachments in order. */
interface ReadMail {
  headerLines: HeaderLines;
  text: string | undefined;
  html: string | false | undefined;
  attachments: ReadAttachment[];
}

/** What is kept of each attachment as it is read. */
interface ReadPolicy {
  /** whether attachment `index` is still kept whole once `size` of its decoded bytes are read */
  keep(index: number, size: number): boolean;
  /** hash the bytes of an attachment that is let go as they are read (its URL's entry names it) */
  hashLetGo: boolean;
}

// Skip every conversion the payload does not carry: HTML→text is slow on large HTML, and the
// text→HTML, link and cid: rewriting would change the bodies the sender wrote.
const PARSER_OPTIONS = Object.freeze({
  skipHtmlToText: true,
  skipTextToHtml: true,
  skipTextLinks: true,
  skipImageLinks: true,
} as const);

// mailparser parses a buffer in memory: while it makes progress this thread is busy. A parse still
// unsettled after the event loop sat idle (under 10% busy) through five checks 100 ms apart is
// waiting for an event that never comes (mailparser 3.9.31 does on an inline message/rfc822 part
// that holds no message), and would hold its parse thread forever. Busy-but-slow is never idle.
const STALL_CHECK_MS = 100;
const STALL_IDLE_CHECKS = 5;
const IDLE_UTILIZATION = 0.1;
const STALLED = Symbol('stalled');
// What the parser is fed at a time (views of the raw bytes): the chunk size of mailparser's
// ChunkedPassthrough, which copies every write and queues up to 16 of them before it lets the
// writer wait. Fed 1 MiB at a time, a 25 MB message's parse held some 20 MB of copies at its
// peak; fed this, about 1 MB (docs/decisions/0019-large-message-memory.md).
const FEED_SLICE_BYTES = 64 * 1024;
// a message of this many raw bytes or more with an inline attachment as large is collected before
// its bodies are built
const COLLECT_BEFORE_BODIES_BYTES = 1024 * 1024;
// Read inline message/rfc822 parts as attachments rather than as embedded messages: the retry
// for a parse that stalled. (mailsplit takes the option; the typings do not list it.)
const NO_EMBEDDED: MailParserOptions & { ignoreEmbedded: boolean } = {
  ...PARSER_OPTIONS,
  ignoreEmbedded: true,
};

// Defects are notes for operators, not a log: a hostile message must not grow them without bound,
// neither in number nor in length (a note quotes what the sender wrote: a boundary, a charset label
// or a header name, each of which may run to the 1 MiB header limit).
const MAX_DEFECTS = 20;
const MAX_DEFECT_LENGTH = 300;
const REPLACEMENT_CHARACTER = '\uFFFD';
// mailparser decodes these with encoding-japanese, which TextDecoder need not know by these labels.
const JIS_CHARSET = /^jis|^iso-?2022-?jp/i;
const WHITESPACE_BYTES: ReadonlySet<number> = new Set([0x09, 0x0a, 0x0d, 0x20]);

const encoder = new TextEncoder();

export async function parseMessage(input: ParseInput): Promise<ParseOutput> {
  const defects = new Set<string>();
  const defect: DefectSink = (note) => {
    if (defects.size >= MAX_DEFECTS) return;
    defects.add(note.length > MAX_DEFECT_LENGTH ? `${note.slice(0, MAX_DEFECT_LENGTH - 1)}…` : note);
  };
  // an attachment larger than MAX_INLINE_ATTACHMENT goes by URL whatever else the message holds
  // (attachmentsByUrl): its bytes are counted and hashed as they are decoded, never gathered
  const policy = input.attachments;
  const reading: ReadPolicy = {
    keep: policy ? (_index, size) => size <= policy.inlineMax : () => true,
    hashLetGo: true,
  };
  const rawBytes = input.raw.byteLength;
  const [read, auth] = await Promise.all([readMessage(input.raw, defect, reading), senderAuth(input)]);
  // Nothing below needs the raw bytes: letting go of them before the bodies are built takes the
  // message's size off the peak (a 20 MB message is otherwise held three times over).
  input.raw = EMPTY;
  if (!read.ok) return read;
  const { mail, structure } = read;
  // Bodies that carry a large attachment inline are built beside it: the raw bytes, and the
  // decoder's chunks the attachment was joined from, go first. A 5 MB message rose 0-14 MB with
  // this, 10-19 MB without (docs/decisions/0019-large-message-memory.md).
  if (
    rawBytes >= COLLECT_BEFORE_BODIES_BYTES &&
    mail.attachments.some(
      (attachment) => (attachment.content?.byteLength ?? 0) >= COLLECT_BEFORE_BODIES_BYTES,
    )
  )
    await collectAll();

  const fields = readFields(mail.headerLines, defect);
  const headers = headersObject(fields);
  const first = (name: string): HeaderField | undefined => fields.find((field) => field.name === name);
  const fromHeader = first('from');
  const headline: MessageHeadline = {
    // "as written": unfolded and trimmed, not decoded (a Message-ID has no encoded-words)
    message_id: first('message-id')?.raw ?? '',
    from: (fromHeader && firstAddress(fromHeader.raw)) || input.envelope.mail_from,
    subject: first('subject')?.value ?? '',
  };
  const textBody = mail.text ?? '';
  const htmlBody = mail.html || '';

  for (const boundary of structure.unclosedBoundaries) {
    defect(`multipart boundary "${boundary}" is never closed (missing end boundary)`);
  }
  const unknownCharsets = structure.textCharsets.filter((label) => !isDecodableCharset(label));
  const charsetHint =
    unknownCharsets.length > 0
      ? ` (unsupported charset ${unknownCharsets.map((c) => `"${c}"`).join(', ')})`
      : '';
  if (textBody.includes(REPLACEMENT_CHARACTER)) {
    defect(`text_body: undecodable bytes replaced with U+FFFD${charsetHint}`);
  }
  if (htmlBody.includes(REPLACEMENT_CHARACTER)) {
    defect(`html_body: undecodable bytes replaced with U+FFFD${charsetHint}`);
  }
  if (defects.size >= MAX_DEFECTS) defects.add('further defects not listed');

  // Key order is part of the contract: message_id, from, to, subject, text_body, html_body, headers,
  // attachments, envelope, auth?, authentication_results?, plus_tag?, received_at. `to`,
  // `envelope.rcpt_to` and `plus_tag` are the only per-delivery fields, so everything between them
  // is serialised once and written into each body as it is. A delivery names only its own route's
  // recipients in both `to` and `rcpt_to`: the other recipients (Bcc, other routes, other domains)
  // are none of its receiver's business.
  const textLength = textBody.length + htmlBody.length;
  const head = `{"message_id":${json(headline.message_id)},"from":${json(headline.from)},"to":`;
  const shared: BodyPart[] = [
    // strings, written straight into each body (assemble): the text is not encoded twice over
    `,"subject":${json(headline.subject)},"text_body":${json(textBody)},"html_body":${json(htmlBody)}` +
      `,"headers":${json(headers)},"attachments":[`,
    ...attachmentsParts(mail.attachments, input.attachments, textLength),
    `],"envelope":{"mail_from":${json(input.envelope.mail_from)},"rcpt_to":`,
  ];
  const authJson = auth ? `,"auth":${json(auth.results)},"authentication_results":${json(auth.header)}` : '';
  const tail = `,"received_at":${json(input.receivedAt)}}`;

  const timestampSeconds = input.timestampSeconds ?? Math.floor(Date.now() / 1000);
  const bodies = input.deliveries.map(({ deliveryId, to, plusTag, secret, previousSecret }): DeliveryBody => {
    const toJson = json([...to]);
    const plusTagJson = plusTag === undefined ? '' : `,"plus_tag":${json(plusTag)}`;
    const body = assemble([head, toJson, ...shared, toJson, CLOSE_OBJECT, authJson, plusTagJson, tail]);
    const headers = deliveryHeaders({
      deliveryId,
      timestampSeconds,
      body,
      ...(secret ? { secret } : {}),
      ...(previousSecret ? { previousSecret } : {}),
    });
    return { deliveryId, body, headers };
  });

  const headerValues = input.headerNames
    ? Object.fromEntries(
        input.headerNames.map((name) => [name, fields.filter((f) => f.name === name).map((f) => f.value)]),
      )
    : undefined;
  return {
    ok: true,
    headline,
    bodies,
    defects: [...defects],
    ...(auth ? { auth } : {}),
    ...(headerValues ? { headerValues } : {}),
  };
}

/** The stored results, or the check this thread makes of the raw bytes (before they are let go). */
async function senderAuth(input: ParseInput): Promise<StoredAuth | undefined> {
  if (!input.auth) return undefined;
  if ('stored' in input.auth) return input.auth.stored;
  return authenticateMessage(asBuffer(input.raw), input.auth.check);
}

/** Sender authentication alone (the pool's `authenticate` task: the SMTP DMARC policy check). */
export function authenticateOnly(input: { raw: Uint8Array; check: AuthRequest }): Promise<StoredAuth> {
  return authenticateMessage(asBuffer(input.raw), input.check);
}

export type AttachmentOutput =
  | { ok: true; filename: string; content_type: string; content: Uint8Array }
  | { ok: false; code: 'unparseable' | 'not_found'; message: string };

/**
 * Attachment `index` of a stored message (the pool's `attachment` task: GET
 * /messages/{id}/attachments/{n}), found by the same parse that built the payload, so the index
 * names the same attachment. The content owns its ArrayBuffer, to be transferred, not copied.
 */
export async function extractAttachment(input: {
  raw: Uint8Array;
  index: number;
}): Promise<AttachmentOutput> {
  // only the one asked for is kept: the others are counted and let go as they are read
  const read = await readMessage(input.raw, () => {}, {
    keep: (index) => index === input.index,
    hashLetGo: false,
  });
  input.raw = EMPTY;
  if (!read.ok) return read;
  const attachment = read.mail.attachments[input.index];
  if (!attachment?.content)
    return { ok: false, code: 'not_found', message: `the message has no attachment ${input.index}` };
  const bytes = attachment.content;
  const content =
    bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength
      ? new Uint8Array(bytes.buffer, 0, bytes.byteLength)
      : new Uint8Array(bytes);
  return {
    ok: true,
    filename: attachment.filename ?? '',
    content_type: declaredContentType(attachment),
    content,
  };
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * Indexes of the attachments sent by URL: every one over `inlineMax`, then the largest while the
 * body would still be over `bodyMax` (`bodyBytes`: the body with every attachment inline).
 */
export function attachmentsByUrl(
  sizes: readonly number[],
  bodyBytes: number,
  inlineMax: number,
  bodyMax: number,
): Set<number> {
  const byUrl = new Set<number>();
  let body = bodyBytes;
  const largestFirst = sizes.map((size, index) => ({ size, index })).sort((a, b) => b.size - a.size);
  for (const { size, index } of largestFirst) {
    if (size <= inlineMax && body <= bodyMax) break;
    byUrl.add(index);
    body -= base64Length(size);
  }
  return byUrl;
}

/** The `attachments` array's entries, inline or by URL as the policy decides. */
function attachmentsParts(
  attachments: readonly ReadAttachment[],
  policy: AttachmentPolicy | undefined,
  otherBytes: number,
): BodyPart[] {
  if (!policy) return attachments.flatMap(attachmentParts);
  // the body's size with every attachment inline, near enough (the text counted as written)
  const bodyBytes = attachments.reduce(
    (sum, attachment, index) => sum + inlineLength(attachment, index),
    otherBytes,
  );
  const byUrl = attachmentsByUrl(
    attachments.map((a) => a.size),
    bodyBytes,
    policy.inlineMax,
    policy.bodyMax,
  );
  return attachments.flatMap((attachment, index) =>
    byUrl.has(index) ? [attachmentReference(attachment, index, policy)] : attachmentParts(attachment, index),
  );
}

// An entry sent by URL: {"filename", "content_type", "size", "sha256", "url", "expires_at"}, no
// content. The hash was made as the bytes were read; one kept whole (sent by URL to keep the body
// under MAX_WEBHOOK_BODY) is hashed now.
function attachmentReference(
  attachment: ReadAttachment,
  index: number,
  policy: AttachmentPolicy,
): Uint8Array {
  const { url, expiresAt } = attachmentUrl(policy, policy.messageId, index);
  const sha256 =
    attachment.sha256 ??
    createHash('sha256')
      .update(attachment.content ?? EMPTY)
      .digest('hex');
  return encoder.encode(
    `${attachmentFields(attachment, index)},"sha256":${json(sha256)},"url":${json(url)}` +
      `,"expires_at":${json(expiresAt.toISOString())}}`,
  );
}

function base64Length(bytes: number): number {
  return Math.ceil(bytes / 3) * 4;
}

/** Parses the raw bytes: the only reader of them, so they die with this frame. */
async function readMessage(
  bytes: Uint8Array,
  defect: DefectSink,
  reading: ReadPolicy,
): Promise<{ ok: true; mail: ReadMail; structure: MimeStructure } | Unparseable> {
  const raw = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (raw.every((byte) => WHITESPACE_BYTES.has(byte))) {
    return unparseable('empty message');
  }
  const structure = scanStructure(raw);
  if (structure.headerFields === 0) {
    return unparseable('no header fields: the message does not start with a "Name: value" header block');
  }
  try {
    let parsed = await parseUnlessStalled(raw, { ...PARSER_OPTIONS }, reading);
    if (parsed === STALLED) {
      parsed = await parseUnlessStalled(raw, NO_EMBEDDED, reading);
      if (parsed === STALLED)
        return unparseable('mailparser stalled: it stopped before the end of the message');
      defect('mailparser stalled on an embedded message; message/rfc822 parts kept as attachments');
    }
    return { ok: true, mail: parsed, structure };
  } catch (error) {
    // mailsplit's limits (e.g. a header block over 1 MiB) are the failures that end up here
    return unparseable(`mailparser: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** readMail, or STALLED once the event loop has idled while it still had not settled. */
function parseUnlessStalled(
  raw: Buffer,
  options: MailParserOptions,
  reading: ReadPolicy,
): Promise<ReadMail | typeof STALLED> {
  return new Promise((resolve, reject) => {
    let idleChecks = 0;
    let last = performance.eventLoopUtilization();
    // ref'd on purpose: a stalled parse leaves nothing else to keep the event loop alive
    const watch = setInterval(() => {
      const now = performance.eventLoopUtilization();
      idleChecks =
        performance.eventLoopUtilization(now, last).utilization < IDLE_UTILIZATION ? idleChecks + 1 : 0;
      last = now;
      if (idleChecks >= STALL_IDLE_CHECKS) {
        clearInterval(watch);
        resolve(STALLED);
      }
    }, STALL_CHECK_MS);
    readMail(raw, options, reading).then(
      (mail) => {
        clearInterval(watch);
        resolve(mail);
      },
      (error: unknown) => {
        clearInterval(watch);
        reject(error);
      },
    );
  });
}

/**
 * What mailparser's simpleParser reads (the same MailParser, options and order of attachments, so
 * an attachment's index names the same one), except that an attachment's decoded bytes are kept
 * only while `policy.keep` says so: past it they are counted (and hashed) and let go as they arrive.
 */
function readMail(raw: Buffer, options: MailParserOptions, policy: ReadPolicy): Promise<ReadMail> {
  return new Promise((resolve, reject) => {
    const mail: ReadMail = { headerLines: [], text: undefined, html: undefined, attachments: [] };
    const parser = new MailParser(options);
    // MailParser may emit a non-fatal 'error' and still reach 'end': the first outcome wins
    let settled = false;
    const fail = (error: unknown) => {
      if (settled) return;
      settled = true;
      reject(error);
    };
    parser.on('error', fail);
    parser.on('headers', () => {
      mail.headerLines = (parser as unknown as { headerLines: HeaderLines }).headerLines;
    });
    let reading = false;
    const read = (): void => {
      reading = true;
      const data = parser.read() as AttachmentStream | MessageText | null;
      if (data === null) {
        reading = false;
        return;
      }
      if (data.type === 'text') {
        // the HTML is read from the parser at the end, as simpleParser does
        if ('text' in data) mail.text = data.text;
        read();
        return;
      }
      const index = mail.attachments.length;
      const attachment: ReadAttachment = {
        filename: data.filename,
        contentType: data.contentType,
        headers: data.headers,
        size: 0,
        content: undefined,
        sha256: undefined,
      };
      mail.attachments.push(attachment);
      let chunks: Buffer[] | undefined = [];
      let hash: Hash | undefined;
      data.content.on('data', (chunk: Buffer) => {
        attachment.size += chunk.length;
        if (chunks && policy.keep(index, attachment.size)) {
          chunks.push(chunk);
          return;
        }
        // let go: what was kept so far goes into the hash, then each chunk as it comes
        if (chunks && policy.hashLetGo) {
          hash = createHash('sha256');
          for (const kept of chunks) hash.update(kept);
        }
        chunks = undefined;
        hash?.update(chunk);
      });
      data.content.on('end', () => {
        if (chunks) attachment.content = Buffer.concat(chunks, attachment.size);
        if (hash) attachment.sha256 = hash.digest('hex');
        chunks = undefined;
        data.release();
        read();
      });
    };
    parser.on('readable', () => {
      if (!reading) read();
    });
    parser.on('end', () => {
      if (settled) return;
      settled = true;
      // as simpleParser leaves it with skipImageLinks: the HTML as a string, false when there is none
      const html = (parser as unknown as { html?: string | Buffer }).html;
      mail.html = html ? html.toString() : false;
      resolve(mail);
    });
    // in slices, as if it arrived: given whole, mailsplit copied the message once more, and its
    // base64 decoder turned a large attachment into one string of its size
    let offset = 0;
    const feed = (): void => {
      while (offset < raw.length) {
        const slice = raw.subarray(offset, offset + FEED_SLICE_BYTES);
        offset += slice.length;
        if (!parser.write(slice)) {
          parser.once('drain', feed);
          return;
        }
      }
      parser.end();
    };
    feed();
  });
}

function unparseable(message: string): Unparseable {
  return { ok: false, code: 'unparseable', message };
}

function readFields(lines: HeaderLines, defect: DefectSink): HeaderField[] {
  const fields: HeaderField[] = [];
  let skipped = 0;
  for (const { line } of lines) {
    const field = readHeaderField(line, defect);
    if (field === null) skipped++;
    else fields.push(field);
  }
  if (skipped > 0) defect(`${skipped} header line(s) without a valid "Name:" skipped`);
  return fields;
}

// Null prototype: a header named __proto__ must become a key, not a prototype.
function headersObject(fields: readonly HeaderField[]): Record<string, string | string[]> {
  const headers: Record<string, string | string[]> = Object.create(null);
  for (const { name, value } of fields) {
    const seen = headers[name];
    if (seen === undefined) headers[name] = value;
    else if (typeof seen === 'string') headers[name] = [seen, value];
    else seen.push(value);
  }
  return headers;
}

// An `attachments[]` entry: {"filename", "content_type", "size", "content": base64}, in that order.
function attachmentParts(attachment: ReadAttachment, index: number): BodyPart[] {
  const fields = `${attachmentFields(attachment, index)},"content":"`;
  // attachmentsByUrl sends every attachment over MAX_INLINE_ATTACHMENT by URL: only they are let go
  if (!attachment.content) throw new Error(`attachment ${index} was not kept, yet it is to go inline`);
  return [encoder.encode(fields), { base64Of: attachment.content }, CLOSE_STRING_AND_OBJECT];
}

/** The bytes of attachmentParts' entry, without building it. */
function inlineLength(attachment: ReadAttachment, index: number): number {
  return (
    Buffer.byteLength(`${attachmentFields(attachment, index)},"content":"`, 'utf8') +
    base64Length(attachment.size) +
    CLOSE_STRING_AND_OBJECT.byteLength
  );
}

// What an entry starts with, inline or by URL: `{"filename", "content_type", "size"`.
function attachmentFields(attachment: ReadAttachment, index: number): string {
  return (
    `${index === 0 ? '' : ','}{"filename":${json(attachment.filename ?? '')}` +
    `,"content_type":${json(declaredContentType(attachment))},"size":${attachment.size}`
  );
}

// The type the sender declared. mailparser's own contentType replaces application/octet-stream with
// a guess from the file name extension, which is not what the message says.
function declaredContentType(attachment: Pick<ReadAttachment, 'headers' | 'contentType'>): string {
  const header = attachment.headers.get('content-type');
  if (
    typeof header === 'object' &&
    header !== null &&
    'params' in header &&
    typeof header.value === 'string'
  ) {
    return header.value.toLowerCase();
  }
  return attachment.contentType;
}

function isDecodableCharset(label: string): boolean {
  return JIS_CHARSET.test(label) || charsetDecoder(label) !== null;
}

function json(value: unknown): string {
  return JSON.stringify(value);
}

const EMPTY = new Uint8Array(0);
const CLOSE_OBJECT = encoder.encode('}');

const CLOSE_STRING_AND_OBJECT = encoder.encode('"}');
// a multiple of 3, so every slice's base64 ends without padding and the slices join seamlessly
const BASE64_SLICE_BYTES = 3 * 64 * 1024;

function partLength(part: BodyPart): number {
  if (typeof part === 'string') return Buffer.byteLength(part, 'utf8');
  return part instanceof Uint8Array ? part.byteLength : base64Length(part.base64Of.length);
}

// A fresh, exactly sized buffer per body: each body's ArrayBuffer is transferred to the main thread
// on its own, and must not share memory with another body or Node's Buffer pool.
function assemble(parts: readonly BodyPart[]): Uint8Array {
  let length = 0;
  for (const part of parts) length += partLength(part);
  const out = Buffer.from(new ArrayBuffer(length));
  let offset = 0;
  for (const part of parts) {
    if (typeof part === 'string') {
      offset += out.write(part, offset, 'utf8');
      continue;
    }
    if (part instanceof Uint8Array) {
      out.set(part, offset);
      offset += part.byteLength;
      continue;
    }
    const bytes = part.base64Of;
    for (let start = 0; start < bytes.length; start += BASE64_SLICE_BYTES) {
      offset += out.write(
        bytes.subarray(start, start + BASE64_SLICE_BYTES).toString('base64'),
        offset,
        'latin1',
      );
    }
  }
  return new Uint8Array(out.buffer);
}
