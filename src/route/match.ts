// Owns recipient → route selection: compiles stored routes once into lookup structures, then picks, for
// each recipient address, the single route that receives it (exact > plus > regex > wildcard, oldest first).
import type { PatternKind } from '../store/documents.ts';
import { compileRegex } from './pattern.ts';

export interface RouteRule {
  id: string;
  domain: string;
  kind: PatternKind;
  pattern: string;
  scope: 'address' | 'local';
  created_at: Date;
}

export interface RouteMatch<R extends RouteRule> {
  route: R;
  /**
   * For a plus route: what follows the '+' in the recipient's local part, lowercased like the rest of the
   * address ('' for "alice+@…"); absent when the recipient had no tag.
   */
  plusTag?: string;
}

export interface RouteTable<R extends RouteRule> {
  /** the route of highest precedence that matches */
  match(address: string): RouteMatch<R> | undefined;
  /** every route that matches, highest precedence first (a route's filters may pass it over) */
  candidates(address: string): Array<RouteMatch<R>>;
}

/** RFC 5321 path limit; longer input never matches, which bounds the work done per call. */
export const MAX_ADDRESS_LENGTH = 320;

const PLUS_SUFFIX = '+*';
// A wildcard '*' never crosses '@', so "*@example.com" cannot swallow a quoted local part's '@'.
const WILDCARD_REGEX_SOURCE = '[^@]*';
const REGEX_SPECIAL_CHARACTERS = /[\\^$.*+?()[\]{}|]/g;

interface RankedRoute<R extends RouteRule> {
  route: R;
  /** position in oldest-first order; the lower rank wins among routes of one kind */
  rank: number;
}

interface ScannedRoute<R extends RouteRule> {
  route: R;
  scope: 'address' | 'local';
  regex: RegExp;
}

/** Routes that cannot be found by key and must be tried in turn, oldest first. */
interface ScannedRoutes<R extends RouteRule> {
  regex: ScannedRoute<R>[];
  wildcard: ScannedRoute<R>[];
}

function oldestFirst(left: RouteRule, right: RouteRule): number {
  const byAge = left.created_at.getTime() - right.created_at.getTime();
  if (byAge !== 0) return byAge;
  if (left.id === right.id) return 0;
  return left.id < right.id ? -1 : 1;
}

/**
 * The full address a keyed (exact or plus) route stands for, or undefined when an address-scoped pattern
 * names another domain than its route: no recipient could satisfy both, so the route can never match.
 */
function keyedAddress(localOrAddress: string, scope: RouteRule['scope'], domain: string): string | undefined {
  if (scope === 'local') return `${localOrAddress}@${domain}`;
  const at = localOrAddress.lastIndexOf('@');
  return localOrAddress.slice(at + 1) === domain ? localOrAddress : undefined;
}

function wildcardToRegexSource(glob: string): string {
  return glob
    .split('*')
    .map((literal) => literal.replace(REGEX_SPECIAL_CHARACTERS, '\\$&'))
    .join(WILDCARD_REGEX_SOURCE);
}

function regexSourceOf(route: RouteRule): string {
  if (route.pattern.length < 2 || !route.pattern.startsWith('/') || !route.pattern.endsWith('/')) {
    throw new Error(`route ${route.id}: regex recipient_pattern ${route.pattern} is not written as /source/`);
  }
  return route.pattern.slice(1, -1);
}

function compileScanned<R extends RouteRule>(route: R, source: string): ScannedRoute<R> {
  try {
    return { route, scope: route.scope, regex: compileRegex(source) };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new Error(`route ${route.id}: recipient_pattern ${route.pattern} does not compile: ${message}`);
  }
}

/**
 * Builds the lookup structures for a set of routes. Throws when a stored pattern no longer compiles
 * (patterns are validated on write, so this means hand-edited data or an engine change): failing loudly
 * beats silently sending that route's mail elsewhere.
 */
