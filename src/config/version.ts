// The service's version, read once from package.json: --version prints it, and webhook requests
// carry it in their User-Agent.
import { readFileSync } from 'node:fs';

const manifest: unknown = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));

export const VERSION: string =
  typeof manifest === 'object' &&
  manifest !== null &&
  typeof (manifest as { version?: unknown }).version === 'string'
    ? (manifest as { version: string }).version
    : '0.0.0';

/** The User-Agent of every webhook request. */
export const USER_AGENT = `mailroute/${VERSION}`;
