// Owns turning one raw header line (as mailsplit hands it over: a latin1 "binary" string, folds kept)
// into the text the webhook payload carries: unfolded, 8-bit bytes read as UTF-8, RFC 2047
// encoded-words decoded. Also owns picking the first address out of an address-list value.
// Pure string work, no mailparser: its `headers` Map holds structured values the payload does not want.
import { TextDecoder } from 'node:util';

export interface HeaderField {
  /** lowercase field name */
  name: string;
  /** unfolded, trimmed, 8-bit bytes decoded; encoded-words left as written */
  raw: string;
  /** `raw` with RFC 2047 encoded-words decoded */
  value: string;
}

// RFC 5322 §3.6.8 field-name: printable US-ASCII except ':'.
const FIELD_NAME = /^[\x21-\x39\x3b-\x7e]+$/;
// RFC 2047 §2: encoded-text holds neither '?' nor whitespace. The charset may carry an RFC 2231
// language suffix (`UTF-8*en`), dropped before decoding.
const ENCODED_WORD = /=\?([^?\s]+)\?([bBqQ])\?([^?\s]*)\?=/g;
const LINEAR_WHITESPACE = /^[ \t]*$/;
const FOLD = /\r?\n(?=[ \t])/g;
const EIGHT_BIT = /[\x80-\xff]/;
const QP_HEX = /^[0-9a-fA-F]{2}$/;

const UTF8_STRICT = new TextDecoder('utf-8', { fatal: true });
// Bytes that are not UTF-8 in a header are almost always a Western legacy charset; windows-1252 maps
// every byte, so nothing is dropped.
const LEGACY_FALLBACK = new TextDecoder('windows-1252');

const decoders = new Map<string, TextDecoder | null>();

/** A TextDecoder for a MIME charset label, or null when the runtime does not know it. */
export function charsetDecoder(label: string): TextDecoder | null {
  const key = label.trim().toLowerCase();
  let decoder = decoders.get(key);
  if (decoder === undefined) {
    try {
      decoder = new TextDecoder(key);
    } catch {
      decoder = null;
    }
    decoders.set(key, decoder);
  }
  return decoder;
}

export type DefectSink = (note: string) => void;

/**
 * Splits one header line into name and value. Returns null for a line that is not a header field
 * (no colon, or a name with spaces or control characters): such lines are skipped, not guessed at.
 */
export function readHeaderField(line: string, defect: DefectSink): HeaderField | null {
  const colon = line.indexOf(':');
  if (colon <= 0) return null;
  // obs-FWS between name and colon (RFC 5322 §4.5.3) is tolerated, as mailsplit does.
  const name = line.slice(0, colon).trimEnd();
  if (!FIELD_NAME.test(name)) return null;
  const lowerName = name.toLowerCase();
  const raw = headerBytesToText(line.slice(colon + 1).replace(FOLD, ''), lowerName, defect).trim();
  return { name: lowerName, raw, value: decodeEncodedWords(raw, lowerName, defect).trim() };
}

// SMTPUTF8 (RFC 6532) headers carry raw UTF-8; anything else 8-bit is a sender bug we still read.
function headerBytesToText(binary: string, name: string, defect: DefectSink): string {
  if (!EIGHT_BIT.test(binary)) return binary;
  const bytes = Buffer.from(binary, 'latin1');
  try {
    return UTF8_STRICT.decode(bytes);
  } catch {
    defect(`header "${name}": 8-bit bytes are not UTF-8, read as windows-1252`);
    return LEGACY_FALLBACK.decode(bytes);
  }
}

interface WordRun {
  charset: string;
  decoder: TextDecoder;
  chunks: Uint8Array[];
}

/**
 * Decodes RFC 2047 encoded-words. Whitespace between two adjacent encoded-words is dropped (§6.2),
 * and adjacent words in the same charset are joined as bytes before decoding, because senders do
 * split one multi-byte character across two words. A word in a charset the runtime cannot decode is
 * kept as written.
 */
