// Runs `work` over `items` with at most `limit` of them in flight: for claims, each
// decided by a unique insert or a fence of its own, so their order does not matter; one at a time
// made a drain as slow as the round trips of one claim allowed, and batches of a few left the
// store's batched writes small.

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
