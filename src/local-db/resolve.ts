// Which database to use: MONGODB_URI when given; otherwise the development default, which is a
// server already answering on 127.0.0.1:27017, or one we start there with its files in DATA_DIR.
import { answers } from '../util/ports.ts';
import { type LocalServer, NoServerError, startLocalServer } from './server.ts';

export const DEV_DEFAULT_PORT = 27017;

export interface ResolvedDatabase {
  uri: string;
  /** the server we started, to stop on shutdown */
  server?: LocalServer;
  /** how the URI was found, for the startup log line */
  source: 'configured' | 'dev-existing' | 'dev-started';
}

/**
 * Rejects with a NoServerError (its message says what to do) when the development default is
 * needed and no server can be started. `buildFerretDb`: see LocalServerOptions.
 */
export async function resolveDatabase(
  config: { mongodbUri: string; dataDir: string },
  buildFerretDb?: string,
): Promise<ResolvedDatabase> {
  if (config.mongodbUri) return { uri: config.mongodbUri, source: 'configured' };
  if (await answers(DEV_DEFAULT_PORT))
    return { uri: `mongodb://127.0.0.1:${DEV_DEFAULT_PORT}/`, source: 'dev-existing' };
  try {
    const server = await startLocalServer({
      dataDir: config.dataDir,
      port: DEV_DEFAULT_PORT,
      ...(buildFerretDb ? { buildFerretDb } : {}),
    });
    return { uri: server.uri, server, source: 'dev-started' };
  } catch (err) {
    throw err instanceof NoServerError ? err : new NoServerError((err as Error).message);
  }
}
