// The benchmark's own SMTP load generator, run as a child process so it never shares an event loop
// with what it measures. Closed loop (N sessions send as fast as they are answered) for saturation,
// open loop (a new send every 1/rate s whatever is outstanding) for latency, so that slow answers
// cannot hide latency. Every message is timestamped at the end of its DATA and at the reply, on
// the epoch clock with sub-millisecond precision (comparable across processes on one machine).
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { type BenchMessage, type MessageClass, MessageMix } from './mix.ts';

export type LoadCommand =
  | {
      mode: 'closed';
      port: number;
      concurrency: number;
      total: number;
      perConnection: number;
      firstSeq: number;
      only?: MessageClass;
    }
  | {
      mode: 'open';
      port: number;
      rate: number;
      durationMs: number;
      firstSeq: number;
      only?: MessageClass;
    }
  | { mode: 'idle'; port: number; connections: number; holdMs: number };

/** One message's fate: [seq, end of DATA, reply, reply code (0: no reply, the connection failed)] */
export type SendRecord = [seq: number, dataEndAt: number, repliedAt: number, code: number];

export interface LoadResult {
  records: SendRecord[];
  startedAt: number;
  endedAt: number;
  /** first few failure texts, for the report */
  failures: string[];
  /** idle mode: how many connections got a greeting */
  greeted?: number;
}

export const now = (): number => performance.timeOrigin + performance.now();

/** A minimal SMTP client session: replies are parsed as they come, commands pipelined. */
class Session {
  private readonly socket: net.Socket;
  private buffer = '';
  private lines: string[] = [];
  private readonly replies: Array<{ code: number; text: string }> = [];
  private waiting: ((reply: { code: number; text: string }) => void) | undefined;
  private failure: Error | undefined;

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    const fail = (err: Error) => {
      this.failure ??= err;
      this.waiting?.({ code: 0, text: err.message });
      this.waiting = undefined;
    };
    socket.on('error', fail);
    socket.on('close', () => fail(new Error('connection closed')));
  }

  static connect(port: number): Promise<Session> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('connect', () => resolve(new Session(socket)));
      socket.once('error', reject);
    });
  }

  private onData(chunk: Buffer): void {
    this.buffer += chunk.toString('latin1');
    let at = this.buffer.indexOf('\r\n');
    while (at >= 0) {
      const line = this.buffer.slice(0, at);
      this.buffer = this.buffer.slice(at + 2);
      this.lines.push(line);
      if (line.length < 4 || line[3] === ' ') {
        const reply = { code: Number(line.slice(0, 3)) || 0, text: this.lines.join('\n') };
        this.lines = [];
        if (this.waiting) {
          const resolve = this.waiting;
          this.waiting = undefined;
          resolve(reply);
        } else this.replies.push(reply);
      }
      at = this.buffer.indexOf('\r\n');
    }
  }

  reply(): Promise<{ code: number; text: string }> {
    const queued = this.replies.shift();
    if (queued) return Promise.resolve(queued);
    if (this.failure) return Promise.resolve({ code: 0, text: this.failure.message });
    return new Promise((resolve) => {
      this.waiting = resolve;
    });
  }

  write(data: string | Buffer): void {
    if (!this.failure) this.socket.write(data);
  }

  close(): void {
    this.socket.destroy();
  }

  /** Greeting and EHLO; false when the server refused the session (421, say). */
  async open(): Promise<{ ok: boolean; text: string }> {
    const greeting = await this.reply();
    if (greeting.code !== 220) return { ok: false, text: greeting.text };
    this.write('EHLO bench.client\r\n');
    const ehlo = await this.reply();
    return { ok: ehlo.code === 250, text: ehlo.text };
  }

  /** One transaction, pipelined as a PIPELINING client (Postfix, say) sends it. */
  async send(message: BenchMessage): Promise<{ dataEndAt: number; code: number; text: string }> {
    this.write(
      `MAIL FROM:<${message.from}> BODY=8BITMIME SIZE=${message.data.length}\r\n${message.to
        .map((to) => `RCPT TO:<${to}>\r\n`)
        .join('')}DATA\r\n`,
    );
    let refusal: { code: number; text: string } | undefined;
    for (let i = 0; i < message.to.length + 1; i++) {
      const reply = await this.reply();
      if (reply.code >= 300 || reply.code === 0) refusal ??= reply;
    }
    const data = await this.reply();
    if (data.code !== 354) return { dataEndAt: now(), code: refusal?.code ?? data.code, text: data.text };
    this.write(message.data);
    this.write('.\r\n');
    const dataEndAt = now();
    const reply = await this.reply();
    return { dataEndAt, code: reply.code, text: reply.text };
  }

  quit(): void {
    this.write('QUIT\r\n');
    this.socket.end();
  }
}

