// The `listing` part of `npm run bench` (BENCH_PARTS=listing): what a listing costs per message as
// an hour's traffic grows (issue 29: "a listing's cost per message stays constant as an hour's
// traffic grows, at 10x today's hourly volume"). On a throwaway FerretDB of each backend, one hour
// of delivered messages is listed as the archive lists them (listing.ts: one entry set per archive
// batch of BENCH_LISTING_BATCH, appended to the hour's listing partition), while a reader reads
// the first page after every few batches, as GET /messages would, which merges the small sets in
// the background. Per hour volume: the service's and the database's CPU per message for all of it
// (appends, reads, merges), and the first page's latency at the end of the hour.
import { randomBytes } from 'node:crypto';
import { idAt } from '../../src/store/ids.ts';
import { appendEntriesOf, type ListingEntry, listingPartitionOf, readPage } from '../../src/store/listing.ts';
import { openStore } from '../../src/store/mongo.ts';
import { latencies } from './measure.ts';
import { onEachBackend } from './throwaway-db.ts';

const whole = (text: string | undefined, fallback: number) => {
  const value = Number(text ?? fallback);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`not a whole number of 1 or more: ${text}`);
  return value;
};

export const LISTING = Object.freeze({
  /** BENCH_LISTING_HOUR: "today's hourly volume", 10 msg/s for an hour; the part also runs 10x it */
  hour: whole(process.env.BENCH_LISTING_HOUR, 36_000),
  /** BENCH_LISTING_BATCH: entries per archive batch (the archive's batches under load reach 256) */
  batch: whole(process.env.BENCH_LISTING_BATCH, 256),
  /** a first page read after this many batches */
  readEvery: 4,
  /** first pages sampled at the end of the hour */
  samples: 200,
});

const HOUR = Date.parse('2026-06-01T10:00:00Z');
const PAGE = 50;

async function oneHour(uri: string, volume: number, databaseCpu: () => number) {
  const store = await openStore({
    uri,
    dbName: `listing_${volume}_${randomBytes(3).toString('hex')}`,
    profile: 'ferretdb',
  });
  try {
    const partition = listingPartitionOf('history', idAt('m', HOUR, 0));
    const entry = (n: number): ListingEntry => {
      const at = HOUR + Math.floor((n * 3_600_000) / volume);
      return {
        _id: idAt('m', at, n),
        message_id: `<${n}@sender.example>`,
        from: 'sender@sender.example',
        to: [`user${n % 1000}@shop.example`],
        subject: `Order ${n} shipped`,
        received_at: new Date(at),
        state: 'delivered',
        domains: ['shop.example'],
        version: 4,
      };
    };
    const all = () => true;
    const cpuBefore = process.cpuUsage();
    const dbBefore = databaseCpu();
    const started = performance.now();
    let batches = 0;
    for (let n = 0; n < volume; n += LISTING.batch) {
      const entries = Array.from({ length: Math.min(LISTING.batch, volume - n) }, (_, i) => entry(n + i));
      await appendEntriesOf(store, 'history', entries);
      if (++batches % LISTING.readEvery === 0) await readPage(store, partition, PAGE, all, undefined);
    }
    // the last merge ends
    let sets = -1;
    for (let still = 0; still < 3; ) {
      await readPage(store, partition, PAGE, all, undefined);
      const now = await store.db.collection(partition).countDocuments({});
      still = now === sets ? still + 1 : 0;
      sets = now;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const seconds = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    const serviceMs = (cpu.user + cpu.system) / 1000;
    const databaseMs = (databaseCpu() - dbBefore) * 1000;
    const times: number[] = [];
    for (let i = 0; i < LISTING.samples; i++) {
      const at = performance.now();
      const page = await readPage(store, partition, PAGE, all, undefined);
      times.push(performance.now() - at);
      if (page.length !== PAGE || page[0]!._id !== entry(volume - 1)._id)
        throw new Error('the first page is not the newest');
    }
    const l = latencies(times);
    return {
      volume,
      batches,
      seconds: Math.round(seconds * 10) / 10,
      setsAtEnd: sets,
      serviceUsPerMessage: Math.round((serviceMs * 1000) / volume),
      databaseUsPerMessage: Math.round((databaseMs * 1000) / volume),
      firstPageMs: { p50: l.p50, p99: l.p99, max: l.max },
    };
  } finally {
    await store.db.dropDatabase().catch(() => {});
    await store.close();
  }
}

export async function listingPart(log: (text: string) => void): Promise<Record<string, unknown>> {
  const results = await onEachBackend(async (database) => {
    const hours = [];
    for (const volume of [LISTING.hour, 10 * LISTING.hour]) {
      const figures = await oneHour(database.server.uri, volume, database.cpuSeconds);
      log(`listing ${database.backend} ${volume}/hour: ${JSON.stringify(figures)}`);
      hours.push(figures);
    }
    const [one, ten] = hours;
    const perMessage = (h: typeof one) => h!.serviceUsPerMessage + h!.databaseUsPerMessage;
    return { hours, costRatio10x: Math.round((perMessage(ten) / perMessage(one)) * 100) / 100 };
  });
  return {
    date: new Date().toISOString(),
    batch: LISTING.batch,
    readEvery: LISTING.readEvery,
    backends: results,
  };
}

export function renderListing(results: Record<string, unknown>, commit: string): string {
  const figures = results.listing as Awaited<ReturnType<typeof listingPart>> & {
    backends: Array<{
      backend: string;
      costRatio10x: number;
      hours: Array<Awaited<ReturnType<typeof oneHour>>>;
    }>;
  };
  const lines = [
    `Measured ${String(figures.date).slice(0, 10)} at ${commit} with \`BENCH_PARTS=listing npm run bench\`: one hour of delivered messages listed as the archive lists them (an entry set per batch of ${figures.batch}), a first page read after every ${figures.readEvery} batches (merging the small sets in the background), at the hourly volume and at 10x it, on a throwaway FerretDB of each backend. CPU per message covers the appends, the reads and the merges; the first page is sampled ${LISTING.samples} times at the end of the hour. Goal: the cost per message at 10x within 1.2x of the cost at 1x (a merge costs each entry once).`,
    '',
    '| backend | messages in the hour | sets at the end | service µs/message | database µs/message | first page p50 / p99 ms | cost per message 10x / 1x |',
    '|---|---|---|---|---|---|---|',
  ];
  for (const b of figures.backends)
    for (const h of b.hours)
      lines.push(
        `| ${b.backend} | ${h.volume.toLocaleString('en')} | ${h.setsAtEnd} | ${h.serviceUsPerMessage} | ${h.databaseUsPerMessage} | ${h.firstPageMs.p50} / ${h.firstPageMs.p99} | ${h === b.hours[1] ? b.costRatio10x : ''} |`,
      );
  return lines.join('\n');
}
