// The database round trips of the hot path, counted by the service itself (STATS_FILE: the
// driver's command monitoring): a message alone costs 5 inserts and no delete of its own (its
// intake is dropped whole), and messages accepted at the same moment share their commands.
import { mkdtempSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test, { type ExecutionContext } from 'ava';
import type { ProcessStats } from '../../src/service/process-stats.ts';
import { routeTo, startPipeline, waitForState } from '../_support/pipeline.ts';
import { acceptedId, sendRaw } from '../_support/smtp.ts';

const message = (n: number) =>
  `From: a@sender.example\r\nTo: u${n}@trips.example\r\nSubject: trips ${n}\r\nMessage-ID: <trips-${n}@sender.example>\r\n\r\nbody ${n}\r\n`;

/** Starts the service with STATS_FILE; `finish` stops it gracefully and sums the workers' commands. */
async function countedPipeline(t: ExecutionContext) {
  const statsFile = path.join(mkdtempSync(path.join(os.tmpdir(), 'mailroute-trips-')), 'stats.jsonl');
  // a long lease: no renewal write while a message is in flight
  const pipe = await startPipeline(t, { env: { STATS_FILE: statsFile, LEASE_TIME: '30s' }, label: 'trips' });
  await routeTo(pipe, 'trips.example', '/in');
  return {
    ...pipe,
    async finish(): Promise<Record<string, number>> {
      t.is(await pipe.service.stop('SIGTERM'), 0);
      const totals: Record<string, number> = {};
      for (const line of readFileSync(statsFile, 'utf8').trim().split('\n')) {
        const stats = JSON.parse(line) as ProcessStats;
        for (const [name, count] of Object.entries(stats.commands))
          totals[name] = (totals[name] ?? 0) + count;
      }
      return totals;
    },
  };
}

test.serial(
  'a message alone: 5 inserts from SMTP to delivered (record with its bytes into its intake, the bytes into their partition, final record, its listing entry, its departure), never a delete of its own',
  async (t) => {
    const pipe = await countedPipeline(t);
    // the route and domain lookups of the first recipient fill the cache: not part of the hot path
    const warmup = acceptedId(
      await sendRaw(
        pipe.service.smtpPort,
        { from: 'a@sender.example', to: ['u0@trips.example'] },
        message(0),
      ),
    );
    await waitForState(pipe.api, warmup, ['delivered']);
    const ids: string[] = [];
    for (let n = 1; n <= 5; n++) {
      const id = acceptedId(
        await sendRaw(
          pipe.service.smtpPort,
          { from: 'a@sender.example', to: [`u${n}@trips.example`] },
          message(n),
        ),
      );
      await waitForState(pipe.api, id, ['delivered']);
      ids.push(id);
    }
    const commands = await pipe.finish();
    t.log(commands);
    t.is(pipe.receiver.requests.length, 6);
    // six messages one after the other: nothing to batch, so this is the per-message cost
    // (plus the 2 inserts of POST /domains and POST /routes): the working-set record into its
    // intake (a small message's bytes inside it), then its bytes into their raw partition, the
    // final record, its listing entry and its departure marker are inserts; routed and delivered
    // are one write, the move into history itself. Each span of an intake adds its registration
    // (an insert), its drop and the registration's removal (a delete)
    const spans = commands.drop ?? 0;
    t.true(spans <= 6, `intake drops: ${spans}`);
    t.true((commands.insert ?? 0) <= 6 * 5 + 2 + spans + 1, `insert commands: ${commands.insert}`);
    // the only updates are POST /domains' and POST /routes' increments of the routing change counter
    t.is(commands.update ?? 0, 2, 'a message delivered at the first attempt is never updated in place');
    t.true((commands.delete ?? 0) <= spans, `delete commands: ${commands.delete} for ${spans} intake drops`);
  },
);

test.serial('messages accepted at the same moment share their insert and update commands', async (t) => {
  const pipe = await countedPipeline(t);
  const count = 40;
  const sent = await Promise.all(
    Array.from({ length: count }, (_, n) =>
      sendRaw(pipe.service.smtpPort, { from: 'a@sender.example', to: [`u${n}@trips.example`] }, message(n)),
    ),
  );
  for (const result of sent) await waitForState(pipe.api, acceptedId(result), ['delivered']);
  const commands = await pipe.finish();
  t.log(commands);
  t.is(new Set(pipe.receiver.requests.map((r) => r.headers['webhook-id'])).size, count);
  // unbatched, each message would cost 4 inserts and 1 delete
  t.true((commands.insert ?? 0) - 2 < count * 4, `insert commands: ${commands.insert} for ${count} messages`);
  t.true((commands.delete ?? 0) < count, `delete commands: ${commands.delete} for ${count} messages`);
});
