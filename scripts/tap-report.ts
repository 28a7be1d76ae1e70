// Reads the TAP that `ava --tap` writes: one readable line per test as it arrives, and at the end
// the counts of the closing line `tests: N passed, N failed` with each failure's title and error.
// No I/O here: scripts/test.ts feeds it AVA's output line by line.

export interface TapFailure {
  title: string;
  /** the test's log lines and AVA's YAML account of the error, as AVA wrote them */
  detail: string[];
}

export interface TapCounts {
  passed: number;
  failed: number;
  skipped: number;
  todo: number;
  failures: TapFailure[];
  /** why the counts hold more failures than AVA reported as tests (a file that crashed, AVA stopping) */
  notes: string[];
}

/** `ok 3 - file › title # SKIP`: the status, the title and a directive (AVA puts the index first). */
const TEST_POINT = /^(ok|not ok) \d+ - (.*?)(?: # (SKIP|TODO))?$/;
/** AVA's closing comments: `1..N`, then `# tests N`, `# pass N`, `# skip N` (when some were), `# fail N`. */
const CLOSING = /^(?:1\.\.\d+|# (tests|pass|skip|fail) (\d+))$/;

/** `# 2 tests remaining in test/x.test.ts`: a file that stopped before all its tests ran. */
const REMAINING = /^# \d+ tests? remaining in /;

type Kind = 'passed' | 'failed' | 'skipped' | 'todo';

export class TapReader {
  private readonly counts = { passed: 0, failed: 0, skipped: 0, todo: 0 };
  private readonly failures: TapFailure[] = [];
  /** where the lines that follow a test (its logs, its error) go; undefined after a hook's title */
  private detail: string[] | undefined;
  private inYaml = false;
  private closingFail: number | undefined;
  private hookTitle: string | undefined;

  /** Takes one line of AVA's output; returns what to show for it (undefined: nothing). */
  read(line: string): string | undefined {
    if (this.inYaml) {
      if (line === '  ...') {
        this.inYaml = false;
        return undefined;
      }
      const shown = `      ${line.replace(/^ {4}/, '')}`;
      this.detail?.push(shown);
      return shown;
    }
    if (line === '  ---') {
      this.inYaml = true;
      return undefined;
    }
    const point = TEST_POINT.exec(line);
    if (point) return this.testPoint(point[1] === 'ok', point[2]!, point[3]);
    const closing = CLOSING.exec(line);
    if (closing) {
      if (closing[1] === 'fail') this.closingFail = Number(closing[2]);
      return undefined;
    }
    if (line.startsWith('#   ')) {
      // a t.log() line, under the test or hook it belongs to
      const shown = `      ${line.slice(4)}`;
      this.detail?.push(shown);
      const hook = this.hookTitle;
      this.hookTitle = undefined;
      return hook === undefined ? shown : `  ${hook}\n${shown}`;
    }
    if (line.startsWith('# ') && !REMAINING.test(line)) {
      // a hook that finished: worth a line only if it logged something
      this.detail = undefined;
      this.hookTitle = line;
      return undefined;
    }
    if (line === 'TAP version 13' || line === '') return undefined;
    return line;
  }

  private testPoint(ok: boolean, title: string, directive: string | undefined): string {
    const kind: Kind =
      directive === 'SKIP' ? 'skipped' : directive === 'TODO' ? 'todo' : ok ? 'passed' : 'failed';
    this.counts[kind]++;
    this.hookTitle = undefined;
    this.detail = [];
    if (kind === 'failed') this.failures.push({ title, detail: this.detail });
    return `  ${MARK[kind]} ${title}${kind === 'skipped' || kind === 'todo' ? ` (${kind})` : ''}`;
  }

  /**
   * The counts once AVA has exited with `exitCode`. AVA's closing `# fail` also counts the tests a
   * crash kept from running (they have no line of their own) and the todo ones; output that stops
   * before the closing lines (AVA's TAP reporter itself throws on a timeout or a process.exit() in a
   * test file, avajs/ava#3461) counts as one failure more; so does a non-zero exit with none seen.
   */
  finish(exitCode: number): TapCounts {
    const counts = { ...this.counts };
    const notes: string[] = [];
    if (this.closingFail === undefined) {
      counts.failed++;
      notes.push(
        'AVA stopped before its closing summary (a test file that timed out or called process.exit()): ' +
          'run the files without a result alone, e.g. `npm test -- test/unit/foo.test.ts`',
      );
    } else {
      const notRun = this.closingFail - counts.todo - counts.failed;
      if (notRun > 0) {
        counts.failed += notRun;
        notes.push(`${notRun} ${notRun === 1 ? 'test' : 'tests'} did not run (their file crashed first)`);
      }
    }
    if (exitCode !== 0 && counts.failed === 0) {
      counts.failed = 1;
      notes.push(`AVA exited with code ${exitCode} without reporting a failed test`);
    }
    return { ...counts, failures: this.failures, notes };
  }
}

const MARK: Record<Kind, string> = { passed: '✔', failed: '✘', skipped: '-', todo: '-' };

/** The closing line CI and people read: `tests: N passed, N failed` (then skipped and todo, if any). */
export function closingLine(counts: TapCounts): string {
  const parts = [`${counts.passed} passed`, `${counts.failed} failed`];
  if (counts.skipped > 0) parts.push(`${counts.skipped} skipped`);
  if (counts.todo > 0) parts.push(`${counts.todo} todo`);
  return `tests: ${parts.join(', ')}`;
}
