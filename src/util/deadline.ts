// One way to bound a wait: the work's own outcome, or the deadline's error, whichever comes first.
// The work is not cancelled (nothing here can cancel it); a late outcome is simply not waited for.

export function withDeadline<T>(work: Promise<T>, ms: number, timedOut: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(timedOut()), ms);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}
