// Covers the recipient_pattern grammar: what each kind normalises to and why each refusal is refused.
import test from 'ava';
import {
  compileRegex,
  MAX_PATTERN_LENGTH,
  type ParsedPattern,
  parseRecipientPattern,
} from '../../src/route/pattern.ts';

const DOMAIN = 'example.com';

const accepted: ReadonlyArray<{ input: string; expected: ParsedPattern }> = [
  { input: 'Alice@Example.COM', expected: { kind: 'exact', pattern: 'alice@example.com', scope: 'address' } },
  { input: 'ALICE', expected: { kind: 'exact', pattern: 'alice', scope: 'local' } },
  { input: '  bob.smith  ', expected: { kind: 'exact', pattern: 'bob.smith', scope: 'local' } },
  { input: "o'brien_x{1}#=~|/", expected: { kind: 'exact', pattern: "o'brien_x{1}#=~|/", scope: 'local' } },
  { input: 'Jürgen', expected: { kind: 'exact', pattern: 'jürgen', scope: 'local' } },
  {
    input: 'Alice+*@Example.com',
    expected: { kind: 'plus', pattern: 'alice+*@example.com', scope: 'address' },
  },
  { input: 'alice+*', expected: { kind: 'plus', pattern: 'alice+*', scope: 'local' } },
  { input: 'a+b+*', expected: { kind: 'plus', pattern: 'a+b+*', scope: 'local' } },
  { input: '*@example.com', expected: { kind: 'wildcard', pattern: '*@example.com', scope: 'address' } },
  { input: 'Support-*', expected: { kind: 'wildcard', pattern: 'support-*', scope: 'local' } },
  { input: '*', expected: { kind: 'wildcard', pattern: '*', scope: 'local' } },
  { input: 'team-*+*', expected: { kind: 'wildcard', pattern: 'team-*+*', scope: 'local' } },
  { input: '+*x', expected: { kind: 'wildcard', pattern: '+*x', scope: 'local' } },
  {
    input: '/Support-[A-Z0-9]+/',
    expected: { kind: 'regex', pattern: '/support-[a-z0-9]+/', scope: 'local' },
  },
  {
    input: '/[^@]+@Example\\.COM/',
    expected: { kind: 'regex', pattern: '/[^@]+@example\\.com/', scope: 'address' },
  },
  {
    input: '/(Sales|Billing)-\\d{2,4}/',
    expected: { kind: 'regex', pattern: '/(sales|billing)-\\d{2,4}/', scope: 'local' },
  },
  // Escapes keep their case: \W is not \w, and \x4A / \p{Lu} name exactly what was written.
  {
    input: '/A\\W\\x4AB\\p{Lu}C\\u004AD/',
    expected: { kind: 'regex', pattern: '/a\\W\\x4Ab\\p{Lu}c\\u004Ad/', scope: 'local' },
  },
  { input: '/a/b/', expected: { kind: 'regex', pattern: '/a/b/', scope: 'local' } },
  { input: '/.*/', expected: { kind: 'regex', pattern: '/.*/', scope: 'local' } },
];

for (const { input, expected } of accepted) {
  test(`accepts ${JSON.stringify(input)} as ${expected.kind} ${expected.pattern}`, (t) => {
    t.deepEqual(parseRecipientPattern(input, DOMAIN), { ok: true, value: expected });
  });
}

