// The benchmark's message mix, generated deterministically (nothing fetched): for sequence number
// n, the same class, size, recipients and bytes every run. Templates are built once per class and
// size variant; a message is its unique headers (Message-ID, X-Bench-Seq, a numbered Subject)
// followed by a template, already dot-stuffed and CRLF-terminated for SMTP.

/** 'huge' (a 20 MB attachment) is not in the mix: the memory case sends it on its own. */
export type MessageClass = 'text' | 'alternative' | 'attachment' | 'large' | 'html' | 'adversarial' | 'huge';

/** Share of each class in the mix, in percent (the issue's figures). */
export const MIX: ReadonlyArray<{ kind: MessageClass; percent: number }> = [
  { kind: 'text', percent: 50 },
  { kind: 'alternative', percent: 30 },
  { kind: 'attachment', percent: 12 },
  { kind: 'large', percent: 5 },
  { kind: 'html', percent: 2 },
  { kind: 'adversarial', percent: 1 },
];
/** Messages with three recipients, in percent. */
export const MULTI_RECIPIENT_PERCENT = 10;
export const BENCH_DOMAIN = 'bench.test';
const VARIANTS = 8;

/** mulberry32: a small, fast, seedable generator; the same seed gives the same mix. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS =
  'the quick brown fox jumps over a lazy dog while invoices receipts orders tickets and replies arrive at the inbound router every second of the day'.split(
    ' ',
  );

function prose(rand: () => number, bytes: number, width = 72): string {
  const lines: string[] = [];
  let size = 0;
  while (size < bytes) {
    let line = '';
    while (line.length < width) line += `${WORDS[Math.floor(rand() * WORDS.length)]} `;
    lines.push(line.trimEnd());
    size += line.length + 1;
  }
  return lines.join('\r\n');
}

function base64Lines(rand: () => number, bytes: number): string {
  const words = new Uint32Array(Math.ceil(bytes / 4));
  for (let i = 0; i < words.length; i++) words[i] = Math.floor(rand() * 0x100000000);
  const data = Buffer.from(words.buffer, 0, bytes);
  return (data.toString('base64').match(/.{1,76}/g) ?? []).join('\r\n');
}

function between(rand: () => number, min: number, max: number): number {
  return Math.floor(min + rand() * (max - min));
}

function template(kind: MessageClass, variant: number): string {
  const rand = random(1000 * (MIX.findIndex((m) => m.kind === kind) + 2) + variant);
  const b = `=_bench_${kind}_${variant}`;
  switch (kind) {
    case 'text':
      return `Content-Type: text/plain; charset=utf-8\r\n\r\n${prose(rand, between(rand, 2048, 4096))}\r\n`;
    case 'alternative': {
      const half = between(rand, 20 * 1024, 50 * 1024) / 2;
      const html = `<html><body>${prose(rand, half).replaceAll('\r\n', '<br>\r\n')}</body></html>`;
      return (
        `Content-Type: multipart/alternative; boundary="${b}"\r\n\r\n` +
        `--${b}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n${prose(rand, half)}\r\n` +
        `--${b}\r\nContent-Type: text/html; charset=utf-8\r\n\r\n${html}\r\n--${b}--\r\n`
      );
    }
    case 'attachment':
    case 'large':
    case 'huge': {
      const bytes =
        kind === 'attachment'
          ? 150 * 1024
          : kind === 'huge'
            ? 20 * 1024 * 1024 * 0.73 // base64 and line ends make it 20 MB on the wire
            : between(rand, 1.5 * 1024 * 1024, 5 * 1024 * 1024);
      return (
        `Content-Type: multipart/mixed; boundary="${b}"\r\n\r\n` +
        `--${b}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n${prose(rand, 1500)}\r\n` +
        `--${b}\r\nContent-Type: application/pdf; name="doc${variant}.pdf"\r\n` +
        `Content-Disposition: attachment; filename="doc${variant}.pdf"\r\nContent-Transfer-Encoding: base64\r\n\r\n` +
        `${base64Lines(rand, bytes)}\r\n--${b}--\r\n`
      );
    }
    case 'html':
      return `Content-Type: text/html; charset=utf-8\r\n\r\n<html><body><table>${prose(rand, 300 * 1024)
        .split('\r\n')
        .map((line) => `<tr><td>${line}</td></tr>`)
        .join('\r\n')}</table></body></html>\r\n`;
    case 'adversarial':
      return adversarial(rand, variant, b);
  }
}

/** Three kinds in turn: 2 MB of format=flowed text, 200 parts, odd charsets and encodings. */
function adversarial(rand: () => number, variant: number, b: string): string {
  if (variant % 3 === 0) {
    // flowed: every line ends in a space, so the parser joins 2 MB into long paragraphs
    const flowed = prose(rand, 2 * 1024 * 1024, 70).replaceAll('\r\n', ' \r\n');
    return `Content-Type: text/plain; charset=utf-8; format=flowed; delsp=yes\r\n\r\n${flowed}\r\n`;
  }
  if (variant % 3 === 1) {
    const parts = Array.from(
      { length: 200 },
      (_, i) =>
        `--${b}\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\npart ${i} ${prose(rand, 100)}\r\n`,
    );
    return `Content-Type: multipart/mixed; boundary="${b}"\r\n\r\n${parts.join('')}--${b}--\r\n`;
  }
  const koi8 = Buffer.from([0xf0, 0xd2, 0xc9, 0xd7, 0xc5, 0xd4]).toString('latin1');
  return (
    `Content-Type: multipart/mixed; boundary="${b}"\r\n\r\n` +
    `--${b}\r\nContent-Type: text/plain; charset=koi8-r\r\nContent-Transfer-Encoding: 8bit\r\n\r\n${koi8.repeat(500)}\r\n` +
    `--${b}\r\nContent-Type: text/plain; charset=utf-7\r\n\r\n${'Hi Mom -+Jjo--!\r\n'.repeat(300)}` +
    `--${b}\r\nContent-Type: text/plain; charset=iso-2022-jp\r\nContent-Transfer-Encoding: 7bit\r\n\r\n${'\x1b$B$3$s$K$A$O\x1b(B\r\n'.repeat(300)}` +
    `--${b}\r\nContent-Type: text/plain; charset=x-unknown-charset\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n${'caf=E9 =\r\n'.repeat(300)}` +
    `--${b}--\r\n`
  );
}