export function decodeEncodedWords(text: string, name: string, defect: DefectSink): string {
  if (!text.includes('=?')) return text;
  let out = '';
  let last = 0;
  let run: WordRun | null = null;
  for (const match of text.matchAll(ENCODED_WORD)) {
    const [word, label = '', encoding = '', payload = ''] = match;
    const between = text.slice(last, match.index);
    if (run === null || !LINEAR_WHITESPACE.test(between)) {
      out += flushRun(run) + between;
      run = null;
    }
    last = match.index + word.length;
    const charset = label.split('*')[0]!.toLowerCase();
    const decoder = charsetDecoder(charset);
    if (decoder === null) {
      defect(`header "${name}": unknown charset "${charset}" in an encoded-word, kept as written`);
      out += flushRun(run) + word;
      run = null;
      continue;
    }
    const bytes = encoding === 'b' || encoding === 'B' ? Buffer.from(payload, 'base64') : decodeQ(payload);
    if (run !== null && run.charset === charset) {
      run.chunks.push(bytes);
    } else {
      out += flushRun(run);
      run = { charset, decoder, chunks: [bytes] };
    }
  }
  return out + flushRun(run) + text.slice(last);
}

function flushRun(run: WordRun | null): string {
  if (run === null) return '';
  return run.decoder.decode(run.chunks.length === 1 ? run.chunks[0] : Buffer.concat(run.chunks));
}

// RFC 2047 §4.2 "Q": '_' is a space, =XX a byte, anything else itself.
function decodeQ(payload: string): Uint8Array {
  const bytes = new Uint8Array(payload.length);
  let length = 0;
  for (let i = 0; i < payload.length; i++) {
    const char = payload.charCodeAt(i);
    const hex = payload.slice(i + 1, i + 3);
    if (char === 0x5f) {
      bytes[length++] = 0x20;
    } else if (char === 0x3d && QP_HEX.test(hex)) {
      bytes[length++] = Number.parseInt(hex, 16);
      i += 2;
    } else {
      bytes[length++] = char & 0xff;
    }
  }
  return bytes.subarray(0, length);
}

/**
 * The addr-spec of the first mailbox in an address-list value ('' when there is none), e.g. for
 * `"Doe, J" <j@x>, k@y` → `j@x`; group names (`team: a@x;`) and comments are skipped. Works on the
 * value as written: encoded-words may only be display names (RFC 2047 §5), and decoding them first
 * could conjure a '<' or ',' that was never syntax.
 */
export function firstAddress(value: string): string {
  let bare = '';
  let i = 0;
  while (i < value.length) {
    const char = value[i];
    if (char === '"') {
      const end = skipQuoted(value, i);
      bare += value.slice(i, end);
      i = end;
    } else if (char === '(') {
      i = skipComment(value, i);
      bare += ' ';
    } else if (char === '<') {
      const close = value.indexOf('>', i + 1);
      const end = close === -1 ? value.length : close;
      // obs-route (`<@relay:user@x>`) is dropped: only the addr-spec after the last ':' is an address.
      const inner = value.slice(i + 1, end);
      const address = withoutFoldingSpace(inner.slice(inner.lastIndexOf(':') + 1));
      if (address !== '') return address;
      bare = '';
      i = end + 1;
    } else if (char === ',' || char === ';') {
      const address = bareAddress(bare);
      if (address !== '') return address;
      bare = '';
      i++;
    } else if (char === ':') {
      // what came before was a group's display name
      bare = '';
      i++;
    } else {
      bare += char;
      i++;
    }
  }
  return bareAddress(bare);
}

function bareAddress(text: string): string {
  const address = withoutFoldingSpace(text);
  return address.includes('@') ? address : '';
}

// Whitespace outside quoted strings is not part of an addr-spec (obs syntax allows it around '.' and '@').
function withoutFoldingSpace(text: string): string {
  let out = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const char = text[i]!;
    if (char === '\\' && quoted) {
      out += text.slice(i, i + 2);
      i++;
    } else {
      if (char === '"') quoted = !quoted;
      if (quoted || !/\s/.test(char)) out += char;
    }
  }
  return out;
}

function skipQuoted(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i++) {
    if (text[i] === '\\') i++;
    else if (text[i] === '"') return i + 1;
  }
  return text.length;
}

function skipComment(text: string, start: number): number {
  let depth = 0;
  for (let i = start; i < text.length; i++) {
    const char = text[i];
    if (char === '\\') i++;
    else if (char === '(') depth++;
    else if (char === ')' && --depth === 0) return i + 1;
  }
  return text.length;
}
