// Owns sender authentication of one message: SPF (envelope sender and connecting address), every
// DKIM signature, DMARC (policy and alignment) and ARC, checked with mailauth. Runs inside a parse
// thread (the DKIM hashes and RSA checks are CPU work), with its own DNS resolver: the configured
// servers (or the system's) and one time budget for the whole message. A DNS failure, a timeout or
// an exhausted budget gives `temperror` results; nothing here throws or waits past the budget.
import { Resolver } from 'node:dns/promises';
import os from 'node:os';
import { authenticate, spf } from 'mailauth';
import type { SenderAuth, StoredAuth } from '../store/messages.ts';

export interface AuthRequest {
  /** the connecting client's address */
  ip: string;
  /** the name it gave in EHLO/HELO */
  helo: string;
  /** MAIL FROM, empty for a bounce */
  mailFrom: string;
  /** DNS servers (`address` or `address:port`); empty: the system's */
  dnsServers: readonly string[];
  /** the time all DNS lookups of this message may take together, ms */
  budgetMs: number;
}

// one query waits this long for an answer before it is asked again (c-ares, per try)
const QUERY_TIMEOUT_MS = 2000;
const QUERY_TRIES = 2;

class DnsError extends Error {
  readonly code: string;
  constructor(code: string, name: string) {
    super(`${code} ${name}`);
    this.code = code;
  }
}

/**
 * Answers kept per thread, as an MTA's resolver keeps them: mail from one sender domain comes in
 * runs, and each message asks the same SPF, DMARC and DKIM key records again. Without it every
 * message waited for its own round trips, and a thread's throughput was its concurrency divided by
 * the DNS latency. An answer is kept a minute, "no such record" half of that; a timeout or a server
 * failure is never kept. Bounded: the oldest goes first.
 */
const ANSWER_KEEP_MS = 60_000;
const MISSING_KEEP_MS = 30_000;
const MAX_ANSWERS = 5000;
const MISSING_CODES: ReadonlySet<string> = new Set(['ENOTFOUND', 'ENODATA']);
const answers = new Map<string, { until: number; value?: unknown; error?: unknown }>();

function remember(key: string, entry: { until: number; value?: unknown; error?: unknown }): void {
  if (answers.size >= MAX_ANSWERS) answers.delete(answers.keys().next().value!);
  answers.set(key, entry);
}

/**
 * mailauth's resolver, bounded by the message's budget: past it every lookup is a timeout. Its
 * c-ares channel is made only when an answer is not kept: a message whose answers are all kept
 * (mail from one sender comes in runs) needs none.
 */
function budgetedResolver(request: AuthRequest, deadline: number) {
  let channel: Resolver | undefined;
  // what the answers given so far allow a result made from them to be kept for (see `results`)
  let keptUntil = Number.POSITIVE_INFINITY;
  let unsettled = false;
  const resolver = () => {
    if (channel) return channel;
    channel = new Resolver({ timeout: Math.min(QUERY_TIMEOUT_MS, request.budgetMs), tries: QUERY_TRIES });
    if (request.dnsServers.length > 0) channel.setServers([...request.dnsServers]);
    return channel;
  };
  const servers = request.dnsServers.join(',');
  const lookup = async (name: string, rrtype: string): Promise<unknown> => {
    const key = `${servers}|${rrtype}|${name.toLowerCase()}`;
    const known = answers.get(key);
    if (known && known.until > Date.now()) {
      keptUntil = Math.min(keptUntil, known.until);
      if ('error' in known) throw known.error;
      return known.value;
    }
    try {
      const value = await resolveWithin(name, rrtype);
      const until = Date.now() + ANSWER_KEEP_MS;
      remember(key, { until, value });
      keptUntil = Math.min(keptUntil, until);
      return value;
    } catch (err) {
      if (MISSING_CODES.has((err as { code?: string }).code ?? '')) {
        const until = Date.now() + MISSING_KEEP_MS;
        remember(key, { until, error: err });
        keptUntil = Math.min(keptUntil, until);
      } else unsettled = true;
      throw err;
    }
  };
  const resolveWithin = async (name: string, rrtype: string): Promise<unknown> => {
    const left = deadline - Date.now();
    if (left <= 0) throw new DnsError('ETIMEOUT', name);
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new DnsError('ETIMEOUT', name)), left);
    });
    try {
      return await Promise.race([resolver().resolve(name, rrtype), expired]);
    } finally {
      clearTimeout(timer);
    }
  };
  return {
    lookup,
    cancel: () => channel?.cancel(),
    /** until when every answer used is kept; undefined when one was a timeout or a failure */
    keptUntil: () => (unsettled ? undefined : Math.min(keptUntil, Date.now() + ANSWER_KEEP_MS)),
  };
}