export interface BenchMessage {
  seq: number;
  kind: MessageClass;
  from: string;
  to: string[];
  /** the DATA payload: dot-stuffed, CRLF lines, without the terminating "." line */
  data: Buffer;
}

/** Lines starting with "." get another one (RFC 5321 4.5.2); the templates are built to avoid it. */
function dotStuff(text: string): string {
  return text.replace(/(^|\r\n)\./g, '$1..');
}

export class MessageMix {
  private readonly templates = new Map<string, Buffer>();
  private readonly seed: number;

  constructor(seed = 42) {
    this.seed = seed;
  }

  /** The class and recipient count of message n, without building it. */
  shape(seq: number): { kind: MessageClass; variant: number; recipients: number } {
    const rand = random(this.seed * 1_000_003 + seq);
    let pick = rand() * 100;
    let kind: MessageClass = 'text';
    for (const entry of MIX) {
      if (pick < entry.percent) {
        kind = entry.kind;
        break;
      }
      pick -= entry.percent;
    }
    return {
      kind,
      variant: Math.floor(rand() * VARIANTS),
      recipients: rand() * 100 < MULTI_RECIPIENT_PERCENT ? 3 : 1,
    };
  }

  message(seq: number, only?: MessageClass): BenchMessage {
    const shape = this.shape(seq);
    const kind = only ?? shape.kind;
    const key = `${kind}/${shape.variant}`;
    let body = this.templates.get(key);
    if (!body) {
      body = Buffer.from(dotStuff(template(kind, shape.variant)), 'latin1');
      this.templates.set(key, body);
    }
    const to =
      shape.recipients === 1
        ? [`u${seq}@${BENCH_DOMAIN}`]
        : ['a', 'b', 'c'].map((tag) => `u${seq}${tag}@${BENCH_DOMAIN}`);
    const head =
      `From: Load <load@sender.example>\r\nTo: ${to.join(', ')}\r\n` +
      `Subject: bench ${seq} ${kind}\r\nMessage-ID: <bench-${seq}-${this.seed}@sender.example>\r\n` +
      `Date: Sat, 21 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\nX-Bench-Seq: ${seq}\r\n`;
    return {
      seq,
      kind,
      from: 'load@sender.example',
      to,
      data: Buffer.concat([Buffer.from(head, 'latin1'), body]),
    };
  }
}
