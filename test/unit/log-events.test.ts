// README's table of log events against the catalog (src/log/events.ts), both ways: an event the
// service logs is documented, and a documented event is one it logs (as Fastify tests its errors
// against its docs).
import { readdirSync, readFileSync } from 'node:fs';
import test from 'ava';
import { EVENTS } from '../../src/log/events.ts';

/** The event names in the first column of the table under README's "### Logs". */
function documentedEvents(): string[] {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const section = readme.split('\n### Logs\n')[1]?.split('\n#')[0] ?? '';
  const rows = section.split('\n').filter((line) => line.startsWith('| `'));
  return rows.flatMap((row) => [...(row.split('|')[1] ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1] ?? ''));
}

test("README's log events table names exactly the catalog's events", (t) => {
  const documented = documentedEvents();
  const catalog: string[] = Object.values(EVENTS);
  t.true(documented.length > 0, 'the table under "### Logs" was not found');
  t.deepEqual(
    catalog.filter((name) => !documented.includes(name)),
    [],
    'in src/log/events.ts but not in README',
  );
  t.deepEqual(
    documented.filter((name) => !catalog.includes(name)),
    [],
    'in README but not in src/log/events.ts',
  );
  t.is(new Set(documented).size, documented.length, 'an event is listed twice in README');
});

test('src and workers log no event name outside the catalog', (t) => {
  // a literal `event: 'a.b'` in a log call would bypass the catalog (the lifecycle's transition
  // causes, such as `event: 'attempt_ok'`, are not log events and have no dot)
  const root = new URL('../../', import.meta.url);
  const literals = ['src', 'workers'].flatMap((dir) =>
    readdirSync(new URL(dir, root), { recursive: true })
      .filter((file) => String(file).endsWith('.ts'))
      .flatMap((file) => {
        const text = readFileSync(new URL(`${dir}/${file}`, root), 'utf8');
        return [...text.matchAll(/\bevent: *['"`]([a-z_]+\.[a-z_.]+)['"`]/g)].map(
          (m) => `${dir}/${file}: ${m[1]}`,
        );
      }),
  );
  t.deepEqual(literals, [], 'use EVENTS from src/log/events.ts');
});
