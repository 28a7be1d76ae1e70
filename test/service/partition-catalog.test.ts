// The catalog of partitions (src/store/partitions.ts) against the test server: a partition this
// process notes while the collection list is being read stays known once the read lands.
import test from 'ava';
import { idAt } from '../../src/store/ids.ts';
import { partitionOf } from '../../src/store/partitions.ts';
import { openTestDatabase } from '../_support/db.ts';

test('a partition noted while the collection list is read is not lost when the read lands', async (t) => {
  const { store } = await openTestDatabase('catalog');
  t.teardown(async () => {
    await store.db.dropDatabase().catch(() => {});
    await store.close();
  });
  await store.partitions.list({ fresh: true });
  const name = partitionOf('dlq', idAt('m', Date.now(), 1));
  // the read is under way (it needs a round trip) when the partition is noted
  const reading = store.partitions.list({ fresh: true });
  t.true(store.partitions.note(name));
  await reading;
  t.true((await store.partitions.list()).some((partition) => partition.name === name));
});