/**
 * Results of unsigned messages, kept as long as the DNS answers they were made from. Without a
 * signature a message's results depend only on the client, the envelope sender and its From
 * field(s), which mail from one sender repeats in runs; checking such a message again with the same
 * kept answers gives the same results, for a large share of a parse thread's time
 * (docs/decisions/0018-sender-auth-shortcuts.md). A result resting on a timeout or a server failure
 * (temperror) is never kept. Bounded: the oldest goes first.
 */
const MAX_RESULTS = 2000;
/** Longer From fields are checked each time: the keys stay small (2,000 of them, under 10 MB). */
const MAX_KEPT_FROM_CHARS = 4096;
const results = new Map<string, { until: number; value: StoredAuth }>();

function keepResult(key: string, until: number, value: StoredAuth): void {
  if (results.size >= MAX_RESULTS) results.delete(results.keys().next().value!);
  results.set(key, { until, value });
}

const TEMPERROR: SenderAuth = Object.freeze({
  spf: { result: 'temperror', domain: '' },
  dkim: [],
  dmarc: { result: 'temperror', policy: 'none', domain: '' },
  arc: { result: 'temperror' },
}) as SenderAuth;

function domainOf(address: string): string {
  return address.slice(address.lastIndexOf('@') + 1).toLowerCase();
}

// mailauth's header parsing takes time quadratic in the lines of one folded field: 10,000 lines
// 0.08 s, 20,000 1.2 s, 100,000 a minute of a parse thread. Real fields fold over a few dozen.
const MAX_FIELD_LINES = 1000;

// the authserv-id of the Authentication-Results we write: read once per thread (os.hostname() is a
// system call; reading it per message cost 15 µs of the 270 that checking an unsigned 10 KB took)
const HOSTNAME = os.hostname();

/** Checks the message; resolves within the budget (plus the CPU time of the checks). */
export async function authenticateMessage(raw: Buffer, request: AuthRequest): Promise<StoredAuth> {
  const hostname = HOSTNAME;
  const dns = budgetedResolver(request, Date.now() + request.budgetMs);
  try {
    const header = scanHeader(raw);
    if (header.longestFieldLines > MAX_FIELD_LINES) return await spfOnly(request, hostname, dns.lookup);
    // everything an unsigned message's results depend on
    const key =
      header.signed || header.from.length > MAX_KEPT_FROM_CHARS
        ? undefined
        : [request.dnsServers.join(','), request.ip, request.helo, request.mailFrom, header.from].join('\n');
    const kept = key === undefined ? undefined : results.get(key);
    if (kept && kept.until > Date.now()) return kept.value;
    // an unsigned message's body is read by nothing: its DKIM check finds no signature to hash it
    // for, and ARC no set; mailauth's verifier still read every byte of it (docs/decisions/0018)
    const input = header.signed ? raw : raw.subarray(0, header.end);
    const outcome = await authenticate(input, {
      ip: request.ip,
      helo: request.helo,
      sender: request.mailFrom,
      mta: hostname,
      resolver: dns.lookup as never,
      disableBimi: true,
      // RFC behaviour: a signature whose body hash does not verify is dkim=fail (lenient mode says
      // neutral), rsa-sha1 is policy (RFC 8301)
      strict: true,
    });
    const dmarc = outcome.dmarc || undefined;
    const checked: StoredAuth = {
      results: {
        spf: {
          result: outcome.spf ? keyword(outcome.spf.status.result) : 'none',
          domain: outcome.spf ? outcome.spf.domain : domainOf(request.mailFrom || request.helo),
        },
        // an unsigned message has one placeholder row (dkim=none) with no signature: the list is empty
        dkim: outcome.dkim.results
          .filter((row) => row.signingDomain !== undefined)
          .map((row) => ({
            result: keyword(row.status.result),
            domain: row.signingDomain ?? '',
            selector: row.selector ?? '',
          })),
        dmarc: {
          result: dmarc ? keyword(dmarc.status.result) : 'none',
          // the policy the sender's domain asks for (p=, or sp= for a subdomain); none without a record
          policy: dmarc?.policy || dmarc?.p || 'none',
          domain: dmarc?.domain || '',
        },
        arc: { result: outcome.arc ? keyword(outcome.arc.status.result) : 'none' },
      },
      header: headerValue(outcome.headers),
    };
    const until = dns.keptUntil();
    if (key !== undefined && until !== undefined) keepResult(key, until, checked);
    return checked;
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    return {
      results: structuredClone(TEMPERROR),
      header: `${hostname}; auth=temperror (${reason.replace(/[()\r\n]/g, ' ').slice(0, 200)})`,
    };
  } finally {
    dns.cancel();
  }
}

