// One scrape sees the whole instance: the worker that receives GET /metrics asks the primary, the
// primary asks every connected worker for its registry (as JSON), sums them with prom-client's
// AggregatorRegistry.aggregate and answers with the text. A worker that does not answer within
// WORKER_ANSWER_MS (one still starting, one dying) is left out of that scrape rather than failing it.
import cluster, { type Worker } from 'node:cluster';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import { registry } from './metrics.ts';

const WORKER_ANSWER_MS = 2000;
const PRIMARY_ANSWER_MS = 5000;

type WorkerMetrics = MetricObjectWithValues<MetricValue<string>>[];

interface MetricsMessage {
  type: 'metrics.request' | 'metrics.response' | 'metrics.collect' | 'metrics.collected';
  id: number;
  text?: string;
  metrics?: WorkerMetrics;
}

function isMetricsMessage(message: unknown): message is MetricsMessage {
  if (typeof message !== 'object' || message === null) return false;
  const { type, id } = message as { type?: unknown; id?: unknown };
  return typeof type === 'string' && type.startsWith('metrics.') && typeof id === 'number';
}

let nextId = 0;

/** Primary: answers workers' metrics requests with the sum over all workers. Call once. */
export function serveClusterMetrics(): void {
  const collecting = new Map<number, { pending: Set<number>; got: WorkerMetrics[]; finish: () => void }>();
  cluster.on('message', (worker: Worker, message: unknown) => {
    if (!isMetricsMessage(message)) return;
    if (message.type === 'metrics.collected') {
      const round = collecting.get(message.id);
      if (!round?.pending.delete(worker.id)) return;
      round.got.push(message.metrics ?? []);
      if (round.pending.size === 0) round.finish();
      return;
    }
    if (message.type !== 'metrics.request') return;
    const id = nextId++;
    const workers = Object.values(cluster.workers ?? {}).filter(
      (w): w is Worker => w?.isConnected() === true,
    );
    const got: WorkerMetrics[] = [];
    const answer = async () => {
      clearTimeout(timer);
      collecting.delete(id);
      const text = await AggregatorRegistry.aggregate(got).metrics();
      if (worker.isConnected()) worker.send({ type: 'metrics.response', id: message.id, text });
    };
    const timer = setTimeout(() => void answer(), WORKER_ANSWER_MS);
    collecting.set(id, { pending: new Set(workers.map((w) => w.id)), got, finish: () => void answer() });
    for (const w of workers) w.send({ type: 'metrics.collect', id });
    if (workers.length === 0) void answer();
  });
}

const waiting = new Map<number, (text: string | undefined) => void>();
let listening = false;

/** Worker: answers the primary's collection requests with this process's registry. */
export function answerMetricsCollection(): void {
  if (listening || !cluster.isWorker) return;
  listening = true;
  process.on('message', (message: unknown) => {
    if (!isMetricsMessage(message)) return;
    if (message.type === 'metrics.collect') {
      void registry
        .getMetricsAsJSON()
        .then((metrics) => process.send?.({ type: 'metrics.collected', id: message.id, metrics }));
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
  const id = nextId++;
  const text = await new Promise<string | undefined>((resolve) => {
    const timer = setTimeout(() => {
      waiting.delete(id);
      resolve(undefined);
    }, PRIMARY_ANSWER_MS);
    waiting.set(id, (answer) => {
      clearTimeout(timer);
      resolve(answer);
    });
    process.send?.({ type: 'metrics.request', id });
  });
  // the primary did not answer (it is stopping): this worker's own figures are better than none
  return text ?? registry.metrics();
}
