// For a FerretDB over SQLite that our launcher started (the development default): an index on
// exactly the expression FerretDB's SQL uses for a lookup by id. FerretDB 1.24 turns `{_id: X}` into
// `WHERE _ferretdb_sjson->'$._id' = ?` but indexes `_ferretdb_sjson->"_id"`, which SQLite cannot
// match to it: every lookup by id reads the whole table
// (docs/decisions/0022-id-index-for-our-ferretdb.md). FerretDB creates a table per collection as it
// goes (the daily and hourly partitions), and SQLite has no trigger on CREATE TABLE, so the tables
// are looked at once a second and each new one gets its index; FerretDB does not know the index is
// there, and it goes with its table.
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';

const EVERY_MS = 1000;
const PREFIX = 'mailroute_id_';

interface Database {
  db: DatabaseSync;
  /** tables known to have the index: each is looked up once, not at every look */
  indexed: Set<string>;
}

/** Creates the missing indexes in every database file under `dir` now; returns how many. */
export function indexSqliteIds(dir: string, open: Map<string, Database>): number {
  if (!existsSync(dir)) return 0;
  let created = 0;
  for (const file of readdirSync(dir)) {
    if (!file.endsWith('.sqlite')) continue;
    let entry = open.get(file);
    if (!entry) {
      const db = new DatabaseSync(path.join(dir, file));
      // FerretDB writes too: wait briefly for its locks rather than fail (the next look tries again)
      db.exec('PRAGMA busy_timeout = 200');
      entry = { db, indexed: new Set() };
      open.set(file, entry);
    }
    const { db, indexed } = entry;
    const rows = db
      .prepare("SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index')")
      .all() as Array<{ type: string; name: string }>;
    const indexes = new Set(rows.filter((row) => row.type === 'index').map((row) => row.name));
    const tables = new Set(rows.filter((row) => row.type === 'table').map((row) => row.name));
    for (const { type, name } of rows) {
      if (
        type !== 'table' ||
        indexed.has(name) ||
        name.startsWith('sqlite_') ||
        name.startsWith('_ferretdb_')
      )
        continue;
      const index = `${PREFIX}${name}`;
      if (!indexes.has(index)) {
        try {
          db.exec(`CREATE INDEX IF NOT EXISTS ${quote(index)} ON ${quote(name)} (_ferretdb_sjson->'$._id')`);
          created++;
        } catch {
          continue; // dropped meanwhile, or busy: the next look tries again
        }
      }
      indexed.add(name);
    }
    // tables dropped by retention are forgotten with them
    for (const name of indexed) if (!tables.has(name)) indexed.delete(name);
  }
  return created;
}

const quote = (name: string) => `"${name.replaceAll('"', '""')}"`;

/** Keeps indexing new tables until stopped. */
export function watchSqliteIds(dir: string): { stop(): void } {
  const open = new Map<string, Database>();
  const look = () => {
    try {
      indexSqliteIds(dir, open);
    } catch {
      // a database file being created or removed: the next look sees it settled
    }
  };
  look();
  const timer = setInterval(look, EVERY_MS);
  timer.unref();
  return {
    stop() {
      clearInterval(timer);
      for (const { db } of open.values()) db.close();
      open.clear();
    },
  };
}
