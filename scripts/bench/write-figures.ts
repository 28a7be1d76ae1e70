// Where a run's figures go: docs/benchmarks.json (the machine-readable record) and the sections of
// docs/BENCHMARKS.md between its markers.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { log, root } from './settings.ts';

/**
 * Writes figures into docs/benchmarks.json (its other keys kept; `merge` combines a key's old and
 * new value, the new one replaces the old by default) and renders the result between the markers
 * `<!-- bench[:part]:begin -->` and `<!-- bench[:part]:end -->` of docs/BENCHMARKS.md (appended
 * at the end when the file has none yet).
 */
export function updateFigures(
  fresh: Record<string, unknown>,
  part: string,
  render: (results: Record<string, unknown>) => string,
  merge: (kept: unknown, fresh: unknown) => unknown = (_, value) => value,
): void {
  const json = path.join(root, 'docs/benchmarks.json');
  const kept = existsSync(json) ? (JSON.parse(readFileSync(json, 'utf8')) as Record<string, unknown>) : {};
  const combined: Record<string, unknown> = { ...kept };
  for (const [key, value] of Object.entries(fresh))
    combined[key] = key in kept ? merge(kept[key], value) : value;
  writeFileSync(json, `${JSON.stringify(combined, null, 2)}\n`);
  const file = path.join(root, 'docs/BENCHMARKS.md');
  const tag = part ? `bench:${part}` : 'bench';
  const begin = `<!-- ${tag}:begin -->`;
  const end = `<!-- ${tag}:end -->`;
  let existing = existsSync(file) ? readFileSync(file, 'utf8') : '# Benchmarks\n';
  if (!existing.includes(begin)) existing = `${existing.trimEnd()}\n\n${begin}\n${end}\n`;
  const [head, rest] = existing.split(begin);
  const tail = rest?.split(end)[1] ?? '\n';
  writeFileSync(file, `${head}${begin}\n${render(combined)}\n${end}${tail}`);
  log(`wrote the ${part || 'shared'} figures into docs/benchmarks.json and docs/BENCHMARKS.md`);
}