async function closedLoop(command: Extract<LoadCommand, { mode: 'closed' }>): Promise<LoadResult> {
  const mix = new MessageMix();
  const records: SendRecord[] = [];
  const failures: string[] = [];
  let next = command.firstSeq;
  const last = command.firstSeq + command.total;
  const startedAt = now();
  const note = (text: string) => {
    if (failures.length < 20) failures.push(text);
  };

  async function sessionLoop(): Promise<void> {
    while (next < last) {
      let session: Session;
      try {
        session = await Session.connect(command.port);
      } catch (err) {
        records.push([next++, now(), now(), 0]);
        note((err as Error).message);
        continue;
      }
      const opened = await session.open();
      if (!opened.ok) {
        records.push([next++, now(), now(), 0]);
        note(opened.text);
        session.close();
        continue;
      }
      for (let sent = 0; sent < command.perConnection && next < last; sent++) {
        const message = mix.message(next++, command.only);
        const outcome = await session.send(message);
        records.push([message.seq, outcome.dataEndAt, now(), outcome.code]);
        if (outcome.code !== 250) note(outcome.text);
        if (outcome.code === 0) break;
      }
      session.quit();
    }
  }
  await Promise.all(Array.from({ length: command.concurrency }, sessionLoop));
  return { records, startedAt, endedAt: now(), failures };
}

async function openLoop(command: Extract<LoadCommand, { mode: 'open' }>): Promise<LoadResult> {
  const mix = new MessageMix();
  const records: SendRecord[] = [];
  const failures: string[] = [];
  const inFlight: Promise<void>[] = [];
  const startedAt = now();
  const total = Math.round((command.rate * command.durationMs) / 1000);

  const sendOne = async (seq: number): Promise<void> => {
    const message = mix.message(seq, command.only);
    try {
      const session = await Session.connect(command.port);
      const opened = await session.open();
      if (!opened.ok) {
        records.push([seq, now(), now(), 0]);
        if (failures.length < 20) failures.push(opened.text);
        session.close();
        return;
      }
      const outcome = await session.send(message);
      records.push([seq, outcome.dataEndAt, now(), outcome.code]);
      if (outcome.code !== 250 && failures.length < 20) failures.push(outcome.text);
      session.quit();
    } catch (err) {
      records.push([seq, now(), now(), 0]);
      if (failures.length < 20) failures.push((err as Error).message);
    }
  };

  // each tick starts every send whose scheduled time has come: a fixed rate, however slow the replies
  let started = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const due = Math.min(total, Math.floor(((now() - startedAt) * command.rate) / 1000) + 1);
      while (started < due) inFlight.push(sendOne(command.firstSeq + started++));
      if (started >= total) resolve();
      else setTimeout(tick, 1);
    };
    tick();
  });
  await Promise.all(inFlight);
  return { records, startedAt, endedAt: now(), failures };
}

async function idleConnections(command: Extract<LoadCommand, { mode: 'idle' }>): Promise<LoadResult> {
  const startedAt = now();
  const sessions: Session[] = [];
  let greeted = 0;
  await Promise.all(
    Array.from({ length: command.connections }, async () => {
      try {
        const session = await Session.connect(command.port);
        sessions.push(session);
        if ((await session.reply()).code === 220) greeted++;
      } catch {}
    }),
  );
  process.send?.({ type: 'idle-ready', greeted });
  await new Promise((resolve) => setTimeout(resolve, command.holdMs));
  for (const session of sessions) session.close();
  return { records: [], startedAt, endedAt: now(), failures: [], greeted };
}

export function runLoad(command: LoadCommand): Promise<LoadResult> {
  if (command.mode === 'closed') return closedLoop(command);
  if (command.mode === 'open') return openLoop(command);
  return idleConnections(command);
}

// as a child process of its own: one command in over IPC, the result back, then exit
if (process.send && import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  process.once('message', (command: LoadCommand) => {
    void runLoad(command).then((result) => {
      process.send!({ type: 'result', result }, () => process.exit(0));
    });
  });
}
