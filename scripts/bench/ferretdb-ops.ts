// What one document operation costs the database, on each FerretDB backend: inserts (insertMany of a
// batch), removals by exact `_id` (one bulk command of deleteOne statements, as the working set's
// owners remove final messages) and lookups by exact `_id`, at batch sizes 1, 8 and 32, each with
// the durable write concern, on a collection that holds a working set of documents shaped like an
// accepted message. Reports the database's CPU per document (FerretDB, and PostgreSQL's processes
// for that backend): the floor under what a message costs the database, whatever the service does.
//   node scripts/bench/ferretdb-ops.ts [--working-set 100] [--documents 480]
import os from 'node:os';
import { parseArgs } from 'node:util';
import { MongoClient } from 'mongodb';
import { DURABLE } from '../../src/store/connection.ts';
import { idAt } from '../../src/store/ids.ts';
import { onEachBackend, type ThrowawayDatabase } from './throwaway-db.ts';

const { values } = parseArgs({
  options: {
    'working-set': { type: 'string', default: '100' },
    documents: { type: 'string', default: '480' },
  },
});
const workingSet = Number(values['working-set']);
const documents = Number(values.documents);
const BATCHES = [1, 8, 32];

let sequence = 0;
/** A document of the shape and size of a working-set message (about 1 KB of BSON). */
function message(): { _id: string } & Record<string, unknown> {
  const at = new Date();
  const n = sequence++;
  return {
    _id: idAt('m', at.getTime(), n),
    message_id: `<${n}@sender.example>`,
    from: 'load@sender.example',
    to: ['u@bench.test'],
    subject: `load ${n}`,
    received_at: at,
    state: 'routed',
    envelope: { mail_from: 'load@sender.example', rcpt_to: ['u@bench.test'] },
    domains: ['bench.test'],
    size: 10_240,
    client: { ip: '127.0.0.1', helo: 'localhost' },
    history: [
      { state: 'queued', at, note: 'from 127.0.0.1' },
      { state: 'parsed', at },
      { state: 'routed', at },
    ],
    attempts: [],
    deliveries: [
      { id: `d-${n}`, route_id: 'r-1', state: 'routed', recipients: ['u@bench.test'], attempts: 0 },
    ],
    version: 2,
    lease_epoch: 1,
    lease_owner: 'bench',
    due_at: at,
    scheduled: true,
  };
}

const round = (n: number) => Number(n.toFixed(3));

async function measure({ server, cpuSeconds: databaseCpu }: ThrowawayDatabase) {
  const client = await new MongoClient(server.uri).connect();
  try {
    const collection = client.db('opsbench').collection<{ _id: string }>('messages');
    await collection.insertMany(Array.from({ length: workingSet }, message));
    const rows = [];
    for (const batch of BATCHES) {
      const rounds = Math.max(1, Math.round(documents / batch));
      const inserted: string[][] = [];
      let before = databaseCpu();
      for (let r = 0; r < rounds; r++) {
        const docs = Array.from({ length: batch }, message);
        inserted.push(docs.map((doc) => doc._id));
        await collection.insertMany(docs, { ordered: false, writeConcern: DURABLE });
      }
      const insert = databaseCpu() - before;
      before = databaseCpu();
      for (const ids of inserted) for (const id of ids) await collection.findOne({ _id: id });
      const find = databaseCpu() - before;
      before = databaseCpu();
      for (const ids of inserted)
        await collection.bulkWrite(
          ids.map((id) => ({ deleteOne: { filter: { _id: id } } })),
          { ordered: false, writeConcern: DURABLE },
        );
      const remove = databaseCpu() - before;
      const perDocumentMs = (seconds: number, count: number) => round((seconds * 1000) / count);
      rows.push({
        batch,
        insert_ms_per_document: perDocumentMs(insert, rounds * batch),
        delete_by_id_ms_per_document: perDocumentMs(remove, rounds * batch),
        find_by_id_ms: perDocumentMs(find, rounds * batch),
      });
    }
    return { rows };
  } finally {
    await client.close();
  }
}

const results = await onEachBackend(measure);
process.stdout.write(
  `${JSON.stringify({ working_set: workingSet, documents, load: os.loadavg()[0], results }, null, 2)}\n`,
);
