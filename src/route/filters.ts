// A route's filters: conditions besides its recipient pattern, on the envelope sender, on one
// header's value and on the sender's DMARC result. A recipient whose route's filters fail falls
// through to the next route by precedence. The sender is known at RCPT; a header and DMARC only
// once the message is parsed, so a route with those is decided when the message is routed.
import type { RouteFilterDoc } from '../store/documents.ts';
import { compileRouteTable, type RouteTable } from './match.ts';
import { compileRegex, parseRecipientPattern } from './pattern.ts';

/** What is known of a message when a route is chosen; absent fields are not known yet. */
export interface MatchFacts {
  /** the envelope sender ('' for a bounce) */
  mailFrom?: string;
  /** the message's headers, by lowercase name (only those some filter names) */
  headers?: Readonly<Record<string, readonly string[]>>;
  /** the DMARC result of the From domain ('pass', 'fail', 'none', ...) */
  dmarc?: string;
}

export interface CompiledFilters {
  sender?: (address: string) => boolean;
  header?: { name: string; test: (value: string) => boolean };
  dmarc?: 'pass';
}

/** Which filter of a route failed, or that its content filters cannot be judged yet. */
export type FilterVerdict = { pass: true } | { pass: false; filter: FilterName } | { undecided: FilterName };
export type FilterName = 'mail_from' | 'header' | 'dmarc';

export const MAX_HEADER_VALUE_PATTERN = 256;
const HEADER_NAME = /^[!-9;-~]{1,100}$/;

type Checked<T> = { ok: true; value: T } | { ok: false; reason: string };

function renamed(reason: string, field: string): string {
  return reason.replace(/^recipient_pattern:/, `${field}:`);
}

/** A sender pattern: the recipient kinds, always with the domain (`*@supplier.example`), or a /regex/. */
function senderPattern(input: string): Checked<string> {
  const text = input.trim();
  if (!text.startsWith('/') && !text.includes('@'))
    return {
      ok: false,
      reason: 'filters.mail_from: must name the domain (alice@example.com, *@example.com) or be a /regex/',
    };
  const domain = text.slice(text.lastIndexOf('@') + 1).toLowerCase();
  const parsed = parseRecipientPattern(text, domain);
  if (!parsed.ok) return { ok: false, reason: renamed(parsed.reason, 'filters.mail_from') };
  return { ok: true, value: parsed.value.pattern };
}

/** A header value condition: an exact value (compared case-insensitively) or a /regex/ (linear, as recipients'). */
function headerValue(input: string): Checked<string> {
  const text = input.trim();
  if (text === '' || text.length > MAX_HEADER_VALUE_PATTERN)
    return { ok: false, reason: `filters.header.value: 1 to ${MAX_HEADER_VALUE_PATTERN} characters` };
  if (!text.startsWith('/')) return { ok: true, value: text };
  const parsed = parseRecipientPattern(text, 'header.invalid');
  if (!parsed.ok) return { ok: false, reason: renamed(parsed.reason, 'filters.header.value') };
  return { ok: true, value: parsed.value.pattern };
}

/** Validates and normalises filters as given to the API; an empty object means none. */
export function checkFilters(input: {
  mail_from?: string;
  header?: { name: string; value: string };
  dmarc?: 'pass';
}): Checked<RouteFilterDoc> {
  const value: RouteFilterDoc = {};
  if (input.mail_from !== undefined) {
    const sender = senderPattern(input.mail_from);
    if (!sender.ok) return sender;
    value.mail_from = sender.value;
  }
  if (input.header !== undefined) {
    const name = input.header.name.trim().toLowerCase();
    if (!HEADER_NAME.test(name))
      return { ok: false, reason: 'filters.header.name: must be a header field name' };
    const checked = headerValue(input.header.value);
    if (!checked.ok) return checked;
    value.header = { name, value: checked.value };
  }
  if (input.dmarc !== undefined) value.dmarc = input.dmarc;
  return { ok: true, value };
}

/** True when a filter needs the parsed message (a header or DMARC): decided at routing, not at RCPT. */
export function needsContent(filters: RouteFilterDoc | undefined): boolean {
  return filters?.header !== undefined || filters?.dmarc !== undefined;
}

function regexSource(pattern: string): string | undefined {
  return pattern.length >= 2 && pattern.startsWith('/') && pattern.endsWith('/')
    ? pattern.slice(1, -1)
    : undefined;
}

/** Compiles stored filters (validated on write); undefined when the route has none. */
export function compileFilters(filters: RouteFilterDoc | undefined): CompiledFilters | undefined {
  if (!filters || (!filters.mail_from && !filters.header && !filters.dmarc)) return undefined;
  const compiled: CompiledFilters = {};
  if (filters.mail_from) {
    const source = regexSource(filters.mail_from);
    if (source !== undefined) {
      const regex = compileRegex(source);
      compiled.sender = (address) => regex.test(address.toLowerCase());
    } else {
      const pattern = filters.mail_from;
      const domain = pattern.slice(pattern.lastIndexOf('@') + 1);
      const parsed = parseRecipientPattern(pattern, domain);
      if (!parsed.ok) throw new Error(`filters.mail_from ${pattern} no longer parses: ${parsed.reason}`);
      const table: RouteTable<{
        id: string;
        domain: string;
        kind: typeof parsed.value.kind;
        pattern: string;
        scope: 'address' | 'local';
        created_at: Date;
      }> = compileRouteTable([{ id: 'sender', domain, ...parsed.value, created_at: new Date(0) }]);
      compiled.sender = (address) => table.match(address) !== undefined;
    }
  }
  if (filters.header) {
    const { name, value } = filters.header;
    const source = regexSource(value);
    if (source !== undefined) {
      const regex = compileRegex(source);
      compiled.header = { name, test: (text) => regex.test(text.trim().toLowerCase()) };
    } else {
      const wanted = value.toLowerCase();
      compiled.header = { name, test: (text) => text.trim().toLowerCase() === wanted };
    }
  }
  if (filters.dmarc) compiled.dmarc = filters.dmarc;
  return compiled;
}

/**
 * Judges a route's filters by what is known: the sender first (known at RCPT), then the header
 * and DMARC, which are undecided until the message is parsed.
 */
export function judge(filters: CompiledFilters | undefined, facts: MatchFacts): FilterVerdict {
  if (!filters) return { pass: true };
  if (filters.sender && facts.mailFrom !== undefined && !filters.sender(facts.mailFrom))
    return { pass: false, filter: 'mail_from' };
  if (filters.sender && facts.mailFrom === undefined) return { undecided: 'mail_from' };
  if (filters.header) {
    if (!facts.headers) return { undecided: 'header' };
    const values = facts.headers[filters.header.name] ?? [];
    if (!values.some((value) => filters.header!.test(value))) return { pass: false, filter: 'header' };
  }
  if (filters.dmarc) {
    if (facts.dmarc === undefined) return { undecided: 'dmarc' };
    if (facts.dmarc !== filters.dmarc) return { pass: false, filter: 'dmarc' };
  }
  return { pass: true };
}
