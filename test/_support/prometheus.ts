// Reading a Prometheus text exposition in tests, and promtool (Debian's `prometheus` package) to
// validate one: found on PATH or where Debian puts it, else the tests that need it are skipped.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** The sum of the samples of `name` whose labels include every one of `labels`. */
export function sampleSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (!rest.startsWith(' ') && !rest.startsWith('{')) continue;
    if (!Object.entries(labels).every(([key, value]) => rest.includes(`${key}="${value}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** The distinct values one label takes among the samples of `name`. */
export function labelValues(text: string, name: string, label: string): string[] {
  const values = new Set<string>();
  const pattern = new RegExp(`${label}="([^"]*)"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const match = pattern.exec(line);
    if (match) values.add(match[1]!);
  }
  return [...values];
}

export function findPromtool(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(':').concat(['/usr/bin', '/usr/local/bin'])) {
    const candidate = `${dir}/promtool`;
    if (dir && existsSync(candidate)) return candidate;
  }
  return undefined;
}

/** `promtool check metrics` on the text: exit status and what it printed (its problems). */
export function promtoolCheck(promtool: string, text: string): { status: number | null; output: string } {
  const run = spawnSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8', timeout: 30_000 });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}