// the RFC 8601 result keywords the payload documents (openapi.yaml AuthResult)
const KEYWORDS: ReadonlySet<string> = new Set([
  'pass',
  'fail',
  'softfail',
  'neutral',
  'none',
  'temperror',
  'permerror',
  'policy',
]);

/** mailauth's result as a documented keyword: its deprecated `temperr` is temperror, anything
 * else unexpected permerror (a result the receiver cannot rely on). */
function keyword(result: string): string {
  if (result === 'temperr') return 'temperror';
  return KEYWORDS.has(result) ? result : 'permerror';
}

/**
 * A header too folded to check (see MAX_FIELD_LINES): SPF needs no header and is checked; DKIM,
 * DMARC and ARC are permerror (the message is malformed for them).
 */
async function spfOnly(request: AuthRequest, hostname: string, lookup: unknown): Promise<StoredAuth> {
  const result = await spf({
    sender: request.mailFrom,
    ip: request.ip,
    helo: request.helo,
    mta: hostname,
    resolver: lookup as never,
  });
  const reason = `(a header field folded over more than ${MAX_FIELD_LINES} lines: not checked)`;
  return {
    results: {
      spf: { result: keyword(result.status.result), domain: result.domain },
      dkim: [],
      dmarc: { result: 'permerror', policy: 'none', domain: '' },
      arc: { result: 'permerror' },
    },
    header: `${hostname}; ${result.info}; dkim=permerror ${reason}; dmarc=permerror ${reason}`.replace(
      /\r?\n[ \t]+/g,
      ' ',
    ),
  };
}

/** What the header block says before mailauth reads the message. */
interface HeaderScan {
  /** the most physical lines one header field takes (itself and its continuation lines) */
  longestFieldLines: number;
  /** where the body starts (past the empty line); the whole message when there is none */
  end: number;
  /** a DKIM-* or ARC-* field is there: DKIM and ARC hash the body */
  signed: boolean;
  /** every From field as it stands (DMARC's input), joined, with any other field named From-something */
  from: string;
}

// field names whose checks read the body: DKIM-Signature, and the ARC set (ARC-Message-Signature)
const SIGNATURE_FIELD = /^(dkim|arc)-/i;
const FROM_PREFIX = /^from/i;

function scanHeader(raw: Buffer): HeaderScan {
  let longest = 0;
  let current = 0;
  let signed = false;
  let from = '';
  let inFrom = false;
  let start = 0;
  while (start < raw.length) {
    const end = raw.indexOf(0x0a, start);
    const lineEnd = end === -1 ? raw.length : end;
    const first = raw[start];
    // the empty line ends the header block
    if (lineEnd - start === 0 || (lineEnd - start === 1 && first === 0x0d))
      return { longestFieldLines: longest, end: Math.min(raw.length, lineEnd + 1), signed, from };
    const continued = first === 0x20 || first === 0x09;
    current = continued ? current + 1 : 1;
    if (current > longest) longest = current;
    if (!continued) {
      const name = raw.toString('latin1', start, Math.min(lineEnd, start + 5));
      if (!signed && SIGNATURE_FIELD.test(name)) signed = true;
      // every field whose name starts so: a From however written (blanks or a fold before its
      // colon), and a few others, which only make the key stricter
      inFrom = FROM_PREFIX.test(name);
    }
    if (inFrom) from += raw.toString('latin1', start, Math.min(raw.length, lineEnd + 1));
    start = lineEnd + 1;
  }
  return { longestFieldLines: longest, end: raw.length, signed, from };
}

/** The value of the Authentication-Results line mailauth prepared, unfolded. */
function headerValue(headers: string): string {
  const unfolded = headers.replace(/\r?\n[ \t]+/g, ' ');
  const line = unfolded.split(/\r?\n/).find((l) => /^authentication-results:/i.test(l)) ?? '';
  return line.slice(line.indexOf(':') + 1).trim();
}
