// The benchmark's webhook receiver, run as a child process: answers 200 at once and notes each
// arrival's time and which message it was (the "bench <seq>" subject of the mix, or the sequence
// number smtp-source -N puts before each recipient), so the run can count deliveries, duplicates
// and end-to-end latency. Told a status other than 200 (the outage part: a receiver that is down),
// it answers that instead, with a Retry-After if told one, and counts the refusals apart, with the
// times of the first and the last.
import http from 'node:http';
import { now } from './smtp-load.ts';

/** [seq (-1: not recognised), arrival time, webhook-id] */
export type Arrival = [seq: number, at: number, webhookId: string];

const SUBJECT = /"subject":"bench (\d+) /;
const NUMBERED_RECIPIENT = /"rcpt_to":\["(\d+)/;

let arrivals: Arrival[] = [];
let lastArrivalAt = 0;
let status = 200;
let retryAfter: string | undefined;
const refusals = { refused: 0, firstRefusedAt: 0, lastRefusedAt: 0 };

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const at = now();
    if (status !== 200) {
      refusals.refused++;
      refusals.firstRefusedAt ||= at;
      refusals.lastRefusedAt = at;
      res
        .writeHead(status, {
          'content-type': 'text/plain',
          ...(retryAfter ? { 'retry-after': retryAfter } : {}),
        })
        .end('down');
      return;
    }
    // the subject is near the start of the payload; the envelope is at the end
    const body = Buffer.concat(chunks);
    const head = body.subarray(0, 4096).toString('latin1');
    const tail = body.subarray(Math.max(0, body.length - 4096)).toString('latin1');
    const seq = Number(SUBJECT.exec(head)?.[1] ?? NUMBERED_RECIPIENT.exec(tail)?.[1] ?? -1);
    arrivals.push([seq, at, String(req.headers['webhook-id'] ?? '')]);
    lastArrivalAt = at;
    res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
  });
});
server.keepAliveTimeout = 60_000;

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as { port: number };
  process.send?.({ type: 'listening', port });
});

process.on('message', (message: { type: string }) => {
  if (message.type === 'count')
    process.send?.({ type: 'count', count: arrivals.length, lastArrivalAt, ...refusals });
  else if (message.type === 'status') {
    ({ status, retryAfter } = message as { type: string; status: number; retryAfter?: string });
    process.send?.({ type: 'status', status });
  } else if (message.type === 'take') {
    process.send?.({ type: 'arrivals', arrivals });
    arrivals = [];
  }
});
