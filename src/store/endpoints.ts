// The endpoints collection: each webhook endpoint's health (last success, last failure and its
// reason, consecutive failures, and whether it is paused), shared by every worker and instance:
// what pauses an endpoint is here, not in one process. One small document per endpoint in use,
// always read and written by its exact `_id` (FerretDB reads the whole collection otherwise); the
// whole collection is read only to list it and to forget endpoints no route uses any more.
// `endpoint_probes` holds the claims of probes (a unique insert each: one process sends it).
import type { Collection } from 'mongodb';
import { isDuplicateKey } from './ids.ts';
import type { Store } from './mongo.ts';

export const ENDPOINT_STATES = Object.freeze(['healthy', 'failing', 'paused'] as const);
export type EndpointState = (typeof ENDPOINT_STATES)[number];

export interface EndpointDoc {
  /** endpointId(url): `e-` and 20 hex digits */
  _id: string;
  url: string;
  state: EndpointState;
  consecutive_failures: number;
  last_success_at?: Date;
  last_failure_at?: Date;
  /** `HTTP 503`, `timeout: ...`, `connection: ...` (bounded like an attempt's error) */
  last_failure_reason?: string;
  /** while paused: since when, by whom, and (paused by the breaker) when the next probe may go */
  paused_at?: Date;
  paused_by?: 'breaker' | 'operator';
  probe_at?: Date;
  /** the wait before the probe after next: doubles with each failed probe */
  probe_interval_ms?: number;
  /** when the last probe was claimed (sent): its outcome is known within WEBHOOK_TIMEOUT */
  probe_claimed_at?: Date;
  updated_at: Date;
}

interface ProbeClaim {
  _id: string;
  at: Date;
}

function endpoints(store: Store): Collection<EndpointDoc> {
  return store.db.collection<EndpointDoc>('endpoints');
}

function probes(store: Store): Collection<ProbeClaim> {
  return store.db.collection<ProbeClaim>('endpoint_probes');
}

export function readEndpoint(store: Store, id: string): Promise<EndpointDoc | null> {
  return endpoints(store).findOne({ _id: id });
}

/** Every endpoint with a record: bounded by the endpoints routes use (see forgetEndpoints). */
export function listEndpoints(store: Store): Promise<EndpointDoc[]> {
  return endpoints(store).find({}).toArray();
}

/** A success: healthy, whatever it was. Returns the document as it was before (null: new). */
export function markSuccess(store: Store, id: string, url: string, at: Date): Promise<EndpointDoc | null> {
  return endpoints(store).findOneAndUpdate(
    { _id: id },
    {
      $set: { url, state: 'healthy', consecutive_failures: 0, last_success_at: at, updated_at: at },
      $unset: { paused_at: '', paused_by: '', probe_at: '', probe_interval_ms: '', probe_claimed_at: '' },
    },
    { upsert: true, returnDocument: 'before' },
  );
}

/**
 * A failure (or `count` of them, the last one's reason kept), counted. Returns the document after it. On MongoDB the count is exact; FerretDB 1.24
 * applies `$inc` to the document it read, so two processes failing at the same instant may count
 * one: the pause then comes one failure later.
 */
export async function markFailure(
  store: Store,
  id: string,
  url: string,
  reason: string,
  at: Date,
  count = 1,
): Promise<EndpointDoc> {
  const after = await endpoints(store).findOneAndUpdate(
    { _id: id },
    {
      $inc: { consecutive_failures: count },
      $set: { url, last_failure_at: at, last_failure_reason: reason, updated_at: at },
      $setOnInsert: { state: 'failing' },
    },
    { upsert: true, returnDocument: 'after' },
  );
  if (!after) throw new Error(`endpoint ${id} not written`);
  if (after.state === 'healthy') {
    await endpoints(store).updateOne({ _id: id, state: 'healthy' }, { $set: { state: 'failing' } });
    return { ...after, state: 'failing' };
  }
  return after;
}

/** Paused, by the breaker (with its first probe) or by an operator (no probe: resumed by hand). */
export async function pauseEndpoint(
  store: Store,
  id: string,
  url: string,
  at: Date,
  pause: { by: 'breaker'; probeAt: Date; intervalMs: number } | { by: 'operator' },
): Promise<EndpointDoc | null> {
  const probe =
    pause.by === 'breaker' ? { probe_at: pause.probeAt, probe_interval_ms: pause.intervalMs } : {};
  return endpoints(store).findOneAndUpdate(
    { _id: id },
    {
      $set: { url, state: 'paused', paused_at: at, paused_by: pause.by, updated_at: at, ...probe },
      ...(pause.by === 'operator'
        ? { $unset: { probe_at: '', probe_interval_ms: '', probe_claimed_at: '' } }
        : { $unset: { probe_claimed_at: '' } }),
      $setOnInsert: { consecutive_failures: 0 },
    },
    { upsert: true, returnDocument: 'after' },
  );
}

/** An operator's resume: healthy, the failure count starts again. Returns the document after it. */
export function resumeEndpoint(store: Store, id: string, at: Date): Promise<EndpointDoc | null> {
  return endpoints(store).findOneAndUpdate(
    { _id: id },
    {
      $set: { state: 'healthy', consecutive_failures: 0, updated_at: at },
      $unset: { paused_at: '', paused_by: '', probe_at: '', probe_interval_ms: '', probe_claimed_at: '' },
    },
    { returnDocument: 'after' },
  );
}

/**
 * Claims the probe due at `probeAt` (a unique insert: exactly one process wins) and moves the
 * next one to `nextProbeAt`. True for the winner, who sends the probe.
 */
export async function claimProbe(
  store: Store,
  id: string,
  probeAt: Date,
  nextProbeAt: Date,
  nextIntervalMs: number,
  at: Date,
): Promise<boolean> {
  try {
    await probes(store).insertOne({ _id: `${id}:${probeAt.getTime()}`, at });
  } catch (err) {
    if (isDuplicateKey(err)) return false;
    throw err;
  }
  await endpoints(store).updateOne(
    { _id: id },
    {
      $set: {
        probe_at: nextProbeAt,
        probe_interval_ms: nextIntervalMs,
        probe_claimed_at: at,
        updated_at: at,
      },
    },
  );
  return true;
}

/**
 * Forgets endpoints whose URL no route uses and that nobody has written for `idleMs`, and probe
 * claims older than `idleMs`: the collections stay the size of the endpoints in use.
 */
export async function forgetEndpoints(
  store: Store,
  urlsInUse: ReadonlySet<string>,
  now: Date,
  idleMs: number,
): Promise<number> {
  const before = now.getTime() - idleMs;
  let forgotten = 0;
  for (const doc of await listEndpoints(store)) {
    if (urlsInUse.has(doc.url) || doc.updated_at.getTime() > before) continue;
    const { deletedCount } = await endpoints(store).deleteOne({ _id: doc._id });
    forgotten += deletedCount;
  }
  for (const claim of await probes(store).find({}).toArray()) {
    if (claim.at.getTime() <= before) await probes(store).deleteOne({ _id: claim._id });
  }
  return forgotten;
}
