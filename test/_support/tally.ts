// Outcomes counted by kind, in the form the summaries in docs/RELIABILITY.md quote: `250 ×40, 451 ×2`.

/** Counts `outcomes` by `keyOf` (the outcome itself by default), in the order each key first came. */
export function tally(outcomes: readonly string[], keyOf: (outcome: string) => string = (o) => o): string {
  const counts = new Map<string, number>();
  for (const outcome of outcomes) {
    const key = keyOf(outcome);
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([key, n]) => `${key} ×${n}`).join(', ');
}

/** An SMTP answer by its first words: the reply code and enhanced status code, `(nothing)` for none. */
export function smtpReplyHead(answer: string): string {
  return answer.replace(/^(\d{3}(?: [245]\.\d+\.\d+)?).*$/s, '$1') || '(nothing)';
}
