// Parsing of the human units that settings accept: durations (ms/s/m/h) and sizes (B/KB/MB/GB).

const DURATION_UNITS_MS = Object.freeze({ ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const);
const SIZE_UNITS_BYTES = Object.freeze({ b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 } as const);

/** "30s" -> 30000; "1.5m" -> 90000; "7d" -> 604800000. A unit is required: a bare number is ambiguous. */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/i.exec(text.trim());
  if (!match) return undefined;
  const unit = match[2]!.toLowerCase() as keyof typeof DURATION_UNITS_MS;
  return Math.round(Number(match[1]) * DURATION_UNITS_MS[unit]);
}

/** "25MB" -> 26214400 (binary multiples); a bare number is bytes. */
export function parseSize(text: string): number | undefined {
  const match = /^(\d+(?:\.\d+)?)\s*(b|kb|mb|gb)?$/i.exec(text.trim());
  if (!match) return undefined;
  const unit = (match[2] ?? 'b').toLowerCase() as keyof typeof SIZE_UNITS_BYTES;
  return Math.floor(Number(match[1]) * SIZE_UNITS_BYTES[unit]);
}

export function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
