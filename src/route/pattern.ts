// Owns the recipient_pattern grammar of a route: parsing, validation and the normalised form that is
// stored and returned by the API, plus the one place regexes are compiled so every match runs in linear time.
import { createRequire } from 'node:module';
import { setFlagsFromString } from 'node:v8';
import type { PatternKind } from '../store/documents.ts';

// Unlocks the 'l' regexp flag (V8's non-backtracking engine). Must happen before any 'l' regex is built,
// hence at module load rather than lazily.
setFlagsFromString('--enable-experimental-regexp-engine');

export interface ParsedPattern {
  kind: PatternKind;
  /** normalised text that is stored and returned by the API as recipient_pattern */
  pattern: string;
  /** 'address' when the pattern contains '@' (matched against the whole address), else 'local' (matched against the local part of addresses at the route's domain) */
  scope: 'address' | 'local';
}

export type PatternResult = { ok: true; value: ParsedPattern } | { ok: false; reason: string };

export const MAX_PATTERN_LENGTH = 256;

const RECHECK_TIMEOUT_MS = 2000;
// recheck is loaded by the first regex pattern checked, not with this module: loading it is a
// measurable part of a worker's start (docs/decisions/0020-fast-worker-start.md) for a check that
// only route writes make
const require = createRequire(import.meta.url);
let recheck: typeof import('recheck') | undefined;
const LINEAR_ENGINE_REFUSAL = 'Cannot be executed in linear time';
const PLUS_SUFFIX = '+*';

// RFC 5322 atext and '.', plus any non-ASCII character (RFC 6531 SMTPUTF8 local parts). '*' is atext
// too, which is why a literal '*' cannot be routed on: here it always means "wildcard".
const LOCAL_PART_CHARACTER = /^[a-z0-9!#$%&'*+\-/=?^_`{|}~.\u{80}-\u{10ffff}]$/u;
const WHITESPACE_OR_CONTROL = /[\s\p{Cc}]/u;
const CONTROL = /\p{Cc}/u;
const JAVASCRIPT_REGEX_FLAGS = /^[dgimsuvy]+$/;

// Escapes whose payload names a code point or property: lowercasing it would change what it matches
// (\x4A is 'J', \x4a too, but \p{Lu} and \p{lu} differ), so the payload is copied as written.
const VERBATIM_ESCAPE_PAYLOAD = Object.freeze({
  x: /^[0-9a-f]{2}/i,
  u: /^(?:[0-9a-f]{4}|\{[0-9a-f]+\})/i,
  p: /^\{[^}]*\}/,
  P: /^\{[^}]*\}/,
  c: /^[a-z]/i,
} as const);

function refuse(reason: string): PatternResult {
  return { ok: false, reason: `recipient_pattern: ${reason}` };
}

