// Owns a cheap structural pass over the raw message, done beside mailparser because mailparser
// repairs silently: it counts the top-level header fields (a message without any is unparseable),
// finds multipart boundaries that are never closed, and collects the charsets text parts declare.
// It reads header blocks and delimiter lines only; bodies are skipped with Buffer.indexOf.

export interface MimeStructure {
  /** syntactically valid fields in the top-level header block */
  headerFields: number;
  /** boundaries of multiparts whose close delimiter (`--boundary--`) never appears */
  unclosedBoundaries: string[];
  /** charset parameters declared by text/* parts, lowercase, deduplicated */
  textCharsets: string[];
}

interface HeaderBlock {
  /** offset of the first byte after the block (after its blank line, or the end of input) */
  end: number;
  validFields: number;
  contentType: ContentType | null;
}

interface ContentType {
  type: string;
  params: Record<string, string>;
}

const LF = 0x0a;
const CR = 0x0d;
const DASH = 0x2d;
const LINE_THEN_DASHES = Buffer.from('\n--', 'latin1');
const FIELD_NAME = /^[\x21-\x39\x3b-\x7e]+$/;
const CONTENT_TYPE_PARAM = /;\s*([^\s=;]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;\s]*)/g;
// RFC 2046 caps a boundary at 70 characters; this leaves room for sloppy senders while keeping a
// body line that merely starts with "--" from being copied out whole.
const MAX_DELIMITER_LINE = 1024;
// message/rfc822 inside message/rfc822 inside ...: deeper nesting is not scanned, only parsed.
const MAX_NESTED_MESSAGES = 32;

export function scanStructure(raw: Buffer): MimeStructure {
  // the open multiparts' boundaries, outermost first
  const open: string[] = [];
  // boundary -> the depths in `open` that declared it, ascending. A delimiter line is then one
  // lookup instead of a comparison with every open level: a message nested thousands deep followed
  // by a million "--" lines would otherwise cost depth × lines, minutes of one thread's time.
  const depthsOf = new Map<string, number[]>();
  const unclosed: string[] = [];
  const charsets = new Set<string>();

  const openMultipart = (boundary: string): void => {
    let depths = depthsOf.get(boundary);
    if (depths === undefined) {
      depths = [];
      depthsOf.set(boundary, depths);
    }
    depths.push(open.length);
    open.push(boundary);
  };
  const deepest = (boundary: string): number => depthsOf.get(boundary)?.at(-1) ?? -1;
  // Ends the levels from `depth` inward and returns them, outermost first. Loops, not spreads:
  // a spread of a few hundred thousand levels overflows the call stack.
  const dropFrom = (depth: number): string[] => {
    const dropped = open.splice(depth);
    for (const boundary of dropped) {
      const depths = depthsOf.get(boundary)!;
      depths.pop();
      if (depths.length === 0) depthsOf.delete(boundary);
    }
    return dropped;
  };
  const neverClosed = (boundaries: readonly string[]): void => {
    for (const boundary of boundaries) unclosed.push(boundary);
  };

  // Applies one part's Content-Type and returns where its body starts. An encapsulated message's
  // own header block follows the part's headers directly, so it is read here too.
  const enterPart = (block: HeaderBlock, depth: number): number => {
    const contentType = block.contentType;
    if (contentType === null) return block.end;
    const boundary = contentType.params.boundary;
    if (contentType.type.startsWith('multipart/') && boundary) {
      openMultipart(boundary);
    } else if (contentType.type.startsWith('text/') && contentType.params.charset) {
      charsets.add(contentType.params.charset.toLowerCase());
    } else if (contentType.type === 'message/rfc822' && depth < MAX_NESTED_MESSAGES) {
      return enterPart(readHeaderBlock(raw, block.end), depth + 1);
    }
    return block.end;
  };

  const top = readHeaderBlock(raw, 0);
  let position = enterPart(top, 0);
  while (open.length > 0 && position < raw.length) {
    const lineStart = nextDashLine(raw, position);
    if (lineStart === -1) break;
    const newline = raw.indexOf(LF, lineStart);
    const next = newline === -1 ? raw.length : newline + 1;
    const lineEnd = Math.min(newline === -1 ? raw.length : newline, lineStart + MAX_DELIMITER_LINE);
    // what follows the leading "--": a boundary, or a boundary and "--"
    const word = raw.toString('latin1', lineStart + 2, lineEnd).trimEnd();
    position = next;
    // The innermost match wins; a delimiter of an outer multipart implicitly ends the inner ones.
    // One level cannot match both ways (its boundary would have to be both `word` and `word` less "--").
    const partAt = deepest(word);
    const closeAt = word.endsWith('--') ? deepest(word.slice(0, -2)) : -1;
    if (closeAt > partAt) {
      neverClosed(dropFrom(closeAt + 1));
      dropFrom(closeAt);
    } else if (partAt >= 0) {
      neverClosed(dropFrom(partAt + 1));
      position = enterPart(readHeaderBlock(raw, next), 0);
    }
  }
  neverClosed(open);
  return { headerFields: top.validFields, unclosedBoundaries: unclosed, textCharsets: [...charsets] };
}

function nextDashLine(raw: Buffer, from: number): number {
  if (raw[from] === DASH && raw[from + 1] === DASH && (from === 0 || raw[from - 1] === LF)) return from;
  const found = raw.indexOf(LINE_THEN_DASHES, from);
  return found === -1 ? -1 : found + 1;
}

function readHeaderBlock(raw: Buffer, start: number): HeaderBlock {
  let position = start;
  let validFields = 0;
  // the unfolded value of the block's first Content-Type field; continuation lines are appended
  // while `inContentType` holds
  let contentType = '';
  let sawContentType = false;
  let inContentType = false;
  while (position < raw.length) {
    const newline = raw.indexOf(LF, position);
    const next = newline === -1 ? raw.length : newline + 1;
    let end = newline === -1 ? raw.length : newline;
    if (end > position && raw[end - 1] === CR) end--;
    if (end === position) {
      position = next;
      break;
    }
    const first = raw[position];
    if (first === 0x20 || first === 0x09) {
      if (inContentType) contentType += raw.toString('latin1', position, end);
    } else {
      const line = raw.toString('latin1', position, end);
      const colon = line.indexOf(':');
      const name = colon > 0 ? line.slice(0, colon).trimEnd() : '';
      inContentType = false;
      if (FIELD_NAME.test(name)) {
        validFields++;
        // the first Content-Type wins, as in mailsplit
        if (!sawContentType && name.toLowerCase() === 'content-type') {
          contentType = line.slice(colon + 1);
          sawContentType = true;
          inContentType = true;
        }
      }
    }
    position = next;
  }
  return {
    end: position,
    validFields,
    contentType: sawContentType ? parseContentType(contentType) : null,
  };
}

function parseContentType(value: string): ContentType {
  const semicolon = value.indexOf(';');
  const type = (semicolon === -1 ? value : value.slice(0, semicolon)).trim().toLowerCase();
  const params: Record<string, string> = Object.create(null);
  for (const [, name = '', rawValue = ''] of value.matchAll(CONTENT_TYPE_PARAM)) {
    const quoted = rawValue.startsWith('"');
    params[name.toLowerCase()] = quoted ? rawValue.slice(1, -1).replace(/\\(.)/g, '$1') : rawValue;
  }
  return { type, params };
}
