// Runs `work` over `items` with at most `limit` of them in flight: claims are each decided by a
// unique insert of their own, so their order does not matter, and one at a time made a drain as
// slow as the round trips of one claim (about six) allowed.

export async function concurrently<T>(
  items: readonly T[],
  limit: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
}