const refused: ReadonlyArray<{ input: string; reason: string }> = [
  { input: '', reason: 'must not be empty' },
  { input: '   ', reason: 'must not be empty' },
  { input: 'a'.repeat(MAX_PATTERN_LENGTH + 1), reason: `at most ${MAX_PATTERN_LENGTH} characters` },
  { input: 'al ice', reason: 'whitespace or control characters' },
  { input: 'al\u0000ice', reason: 'whitespace or control characters' },
  { input: 'alice\t@example.com', reason: 'whitespace or control characters' },
  { input: 'a@b@example.com', reason: "at most one '@'" },
  { input: '@example.com', reason: 'local part' },
  { input: 'alice@', reason: 'domain part' },
  { input: 'alice@other.com', reason: 'does not match the route\'s domain "example.com"' },
  { input: 'alice@sub.example.com', reason: "does not match the route's domain" },
  { input: 'alice@*.example.com', reason: "'*' is only allowed in the local part" },
  { input: 'al"ice', reason: `character '"' is not allowed` },
  { input: 'al,ice', reason: "character ',' is not allowed" },
  { input: 'al(ice)', reason: "character '(' is not allowed" },
  { input: '+*', reason: "needs a name before '+*'" },
  { input: '+*@example.com', reason: "needs a name before '+*'" },
  { input: '/abc', reason: "must be closed with '/'" },
  { input: '/x/i', reason: 'regex flags ("i") are not supported' },
  { input: '/x/gu', reason: 'regex flags ("gu") are not supported' },
  { input: '/x/@example.com', reason: "nothing may follow a regex's closing '/'" },
  { input: '//', reason: 'regex must not be empty' },
  { input: '/a\u0007b/', reason: 'regex must not contain control characters' },
  { input: '/(abc/', reason: 'regex does not compile' },
  { input: '/a**/', reason: 'regex does not compile' },
  { input: '/(a)\\1/', reason: 'backreference' },
  { input: '/(?<n>a)\\k<n>/', reason: 'backreference' },
  { input: '/a(?=b)b/', reason: 'lookahead' },
  { input: '/a(?!c)b/', reason: 'lookahead' },
  { input: '/(?<=a)b/', reason: 'lookbehind' },
  { input: '/(?<!a)b/', reason: 'lookbehind' },
  // Valid as written, invalid once lowercased: 'Z' sorts before 'a', 'z' after it.
  { input: '/[Z-a]/', reason: 'does not compile once lowercased' },
  { input: '/a{2,1000}/', reason: 'linear-time engine cannot run' },
  { input: '/(?i:a)/', reason: 'linear-time engine cannot run' },
  { input: '/(a+)+b/', reason: 'regex can backtrack catastrophically (exponential)' },
  { input: '/(a|a)*b/', reason: 'regex can backtrack catastrophically (exponential)' },
  { input: '/(x+x+)+y/', reason: 'regex can backtrack catastrophically (exponential)' },
  { input: '/(a*)*b/', reason: 'regex can backtrack catastrophically (exponential)' },
  { input: '/.*a.*a.*a/', reason: 'regex can backtrack catastrophically (polynomial)' },
];

for (const { input, reason } of refused) {
  test(`refuses ${JSON.stringify(input.slice(0, 40))} because of "${reason}"`, (t) => {
    const result = parseRecipientPattern(input, DOMAIN);
    if (result.ok) {
      t.fail(`accepted as ${JSON.stringify(result.value)}`);
      return;
    }
    t.true(result.reason.startsWith('recipient_pattern: '), result.reason);
    t.true(result.reason.includes(reason), result.reason);
  });
}

test('accepts a pattern of exactly the maximum length', (t) => {
  const input = 'a'.repeat(MAX_PATTERN_LENGTH);
  t.deepEqual(parseRecipientPattern(input, DOMAIN), {
    ok: true,
    value: { kind: 'exact', pattern: input, scope: 'local' },
  });
});

test('the length limit applies after trimming', (t) => {
  const input = ` ${'a'.repeat(MAX_PATTERN_LENGTH)} `;
  t.true(parseRecipientPattern(input, DOMAIN).ok);
});

const compiled: ReadonlyArray<{ source: string; input: string; matches: boolean }> = [
  { source: 'support-[a-z0-9]+', input: 'support-42', matches: true },
  // Anchored to the whole input, not a search.
  { source: 'support-[a-z0-9]+', input: 'x-support-42', matches: false },
  { source: 'a|b', input: 'ab', matches: false },
  { source: 'a|b', input: 'b', matches: true },
  // 300 characters: a bounded, linear match whose result is still exact.
  { source: '[a-z]+(-[a-z]+)*', input: `${'ab-'.repeat(99)}abc`, matches: true },
  { source: '[a-z]+(-[a-z]+)*', input: `${'ab-'.repeat(99)}ab-`, matches: false },
  // Refused by parseRecipientPattern, yet on the linear engine even this input returns at once; a
  // backtracking engine would not finish.
  { source: '(a*)*b', input: 'a'.repeat(100_000), matches: false },
];

for (const { source, input, matches } of compiled) {
  test(`compileRegex(${JSON.stringify(source)}) ${matches ? 'matches' : 'rejects'} a ${input.length}-character input`, (t) => {
    const regex = compileRegex(source);
    t.true(regex.flags.includes('l'));
    t.is(regex.test(input), matches);
  });
}

test('compileRegex throws for constructs the linear engine cannot run', (t) => {
  t.throws(() => compileRegex('(a)\\1'), { instanceOf: SyntaxError, message: /linear time/ });
});
