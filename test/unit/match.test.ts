// Covers route selection: what each kind matches, which route wins when several do, and the input limits.
import test from 'ava';
import { compileRouteTable, MAX_ADDRESS_LENGTH, type RouteRule } from '../../src/route/match.ts';
import { parseRecipientPattern } from '../../src/route/pattern.ts';

const DOMAIN = 'example.com';

let routeCounter = 0;

/** Builds a route the way the API would: through parseRecipientPattern, so tests use stored forms. */
function route(input: string, options: { id?: string; domain?: string; createdAt?: string } = {}): RouteRule {
  const domain = options.domain ?? DOMAIN;
  const parsed = parseRecipientPattern(input, domain);
  if (!parsed.ok) throw new Error(parsed.reason);
  routeCounter += 1;
  return {
    id: options.id ?? `route-${String(routeCounter).padStart(4, '0')}`,
    domain,
    ...parsed.value,
    created_at: new Date(options.createdAt ?? '2024-01-01T00:00:00Z'),
  };
}

const perKind: ReadonlyArray<{
  pattern: string;
  domain?: string;
  address: string;
  matches: boolean;
  plusTag?: string;
}> = [
  { pattern: 'alice', address: 'alice@example.com', matches: true },
  { pattern: 'alice', address: 'ALICE@Example.COM', matches: true },
  { pattern: 'alice', address: 'alice@other.com', matches: false },
  { pattern: 'alice', address: 'alicex@example.com', matches: false },
  { pattern: 'Alice@Example.com', address: 'alice@example.com', matches: true },
  { pattern: 'alice@example.com', address: 'alice@example.org', matches: false },
  { pattern: 'alice+*', address: 'alice@example.com', matches: true },
  { pattern: 'alice+*', address: 'alice+news@example.com', matches: true, plusTag: 'news' },
  { pattern: 'alice+*', address: 'Alice+News@EXAMPLE.com', matches: true, plusTag: 'news' },
  { pattern: 'alice+*', address: 'alice+@example.com', matches: true, plusTag: '' },
  { pattern: 'alice+*', address: 'alice+a+b@example.com', matches: true, plusTag: 'a+b' },
  { pattern: 'alice+*@example.com', address: 'alice+x@example.com', matches: true, plusTag: 'x' },
  { pattern: 'alice+*', address: 'alicex+news@example.com', matches: false },
  { pattern: 'alice+*', address: 'bob+alice@example.com', matches: false },
  { pattern: 'alice+*', address: 'alice+news@other.com', matches: false },
  { pattern: 'a+b+*', address: 'a+b+c@example.com', matches: true, plusTag: 'c' },
  { pattern: 'a+b+*', address: 'a+c@example.com', matches: false },
  { pattern: 'support-*', address: 'support-@example.com', matches: true },
  { pattern: 'support-*', address: 'Support-EU@example.com', matches: true },
  { pattern: 'support-*', address: 'support@example.com', matches: false },
  { pattern: 'support-*', address: 'xsupport-eu@example.com', matches: false },
  { pattern: 's.p-*', address: 'sxp-eu@example.com', matches: false },
  { pattern: '*', address: 'anyone@example.com', matches: true },
  { pattern: '*', address: 'anyone@other.com', matches: false },
  { pattern: '*@example.com', address: 'anyone@example.com', matches: true },
  // '*' never crosses '@', even inside a quoted local part.
  { pattern: '*@example.com', address: '"a@b"@example.com', matches: false },
  { pattern: '*', address: '"a@b"@example.com', matches: false },
  { pattern: '/support-[0-9]+/', address: 'support-42@example.com', matches: true },
  { pattern: '/Support-[0-9]+/', address: 'SUPPORT-42@example.com', matches: true },
  // Anchored: a regex must cover the whole local part, not a piece of it.
  { pattern: '/support-[0-9]+/', address: 'support-42x@example.com', matches: false },
  { pattern: '/support-[0-9]+/', address: 'support-42@other.com', matches: false },
  // Local scope: the regex sees only the local part, so a domain in it can never match.
  { pattern: '/[a-z]+/', address: 'alice@example.com', matches: true },
  // Address scope: the regex sees the whole address.
  { pattern: '/[a-z]+@example\\.com/', address: 'alice@example.com', matches: true },
  { pattern: '/[a-z]+@example\\.com/', address: 'alice1@example.com', matches: false },
  // Address scope can name the route's domain only in the regex, yet other domains stay ignored.
  { pattern: '/.*@other\\.com/', address: 'alice@other.com', matches: false },
  { pattern: 'alice', domain: 'other.com', address: 'alice@other.com', matches: true },
  { pattern: 'alice', domain: 'other.com', address: 'alice@example.com', matches: false },
];

