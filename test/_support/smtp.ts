// SMTP clients for tests: nodemailer for ordinary sending, and a line-level dialog for asserting
// exact replies (codes, enhanced codes) and for hostile input.
import net from 'node:net';
import nodemailer from 'nodemailer';

export interface SendResult {
  ok: boolean;
  /** the server's reply to the end of data, or to whatever refused the message */
  response: string;
  responseCode?: number;
  /** the command a refusal answered (MAIL FROM, RCPT TO, DATA) */
  command?: string;
  messageId?: string;
}

/**
 * Sends one raw message (its exact bytes) with the given envelope (with `size`, announced as SIZE at
 * MAIL FROM). Never throws for an SMTP refusal.
 */
export async function sendRaw(
  port: number,
  envelope: { from: string; to: string[]; size?: number },
  raw: string | Buffer,
): Promise<SendResult> {
  const transport = nodemailer.createTransport({
    host: '127.0.0.1',
    port,
    secure: false,
    ignoreTLS: true,
    connectionTimeout: 10_000,
    greetingTimeout: 10_000,
    socketTimeout: 30_000,
  });
  try {
    const info = await transport.sendMail({ envelope, raw });
    return { ok: true, response: info.response, messageId: info.messageId };
  } catch (err) {
    const e = err as { response?: string; responseCode?: number; command?: string; message: string };
    return {
      ok: false,
      response: e.response ?? e.message,
      ...(e.responseCode ? { responseCode: e.responseCode } : {}),
      ...(e.command ? { command: e.command } : {}),
    };
  } finally {
    transport.close();
  }
}

/** The id the service gave the message, from its 250 reply ("... queued as m-..."). */
export function acceptedId(result: SendResult): string {
  const match = /queued as (m-\d{22})/.exec(result.response);
  if (!match) throw new Error(`no message id in reply: ${result.response}`);
  return match[1]!;
}

/**
 * A line-level SMTP session: `send` writes a command and resolves the complete reply (multi-line
 * replies joined), so tests can assert exact codes.
 */
export class SmtpDialog {
  private readonly socket: net.Socket;
  private buffer = '';
  private waiters: Array<(reply: string) => void> = [];
  closed = false;

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.setEncoding('utf8');
    socket.on('data', (data: string) => {
      this.buffer += data;
      this.drain();
    });
    socket.on('close', () => {
      this.closed = true;
      for (const waiter of this.waiters.splice(0)) waiter('');
    });
    socket.on('error', () => {});
  }

  static async open(port: number): Promise<{ dialog: SmtpDialog; greeting: string }> {
    const socket = net.connect({ port, host: '127.0.0.1' });
    const dialog = new SmtpDialog(socket);
    const greeting = await dialog.reply();
    return { dialog, greeting };
  }

  private drain(): void {
    // a reply ends with a line "ddd text" (a space, not a hyphen, after the code)
    for (;;) {
      const match = /(^|\r\n)(\d{3}) [^\r\n]*\r\n/.exec(this.buffer);
      if (!match || this.waiters.length === 0) return;
      const end = match.index + match[0].length;
      const reply = this.buffer.slice(0, end).replace(/^\r\n/, '');
      this.buffer = this.buffer.slice(end);
      this.waiters.shift()!(reply.trimEnd());
    }
  }

  reply(timeoutMs = 15_000): Promise<string> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no SMTP reply in ${timeoutMs} ms; buffer: ${this.buffer}`)),
        timeoutMs,
      );
      this.waiters.push((reply) => {
        clearTimeout(timer);
        resolve(reply);
      });
      this.drain();
    });
  }

  /** Writes raw bytes (no CRLF added). */
  write(data: string | Buffer): void {
    this.socket.write(data);
  }

  async send(line: string): Promise<string> {
    this.socket.write(`${line}\r\n`);
    return this.reply();
  }

  close(): void {
    this.socket.destroy();
  }
}

/**
 * DATA content for `raw` exactly as a hostile client would send it: dot-stuffed (a "." after any
 * LF is doubled, since that is what the server unstuffs) and terminated. nodemailer is not used
 * for bombs because it rewrites bare CR and LF to CRLF, which turns some bombs into other messages
 * (1 MiB of junk gains a "Name:" line and parses). The server keeps the CRLF before the final dot,
 * so a bomb that does not end in CRLF arrives with one added.
 */
export function dataFor(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  let from = 0;
  if (raw[0] === 0x2e) parts.push(Buffer.from('.'));
  for (let dot = raw.indexOf('\n.'); dot !== -1; dot = raw.indexOf('\n.', dot + 1)) {
    parts.push(raw.subarray(from, dot + 1), Buffer.from('.'));
    from = dot + 1;
  }
  parts.push(raw.subarray(from));
  const endsWithCrlf = raw.length >= 2 && raw[raw.length - 2] === 0x0d && raw[raw.length - 1] === 0x0a;
  parts.push(Buffer.from(raw.length === 0 || endsWithCrlf ? '.\r\n' : '\r\n.\r\n'));
  return Buffer.concat(parts);
}

/** One SMTP session sending `raw` byte for byte; resolves the reply to the end of data. */
export async function sendExact(
  port: number,
  envelope: { from: string; to: string[] },
  raw: Buffer,
): Promise<string> {
  const { dialog } = await SmtpDialog.open(port);
  try {
    await dialog.send('EHLO bombs.example');
    const mailFrom = await dialog.send(`MAIL FROM:<${envelope.from}>`);
    if (!mailFrom.startsWith('250')) return mailFrom;
    for (const to of envelope.to) {
      const rcpt = await dialog.send(`RCPT TO:<${to}>`);
      if (!rcpt.startsWith('250')) return rcpt;
    }
    const data = await dialog.send('DATA');
    if (!data.startsWith('354')) return data;
    dialog.write(dataFor(raw));
    // the largest bomb is 28 MB through loopback, read to the end even when refused
    const reply = await dialog.reply(60_000);
    await dialog.send('QUIT').catch(() => '');
    return reply;
  } finally {
    dialog.close();
  }
}
