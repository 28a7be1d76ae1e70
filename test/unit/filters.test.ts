// Routes' filters as pure logic: what each kind passes, fails or cannot judge yet, and what the API
// refuses (table-driven).
import test from 'ava';
import {
  checkFilters,
  compileFilters,
  judge,
  type MatchFacts,
  needsContent,
} from '../../src/route/filters.ts';

function compiled(input: Parameters<typeof checkFilters>[0]) {
  const checked = checkFilters(input);
  if (!checked.ok) throw new Error(checked.reason);
  return compileFilters(checked.value);
}

const cases: ReadonlyArray<[string, Parameters<typeof checkFilters>[0], MatchFacts, string]> = [
  ['exact sender', { mail_from: 'Sales@Supplier.example' }, { mailFrom: 'sales@supplier.example' }, 'pass'],
  [
    'exact sender, another',
    { mail_from: 'sales@supplier.example' },
    { mailFrom: 'x@supplier.example' },
    'mail_from',
  ],
  ['wildcard sender', { mail_from: '*@supplier.example' }, { mailFrom: 'ANY@supplier.example' }, 'pass'],
  [
    'wildcard sender, subdomain',
    { mail_from: '*@supplier.example' },
    { mailFrom: 'a@x.supplier.example' },
    'mail_from',
  ],
  ['plus sender', { mail_from: 'alerts+*@ops.example' }, { mailFrom: 'alerts+db@ops.example' }, 'pass'],
  ['regex sender', { mail_from: '/[a-z]+@(a|b)\\.example/' }, { mailFrom: 'x@b.example' }, 'pass'],
  ['a bounce', { mail_from: '*@supplier.example' }, { mailFrom: '' }, 'mail_from'],
  ['sender unknown', { mail_from: '*@supplier.example' }, {}, 'undecided mail_from'],
  [
    'header exact',
    { header: { name: 'X-Tenant', value: '42' } },
    { headers: { 'x-tenant': [' 42 '] } },
    'pass',
  ],
  [
    'header, one of several',
    { header: { name: 'x-tag', value: 'B' } },
    { headers: { 'x-tag': ['a', 'b'] } },
    'pass',
  ],
  ['header absent', { header: { name: 'x-tenant', value: '42' } }, { headers: {} }, 'header'],
  [
    'header regex',
    { header: { name: 'x-tenant', value: '/4[0-9]/' } },
    { headers: { 'x-tenant': ['47'] } },
    'pass',
  ],
  [
    'header regex, whole value',
    { header: { name: 'x-tenant', value: '/4[0-9]/' } },
    { headers: { 'x-tenant': ['470'] } },
    'header',
  ],
  [
    'header unknown',
    { header: { name: 'x-tenant', value: '42' } },
    { mailFrom: 'a@b.c' },
    'undecided header',
  ],
  ['dmarc pass', { dmarc: 'pass' }, { dmarc: 'pass' }, 'pass'],
  ['dmarc fail', { dmarc: 'pass' }, { dmarc: 'fail' }, 'dmarc'],
  ['dmarc unknown', { dmarc: 'pass' }, { mailFrom: 'a@b.c' }, 'undecided dmarc'],
  [
    'sender decided before content',
    { mail_from: '*@a.example', dmarc: 'pass' },
    { mailFrom: 'x@b.example' },
    'mail_from',
  ],
];

for (const [name, filters, facts, expected] of cases) {
  test(`judge: ${name}`, (t) => {
    const verdict = judge(compiled(filters), facts);
    const got =
      'undecided' in verdict ? `undecided ${verdict.undecided}` : verdict.pass ? 'pass' : verdict.filter;
    t.is(got, expected);
  });
}

test('no filters pass everything, and need nothing of the content', (t) => {
  t.deepEqual(judge(compileFilters({}), {}), { pass: true });
  t.false(needsContent({ mail_from: '*@a.example' }));
  t.true(needsContent({ dmarc: 'pass' }));
});

for (const [filters, field] of [
  [{ mail_from: 'nobody' }, 'filters.mail_from'],
  [{ mail_from: '*@' }, 'filters.mail_from'],
  [{ mail_from: '/(a+)+b/' }, 'filters.mail_from'],
  [{ header: { name: 'two words', value: 'x' } }, 'filters.header.name'],
  [{ header: { name: 'x', value: '/(a|a)*b/' } }, 'filters.header.value'],
  [{ header: { name: 'x', value: ' ' } }, 'filters.header.value'],
] as const) {
  test(`checkFilters refuses ${JSON.stringify(filters)}, naming ${field}`, (t) => {
    const checked = checkFilters(filters);
    t.false(checked.ok);
    if (!checked.ok) t.true(checked.reason.startsWith(`${field}:`), checked.reason);
  });
}