for (const { pattern, domain, address, matches, plusTag } of perKind) {
  test(`${pattern}${domain ? ` at ${domain}` : ''} ${matches ? 'matches' : 'ignores'} ${address}`, (t) => {
    const rule = route(pattern, domain ? { domain } : {});
    const match = compileRouteTable([rule]).match(address);
    if (!matches) {
      t.is(match, undefined);
      return;
    }
    t.is(match?.route, rule);
    t.is(match?.plusTag, plusTag);
    t.is(match !== undefined && 'plusTag' in match, plusTag !== undefined);
  });
}

const unmatchable: ReadonlyArray<{ why: string; address: string }> = [
  { why: 'no @', address: 'anyone' },
  { why: 'an empty local part', address: '@example.com' },
  { why: 'an empty domain', address: 'anyone@' },
  { why: 'more than the maximum length', address: `${'a'.repeat(MAX_ADDRESS_LENGTH - 11)}@example.com` },
  { why: 'a domain that is only a suffix', address: 'anyone@sub.example.com' },
];

for (const { why, address } of unmatchable) {
  test(`an address with ${why} matches nothing`, (t) => {
    const table = compileRouteTable([route('*'), route('*@example.com'), route('/.*/')]);
    t.is(table.match(address), undefined);
  });
}

test('an address of exactly the maximum length still matches', (t) => {
  const everyone = route('*');
  const address = `${'a'.repeat(MAX_ADDRESS_LENGTH - 12)}@example.com`;
  t.is(address.length, MAX_ADDRESS_LENGTH);
  t.is(compileRouteTable([everyone]).match(address)?.route, everyone);
});

test('the address is split at its last @', (t) => {
  const quoted = route('/"a@b"@example\\.com/');
  t.is(compileRouteTable([quoted]).match('"a@b"@example.com')?.route, quoted);
});

test('precedence: exact, then plus, then regex, then wildcard', (t) => {
  // Created newest-first by kind precedence, so age alone would pick the opposite order.
  const wildcard = route('alice*', { createdAt: '2020-01-01T00:00:00Z' });
  const regex = route('/alice\\+[a-z]+/', { createdAt: '2021-01-01T00:00:00Z' });
  const plus = route('alice+*', { createdAt: '2022-01-01T00:00:00Z' });
  const exact = route('alice+news', { createdAt: '2023-01-01T00:00:00Z' });
  const steps = [
    { routes: [wildcard, regex, plus, exact], winner: exact },
    { routes: [wildcard, regex, plus], winner: plus },
    { routes: [wildcard, regex], winner: regex },
    { routes: [wildcard], winner: wildcard },
  ] as const;
  for (const { routes, winner } of steps) {
    t.is(compileRouteTable(routes).match('alice+news@example.com')?.route, winner);
  }
});

test('precedence does not depend on the order routes are given in', (t) => {
  const wildcard = route('*');
  const exact = route('alice');
  t.is(compileRouteTable([wildcard, exact]).match('alice@example.com')?.route, exact);
  t.is(compileRouteTable([exact, wildcard]).match('alice@example.com')?.route, exact);
});

