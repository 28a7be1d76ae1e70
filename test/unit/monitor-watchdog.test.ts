// MonitorWatchdog against a real server: a client whose monitor went silent (a heartbeat started and
// never answered, as the driver does when the server dies under it mid-heartbeat) is reconnected,
// its Collection handles keep working, and a healthy client is left alone.
import test from 'ava';
import { MongoClient } from 'mongodb';
import { MonitorWatchdog } from '../../src/store/monitor-watchdog.ts';
import { databaseUri, freshDbName } from '../_support/db.ts';
import { waitUntil } from '../_support/wait.ts';

const wait = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A connected client under a watchdog with a short limit, and what the test watches of it. */
async function watchedClient(t: import('ava').ExecutionContext, silentLimitMs: number, awaitedExtraMs = 0) {
  const client = new MongoClient(await databaseUri(), {
    serverSelectionTimeoutMS: 5000,
    heartbeatFrequencyMS: 500,
  });
  await client.connect();
  t.teardown(() => client.close());
  const seen = { reconnects: [] as Array<{ server: string; silentForMs: number }>, topologiesOpened: 0 };
  const watchdog = new MonitorWatchdog(client, {
    connectTimeoutMs: 100,
    silentLimitMs,
    awaitedExtraMs,
    checkEveryMs: 50,
    onReconnect: (detail) => seen.reconnects.push(detail),
  });
  t.teardown(() => watchdog.stop());
  client.on('topologyOpening', () => seen.topologiesOpened++);
  return { client, seen };
}

test('a heartbeat that is never answered gets the client reconnected, and its handles work after', async (t) => {
  const { client, seen } = await watchedClient(t, 400);
  const things = client.db(freshDbName('watchdog')).collection<{ _id: string }>('things');
  await things.insertOne({ _id: 'before' });
  // what the driver's monitor emits before the hello that never comes back
  client.emit('serverHeartbeatStarted', { connectionId: 'silent.example:27017', awaited: false } as never);
  await waitUntil(() => seen.reconnects.length > 0, 'the reconnect');
  t.is(seen.reconnects.length, 1);
  t.is(seen.reconnects[0]!.server, 'silent.example:27017');
  t.true(seen.reconnects[0]!.silentForMs > 400);
  t.is(seen.topologiesOpened, 1, 'a new topology (and monitor) after the reconnect');
  await things.insertOne({ _id: 'after' });
  t.deepEqual(
    (await things.find().sort({ _id: 1 }).toArray()).map((doc) => doc._id),
    ['after', 'before'],
  );
});

test('a client whose heartbeats are answered is left alone', async (t) => {
  const { client, seen } = await watchedClient(t, 300);
  let heartbeats = 0;
  client.on('serverHeartbeatSucceeded', () => heartbeats++);
  // heartbeats every 500 ms, each outstanding for a moment only: four of them take well past the
  // 300 ms limit in all, with the watchdog looking every 50 ms
  await waitUntil(() => heartbeats >= 4, 'four answered heartbeats');
  t.deepEqual(seen.reconnects, []);
  t.is(seen.topologiesOpened, 0);
});

test('an awaited heartbeat (streaming protocol) gets its extra time before it counts as silent', async (t) => {
  const { client, seen } = await watchedClient(t, 200, 1500);
  client.emit('serverHeartbeatStarted', { connectionId: 'streaming.example:27017', awaited: true } as never);
  await wait(800);
  t.deepEqual(seen.reconnects, [], 'past the plain limit, within the awaited one');
  await waitUntil(() => seen.reconnects.length > 0, 'the reconnect');
  t.is(seen.reconnects.length, 1);
  t.true(seen.reconnects[0]!.silentForMs > 1700);
});
