// Waiting for a condition with a deadline: what a test does instead of sleeping a fixed time.

export interface WaitOptions {
  /** how long the condition has to come true, ms (default 10 s) */
  timeoutMs?: number;
  /** how often it is checked, ms (default 50) */
  everyMs?: number;
}

/** Checks `condition` until it holds; throws, saying what it waited for, once `timeoutMs` is past. */
export async function waitUntil(
  condition: () => boolean | Promise<boolean>,
  what: string,
  { timeoutMs = 10_000, everyMs = 50 }: WaitOptions = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}
