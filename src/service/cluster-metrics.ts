// One scrape sees the whole instance: the worker that receives GET /metrics asks the primary, the
// primary asks every connected worker for its registry (as JSON), sums them with prom-client's
// AggregatorRegistry.aggregate and answers with the text. A worker that does not answer within
// WORKER_ANSWER_MS (one still starting, one dying) is left out of that scrape rather than failing it.
// The messages are in the IPC schema (ipc.ts).
import cluster, { type Worker } from 'node:cluster';
import { AggregatorRegistry } from 'prom-client';
import { registry } from '../metrics/metrics.ts';
import { onPrimaryMessage, sendToPrimary, sendToWorker, type ToPrimary, type WorkerMetrics } from './ipc.ts';

const WORKER_ANSWER_MS = 2000;
const PRIMARY_ANSWER_MS = 5000;

/** The primary's end: answers workers' metrics requests with the sum over all workers. */
export class ClusterMetrics {
  private readonly workers: () => Worker[];
  private readonly collecting = new Map<
    number,
    { pending: Set<number>; got: WorkerMetrics[]; finish: () => void }
  >();
  private nextId = 0;

  constructor(workers: () => Worker[]) {
    this.workers = workers;
  }

  /** A worker's metrics messages (the supervisor hands them over). */
  handle(
    worker: Worker,
    message: Extract<ToPrimary, { type: 'metrics.request' | 'metrics.collected' }>,
  ): void {
    if (message.type === 'metrics.collected') {
      const round = this.collecting.get(message.id);
      if (!round?.pending.delete(worker.id)) return;
      round.got.push(message.metrics);
      if (round.pending.size === 0) round.finish();
      return;
    }
    const id = this.nextId++;
    const workers = this.workers().filter((w) => w.isConnected());
    const got: WorkerMetrics[] = [];
    const answer = async () => {
      clearTimeout(timer);
      this.collecting.delete(id);
      const text = await AggregatorRegistry.aggregate(got).metrics();
      sendToWorker(worker, { type: 'metrics.response', id: message.id, text });
    };
    const timer = setTimeout(() => void answer(), WORKER_ANSWER_MS);
    this.collecting.set(id, { pending: new Set(workers.map((w) => w.id)), got, finish: () => void answer() });
    for (const w of workers) sendToWorker(w, { type: 'metrics.collect', id });
    if (workers.length === 0) void answer();
  }
}

const waiting = new Map<number, (text: string | undefined) => void>();
let listening = false;
let nextRequestId = 0;

/** Worker: answers the primary's collection requests with this process's registry. */
export function answerMetricsCollection(): void {
  if (listening || !cluster.isWorker) return;
  listening = true;
  onPrimaryMessage((message) => {
    if (message.type === 'metrics.collect') {
      void registry
        .getMetricsAsJSON()
        .then((metrics) => sendToPrimary({ type: 'metrics.collected', id: message.id, metrics }));
    } else if (message.type === 'metrics.response') {
      waiting.get(message.id)?.(message.text);
      waiting.delete(message.id);
    }
  });
}

/**
 * The metrics of every worker of this instance, summed (in a cluster worker), or of this process
 * alone (the service run in-process, as tests do).
 */
export async function instanceMetrics(): Promise<string> {
  if (!cluster.isWorker || !process.send) return registry.metrics();
  answerMetricsCollection();
  const id = nextRequestId++;
  const text = await new Promise<string | undefined>((resolve) => {
    const timer = setTimeout(() => {
      waiting.delete(id);
      resolve(undefined);
    }, PRIMARY_ANSWER_MS);
    waiting.set(id, (answer) => {
      clearTimeout(timer);
      resolve(answer);
    });
    sendToPrimary({ type: 'metrics.request', id });
  });
  // the primary did not answer (it is stopping): this worker's own figures are better than none
  return text ?? registry.metrics();
}
