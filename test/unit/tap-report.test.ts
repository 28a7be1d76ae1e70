// What `npm test` makes of AVA's TAP: the counts of its closing line and the failures it lists, from
// output recorded from AVA 8 (test/fixtures/tap/, paths replaced by file:///project/).
import { readFileSync } from 'node:fs';
import test from 'ava';
import { closingLine, TapReader } from '../../scripts/tap-report.ts';

function readRecorded(name: string, exitCode: number) {
  const reader = new TapReader();
  const text = readFileSync(new URL(`../fixtures/tap/${name}.tap`, import.meta.url), 'utf8');
  const shown = text
    .split('\n')
    .map((line) => reader.read(line))
    .filter((line) => line !== undefined);
  return { counts: reader.finish(exitCode), shown };
}

const CASES: Array<{ name: string; exitCode: number; line: string; failures: string[]; notes: RegExp[] }> = [
  {
    name: 'outcomes',
    exitCode: 1,
    line: 'tests: 2 passed, 2 failed, 1 skipped, 1 todo',
    failures: ['fails with a diff', 'throws'],
    notes: [],
  },
  {
    name: 'several-files',
    exitCode: 1,
    line: 'tests: 3 passed, 4 failed, 1 skipped, 1 todo',
    failures: ['hook › before hook', 'a › fails with a diff', 'a › throws', 'logs › logs and fails'],
    notes: [],
  },
  {
    // an uncaught exception ends the file: the crash and the exit are failures, the two tests cut short too
    name: 'uncaught-exception',
    exitCode: 1,
    line: 'tests: 0 passed, 4 failed',
    failures: ['Error: uncaught later', 'test/crash.test.js exited with a non-zero exit code: 1'],
    notes: [/^2 tests did not run/],
  },
  {
    name: 'failed-hook',
    exitCode: 1,
    line: 'tests: 0 passed, 1 failed',
    failures: ['before hook'],
    notes: [],
  },
  {
    name: 'no-tests',
    exitCode: 1,
    line: 'tests: 0 passed, 1 failed',
    failures: ['No tests found in test/none.test.js'],
    notes: [],
  },
  {
    name: 'throws-at-load',
    exitCode: 1,
    line: 'tests: 0 passed, 2 failed',
    failures: ['Error: the file throws at load', 'test/top.test.js exited with a non-zero exit code: 1'],
    notes: [],
  },
  {
    // a timeout or process.exit(): AVA's TAP reporter throws, and the output stops after its first line
    name: 'reporter-stopped',
    exitCode: 1,
    line: 'tests: 0 passed, 1 failed',
    failures: [],
    notes: [/^AVA stopped before its closing summary/],
  },
];

for (const { name, exitCode, line, failures, notes } of CASES) {
  test(`recorded TAP: ${name}`, (t) => {
    const { counts } = readRecorded(name, exitCode);
    t.is(closingLine(counts), line);
    t.deepEqual(
      counts.failures.map((failure) => failure.title),
      failures,
    );
    t.is(counts.notes.length, notes.length, counts.notes.join('; '));
    for (const [i, note] of notes.entries()) t.regex(counts.notes[i]!, note);
  });
}

test('a failure keeps its logs and its error, readably indented, and each test gets one line', (t) => {
  const { counts, shown } = readRecorded('several-files', 1);
  const failure = counts.failures.find((f) => f.title === 'logs › logs and fails')!;
  t.deepEqual(failure.detail.slice(0, 2), ['      first log', '      second log']);
  t.true(failure.detail.includes('      assertion: t.is()'), failure.detail.join('\n'));
  t.true(failure.detail.includes("      message: ''"), failure.detail.join('\n'));
  t.true(shown.includes('  ✔ a › passes'));
  t.true(shown.includes('  ✘ a › throws'));
  t.true(shown.includes('  - a › skipped one (skipped)'));
  t.true(shown.includes('  - a › a todo (todo)'));
  // a hook's title only with what it logged; a file's tests left over are said
  t.true(shown.includes('  # logs › before hook\n      from the before hook'));
  t.false(shown.some((s) => s.includes('after.always hook')));
  t.true(shown.includes('# 1 test remaining in test/hook.test.js'));
  // AVA's own closing lines give way to the closing line of npm test
  t.false(shown.some((s) => /^(1\.\.|# (tests|pass|skip|fail) )/.test(s)));
});

test('a clean run that exits non-zero still counts a failure', (t) => {
  const reader = new TapReader();
  for (const line of ['TAP version 13', 'ok 1 - fine', '', '1..1', '# tests 1', '# pass 1', '# fail 0'])
    reader.read(line);
  const counts = reader.finish(2);
  t.is(closingLine(counts), 'tests: 1 passed, 1 failed');
  t.regex(counts.notes[0]!, /exited with code 2/);
});

test('a clean run is all passed', (t) => {
  const reader = new TapReader();
  for (const line of [
    'TAP version 13',
    'ok 1 - fine',
    'ok 2 - also',
    '',
    '1..2',
    '# tests 2',
    '# pass 2',
    '# fail 0',
  ])
    reader.read(line);
  const counts = reader.finish(0);
  t.is(closingLine(counts), 'tests: 2 passed, 0 failed');
  t.deepEqual(counts.notes, []);
});