export function compileRouteTable<R extends RouteRule>(routes: readonly R[]): RouteTable<R> {
  const exactByAddress = new Map<string, RankedRoute<R>>();
  const plusByBaseAddress = new Map<string, RankedRoute<R>>();
  const scannedByDomain = new Map<string, ScannedRoutes<R>>();

  const scannedRoutesOf = (domain: string): ScannedRoutes<R> => {
    let scanned = scannedByDomain.get(domain);
    if (scanned === undefined) {
      scanned = { regex: [], wildcard: [] };
      scannedByDomain.set(domain, scanned);
    }
    return scanned;
  };

  [...routes].sort(oldestFirst).forEach((route, rank) => {
    const domain = route.domain.toLowerCase();
    switch (route.kind) {
      case 'exact': {
        const address = keyedAddress(route.pattern.toLowerCase(), route.scope, domain);
        if (address !== undefined && !exactByAddress.has(address)) {
          exactByAddress.set(address, { route, rank });
        }
        return;
      }
      case 'plus': {
        const pattern = route.pattern.toLowerCase();
        const at = route.scope === 'address' ? pattern.lastIndexOf('@') : pattern.length;
        const local = pattern.slice(0, at);
        if (!local.endsWith(PLUS_SUFFIX)) {
          throw new Error(`route ${route.id}: plus recipient_pattern ${route.pattern} does not end in '+*'`);
        }
        const base = `${local.slice(0, -PLUS_SUFFIX.length)}${pattern.slice(at)}`;
        const address = keyedAddress(base, route.scope, domain);
        if (address !== undefined && !plusByBaseAddress.has(address)) {
          plusByBaseAddress.set(address, { route, rank });
        }
        return;
      }
      case 'regex':
        scannedRoutesOf(domain).regex.push(compileScanned(route, regexSourceOf(route)));
        return;
      case 'wildcard':
        scannedRoutesOf(domain).wildcard.push(
          compileScanned(route, wildcardToRegexSource(route.pattern.toLowerCase())),
        );
        return;
      default: {
        const unknownKind: never = route.kind;
        throw new Error(`route ${(route as RouteRule).id}: unknown route kind ${String(unknownKind)}`);
      }
    }
  });

  const matchPlus = (local: string, domain: string): RouteMatch<R> | undefined => {
    let best: RankedRoute<R> | undefined;
    let bestTag: string | undefined;
    const consider = (base: string, tag: string | undefined): void => {
      const candidate = plusByBaseAddress.get(`${base}@${domain}`);
      if (candidate !== undefined && (best === undefined || candidate.rank < best.rank)) {
        best = candidate;
        bestTag = tag;
      }
    };
    consider(local, undefined);
    // A base may itself contain '+' (a+b+* matches a+b+x), so every '+' is a possible tag start; the
    // address length cap keeps this to a few hundred lookups at most.
    for (let plus = local.indexOf('+'); plus !== -1; plus = local.indexOf('+', plus + 1)) {
      consider(local.slice(0, plus), local.slice(plus + 1));
    }
    if (best === undefined) return undefined;
    return bestTag === undefined ? { route: best.route } : { route: best.route, plusTag: bestTag };
  };

  /** Every plus route whose base the local part has, by rank. */
  const allPlus = (local: string, domain: string): Array<RouteMatch<R> & { rank: number }> => {
    const found: Array<RouteMatch<R> & { rank: number }> = [];
    const consider = (base: string, tag: string | undefined): void => {
      const candidate = plusByBaseAddress.get(`${base}@${domain}`);
      if (candidate === undefined || found.some((f) => f.route === candidate.route)) return;
      found.push({
        route: candidate.route,
        rank: candidate.rank,
        ...(tag !== undefined ? { plusTag: tag } : {}),
      });
    };
    consider(local, undefined);
    for (let plus = local.indexOf('+'); plus !== -1; plus = local.indexOf('+', plus + 1)) {
      consider(local.slice(0, plus), local.slice(plus + 1));
    }
    return found.sort((a, b) => a.rank - b.rank);
  };

  const allMatching = (
    candidates: readonly ScannedRoute<R>[],
    address: string,
    local: string,
  ): Array<RouteMatch<R>> =>
    candidates
      .filter((candidate) => candidate.regex.test(candidate.scope === 'address' ? address : local))
      .map((candidate) => ({ route: candidate.route }));

  const firstMatching = (
    candidates: readonly ScannedRoute<R>[],
    address: string,
    local: string,
  ): RouteMatch<R> | undefined => {
    for (const candidate of candidates) {
      const subject = candidate.scope === 'address' ? address : local;
      if (candidate.regex.test(subject)) return { route: candidate.route };
    }
    return undefined;
  };

  return {
    match(rawAddress: string): RouteMatch<R> | undefined {
      if (rawAddress.length > MAX_ADDRESS_LENGTH) return undefined;
      const address = rawAddress.toLowerCase();
      const at = address.lastIndexOf('@');
      if (at <= 0 || at === address.length - 1) return undefined;
      const local = address.slice(0, at);
      const domain = address.slice(at + 1);

      const exact = exactByAddress.get(address);
      if (exact !== undefined) return { route: exact.route };

      const plus = matchPlus(local, domain);
      if (plus !== undefined) return plus;

      const scanned = scannedByDomain.get(domain);
      if (scanned === undefined) return undefined;
      return firstMatching(scanned.regex, address, local) ?? firstMatching(scanned.wildcard, address, local);
    },
    candidates(rawAddress: string): Array<RouteMatch<R>> {
      if (rawAddress.length > MAX_ADDRESS_LENGTH) return [];
      const address = rawAddress.toLowerCase();
      const at = address.lastIndexOf('@');
      if (at <= 0 || at === address.length - 1) return [];
      const local = address.slice(0, at);
      const domain = address.slice(at + 1);
      const exact = exactByAddress.get(address);
      const scanned = scannedByDomain.get(domain);
      return [
        ...(exact !== undefined ? [{ route: exact.route }] : []),
        ...allPlus(local, domain).map(({ rank: _rank, ...match }) => match),
        ...(scanned ? allMatching(scanned.regex, address, local) : []),
        ...(scanned ? allMatching(scanned.wildcard, address, local) : []),
      ];
    },
  };
}
