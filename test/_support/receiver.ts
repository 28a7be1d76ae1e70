// A real HTTP webhook receiver for tests: records every request with its exact body bytes, and
// answers as each test tells it (a status, a hang, a reset). Waiting is polling with a deadline.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { waitUntil } from './wait.ts';

export interface ReceivedRequest {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  at: number;
  /** the status it was answered with, once answered */
  status?: number;
}

/** What to do with one request: answer a status (with headers and a body: default `ok` as
 * text/plain), never answer, cut the connection, or answer 200 and then send the body one byte
 * every 100 ms, forever. */
export type Behaviour =
  | { status: number; delayMs?: number; headers?: Record<string, string>; body?: string }
  | 'hang'
  | 'reset'
  | 'trickle';

export class WebhookReceiver {
  readonly requests: ReceivedRequest[] = [];
  private readonly server: http.Server;
  private readonly behaviours = new Map<string, (count: number, request: ReceivedRequest) => Behaviour>();
  private readonly sockets = new Set<import('node:net').Socket>();

  private constructor(server: http.Server) {
    this.server = server;
  }

  static async start(): Promise<WebhookReceiver> {
    const server = http.createServer();
    const receiver = new WebhookReceiver(server);
    server.on('connection', (socket) => {
      receiver.sockets.add(socket);
      socket.on('close', () => receiver.sockets.delete(socket));
    });
    server.on('request', (req, res) => receiver.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return receiver;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  url(path: string): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }

  /** Sets the behaviour for a path; `count` is how many requests that path has had, this one included. */
  on(path: string, behaviour: Behaviour | ((count: number, request: ReceivedRequest) => Behaviour)): void {
    this.behaviours.set(path, typeof behaviour === 'function' ? behaviour : () => behaviour);
  }

  to(path: string): ReceivedRequest[] {
    return this.requests.filter((r) => r.path === path);
  }

  /** Resolves once `predicate` holds; fails after `timeoutMs`. */
  waitFor(predicate: () => boolean, timeoutMs = 20_000, what = 'condition'): Promise<void> {
    return waitUntil(predicate, what, { timeoutMs, everyMs: 25 });
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = req.url ?? '/';
      const request: ReceivedRequest = {
        path,
        headers: req.headers,
        body: Buffer.concat(chunks),
        at: Date.now(),
      };
      this.requests.push(request);
      const decide = this.behaviours.get(path) ?? ((): Behaviour => ({ status: 200 }));
      const behaviour = decide(this.to(path).length, request);
      if (behaviour === 'hang') return;
      if (behaviour === 'reset') {
        req.socket.destroy();
        return;
      }
      if (behaviour === 'trickle') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        const drip = setInterval(() => res.write('.'), 100);
        res.on('close', () => clearInterval(drip));
        return;
      }
      const answer = () => {
        request.status = behaviour.status;
        res
          .writeHead(behaviour.status, { 'content-type': 'text/plain', ...behaviour.headers })
          .end(behaviour.body ?? 'ok');
      };
      if (behaviour.delayMs) setTimeout(answer, behaviour.delayMs);
      else answer();
    });
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