function accept(kind: PatternKind, pattern: string, scope: ParsedPattern['scope']): PatternResult {
  return { ok: true, value: { kind, pattern, scope } };
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Compiles a regex source (without slashes) anchored to the whole input, on V8's linear-time engine.
 * Throws SyntaxError for invalid sources and for constructs that engine cannot run ("Cannot be executed
 * in linear time"). Callers match lowercased input: the engine does not support the 'i' flag.
 */
export function compileRegex(source: string): RegExp {
  return new RegExp(`^(?:${source})$`, 'l');
}

export function parseRecipientPattern(input: string, routeDomain: string): PatternResult {
  const text = input.trim();
  if (text === '') return refuse('must not be empty');
  if (text.length > MAX_PATTERN_LENGTH) {
    return refuse(`must be at most ${MAX_PATTERN_LENGTH} characters (got ${text.length})`);
  }
  if (text.startsWith('/')) return parseRegexPattern(text);
  return parseAddressPattern(text.toLowerCase(), routeDomain);
}

function parseAddressPattern(text: string, routeDomain: string): PatternResult {
  if (WHITESPACE_OR_CONTROL.test(text)) return refuse('must not contain whitespace or control characters');

  const parts = text.split('@');
  if (parts.length > 2) return refuse("must contain at most one '@'");
  const [localPart = '', domainPart] = parts;

  if (localPart === '') return refuse("local part (before '@') must not be empty");
  if (domainPart !== undefined) {
    if (domainPart === '') return refuse("domain part (after '@') must not be empty");
    if (domainPart.includes('*')) return refuse("'*' is only allowed in the local part, not in the domain");
    if (domainPart !== routeDomain) {
      return refuse(
        `domain "${domainPart}" does not match the route's domain "${routeDomain}"; a route only receives mail for its own domain`,
      );
    }
  }
  for (const character of localPart) {
    if (!LOCAL_PART_CHARACTER.test(character)) {
      return refuse(`character '${character}' is not allowed in the local part of an address`);
    }
  }

  const scope = domainPart === undefined ? 'local' : 'address';
  if (!localPart.includes('*')) return accept('exact', text, scope);

  const plusBase = localPart.endsWith(PLUS_SUFFIX) ? localPart.slice(0, -PLUS_SUFFIX.length) : undefined;
  if (plusBase !== undefined && !plusBase.includes('*')) {
    // '+*' alone would mean "any address whose local part starts with '+'": almost surely a typo.
    if (plusBase === '') return refuse("plus-addressing needs a name before '+*' (e.g. alice+*)");
    return accept('plus', text, scope);
  }
  return accept('wildcard', text, scope);
}

function parseRegexPattern(text: string): PatternResult {
  const closingSlash = text.lastIndexOf('/');
  if (closingSlash === 0) return refuse("a regex must be closed with '/' (write it as /source/)");
  const afterClosingSlash = text.slice(closingSlash + 1);
  if (afterClosingSlash !== '') {
    if (JAVASCRIPT_REGEX_FLAGS.test(afterClosingSlash)) {
      return refuse(
        `regex flags ("${afterClosingSlash}") are not supported; matching is already case-insensitive and anchored`,
      );
    }
    return refuse("nothing may follow a regex's closing '/' (write it as /source/)");
  }

  const source = text.slice(1, closingSlash);
  if (source === '') return refuse('regex must not be empty');
  if (CONTROL.test(source)) return refuse('regex must not contain control characters; write them as escapes');

  try {
    new RegExp(source);
  } catch (error) {
    return refuse(`regex does not compile: ${errorMessage(error)}`);
  }

  const nonLinearConstruct = findNonLinearConstruct(source);
  if (nonLinearConstruct !== undefined) {
    return refuse(`regex ${nonLinearConstruct} is not allowed: it cannot be matched in linear time`);
  }

  const normalised = lowercaseRegexLiterals(source);
  try {
    compileRegex(normalised);
  } catch (error) {
    const message = errorMessage(error);
    if (message.includes(LINEAR_ENGINE_REFUSAL)) {
      return refuse(
        'regex uses a construct the linear-time engine cannot run (for example a large {n,m} repetition or an inline modifier)',
      );
    }
    return refuse(`regex does not compile once lowercased: ${message}`);
  }

  const unsafeBecause = backtrackingRisk(normalised);
  if (unsafeBecause !== undefined) return refuse(unsafeBecause);

  return accept('regex', `/${normalised}/`, normalised.includes('@') ? 'address' : 'local');
}

/**
 * Names the first backreference or lookaround outside a character class, if any. Assumes a source that
 * compiles, so escapes and classes are well formed.
 */
function findNonLinearConstruct(source: string): string | undefined {
  let insideClass = false;
  for (let index = 0; index < source.length; index += 1) {
    const character = source[index];
    const next = source[index + 1] ?? '';
    if (character === '\\') {
      if (!insideClass && /[1-9]/.test(next)) return 'backreference (\\1 … \\9)';
      if (!insideClass && next === 'k' && source[index + 2] === '<') return 'backreference (\\k<name>)';
      index += 1;
    } else if (insideClass) {
      if (character === ']') insideClass = false;
    } else if (character === '[') {
      insideClass = true;
    } else if (character === '(' && next === '?') {
      const opener = source.slice(index + 2, index + 4);
      if (opener.startsWith('=') || opener.startsWith('!')) return 'lookahead ((?= or (?!)';
      if (opener === '<=' || opener === '<!') return 'lookbehind ((?<= or (?<!)';
    }
  }
  return undefined;
}

/**
 * Lowercases literal characters so the regex can run against lowercased input without the 'i' flag.
 * Escapes are copied unchanged: \W and \w differ, and code point / property payloads are case-sensitive.
 */
function lowercaseRegexLiterals(source: string): string {
  let normalised = '';
  let index = 0;
  while (index < source.length) {
    const character = source[index] ?? '';
    if (character !== '\\') {
      normalised += character.toLowerCase();
      index += 1;
      continue;
    }
    const escaped = source[index + 1] ?? '';
    let end = index + 2;
    if (Object.hasOwn(VERBATIM_ESCAPE_PAYLOAD, escaped)) {
      const payload = VERBATIM_ESCAPE_PAYLOAD[escaped as keyof typeof VERBATIM_ESCAPE_PAYLOAD].exec(
        source.slice(end),
      );
      end += payload?.[0].length ?? 0;
    }
    normalised += source.slice(index, end);
    index = end;
  }
  return normalised;
}

/**
 * Matching already runs on the linear engine; recheck is the second line of defence, so a pattern stays
 * safe should it ever be run by a backtracking engine. It analyses the anchored form that actually runs:
 * unanchored, it reports harmless patterns such as [a-z]+-alerts as polynomial (a search retries every
 * start position), which would refuse most useful regexes.
 */
function backtrackingRisk(normalisedSource: string): string | undefined {
  recheck ??= require('recheck') as typeof import('recheck');
  try {
    const diagnostics = recheck.checkSync(`^(?:${normalisedSource})$`, '', { timeout: RECHECK_TIMEOUT_MS });
    if (diagnostics.status === 'safe') return undefined;
    if (diagnostics.status === 'vulnerable') {
      return `regex can backtrack catastrophically (${diagnostics.complexity.type})`;
    }
    return `regex could not be proven safe from catastrophic backtracking (${diagnostics.error.kind}); simplify it`;
  } catch (error) {
    return `regex could not be proven safe from catastrophic backtracking (${errorMessage(error)}); simplify it`;
  }
}