const oldestFirst: ReadonlyArray<{ kind: string; older: string; newer: string; address: string }> = [
  { kind: 'exact', older: 'alice', newer: 'alice@example.com', address: 'alice@example.com' },
  { kind: 'plus', older: 'alice+*', newer: 'alice+*@example.com', address: 'alice+x@example.com' },
  { kind: 'plus across bases', older: 'a+*', newer: 'a+b+*', address: 'a+b+c@example.com' },
  { kind: 'regex', older: '/[a-z]+/', newer: '/alice/', address: 'alice@example.com' },
  { kind: 'wildcard', older: '*', newer: 'ali*', address: 'alice@example.com' },
];

for (const { kind, older, newer, address } of oldestFirst) {
  test(`within ${kind}, the oldest route wins`, (t) => {
    const oldRoute = route(older, { createdAt: '2020-01-01T00:00:00Z' });
    const newRoute = route(newer, { createdAt: '2024-01-01T00:00:00Z' });
    t.is(compileRouteTable([newRoute, oldRoute]).match(address)?.route, oldRoute);
    const swapped = [
      { ...oldRoute, created_at: newRoute.created_at },
      { ...newRoute, created_at: oldRoute.created_at },
    ];
    t.is(compileRouteTable(swapped).match(address)?.route, swapped[1]);
  });
}

test('routes created at the same instant are ordered by id', (t) => {
  const createdAt = '2024-05-05T00:00:00Z';
  const first = route('*', { id: 'a-route', createdAt });
  const second = route('ali*', { id: 'b-route', createdAt });
  t.is(compileRouteTable([second, first]).match('alice@example.com')?.route, first);
  t.is(compileRouteTable([first, second]).match('alice@example.com')?.route, first);
});

test('a 300-character local part is matched by a regex route with the exact answer', (t) => {
  const hyphenated = route('/[a-z]+(-[a-z]+)*/');
  const table = compileRouteTable([hyphenated]);
  const matching = `${'ab-'.repeat(99)}abc`;
  const failing = `${'ab-'.repeat(99)}ab-`;
  t.is(matching.length, 300);
  t.is(table.match(`${matching}@example.com`)?.route, hyphenated);
  t.is(table.match(`${failing}@example.com`), undefined);
});

test('a stored regex that no longer compiles fails the whole table loudly, naming the route', (t) => {
  const broken: RouteRule = { ...route('/a/'), id: 'broken-route', pattern: '/(a)\\1/' };
  t.throws(() => compileRouteTable([broken]), { message: /broken-route/ });
});

test('candidates lists every matching route by precedence, the first of them the one match picks', (t) => {
  const wildcard = route('*', { createdAt: '2024-01-01T00:00:00Z' });
  const regex = route('/a.*/', { createdAt: '2024-01-03T00:00:00Z' });
  const olderPlus = route('alice+*', { createdAt: '2024-01-04T00:00:00Z' });
  const newerPlus = route('alice+news+*', { createdAt: '2024-01-05T00:00:00Z' });
  const exact = route('alice+news+x', { createdAt: '2024-01-06T00:00:00Z' });
  const table = compileRouteTable([wildcard, newerPlus, exact, regex, olderPlus]);
  const address = 'alice+news+x@example.com';
  const candidates = table.candidates(address);
  t.deepEqual(
    candidates.map((c) => c.route),
    [exact, olderPlus, newerPlus, regex, wildcard],
  );
  t.is<RouteRule | undefined, RouteRule | undefined>(candidates[0]?.route, table.match(address)?.route);
  t.is(candidates[1]!.plusTag, 'news+x');
  t.is(candidates[2]!.plusTag, 'x');
  t.deepEqual(table.candidates('bob@other.com'), []);
  t.deepEqual(table.candidates(`${'a'.repeat(MAX_ADDRESS_LENGTH)}@example.com`), []);
});
