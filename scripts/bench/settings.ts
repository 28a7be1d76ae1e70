// The bench's settings read from the environment once (BENCH_SCALE, BENCH_CLASS, BENCH_CONCURRENCY),
// and what every part shares: the repository's root, the API key the service is started with, the log.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { MessageClass } from './mix.ts';

export const root = fileURLToPath(new URL('../..', import.meta.url));
export const QUICK = process.env.BENCH_SCALE === 'quick';
export const REPEATS = QUICK ? 1 : 3;
/** BENCH_CLASS=text sends only that class of the mix (for looking into one kind of message) */
export const ONLY = process.env.BENCH_CLASS as MessageClass | undefined;
/** BENCH_CONCURRENCY=16 runs the matrix at that concurrency only */
export const CONCURRENCY = process.env.BENCH_CONCURRENCY
  ? [Number(process.env.BENCH_CONCURRENCY)]
  : [1, 16, 64];
export const API_KEY = 'bench-key-0123456789';
export const log = (text: string) =>
  process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${text}\n`);

/** The commit measured, short, marked when the code (not docs/) has uncommitted changes. */
export function benchCommit(): string {
  const git = (...args: string[]) =>
    spawnSync('git', args, { cwd: root, encoding: 'utf8' }).stdout?.trim() ?? '';
  const head = git('rev-parse', '--short', 'HEAD') || 'unknown commit';
  // the figures a part writes into docs/ are no change to what is measured
  const changed = git('status', '--porcelain', '--untracked-files=no', '--', '.', ':!docs');
  return changed ? `${head} (with uncommitted changes)` : head;
}
