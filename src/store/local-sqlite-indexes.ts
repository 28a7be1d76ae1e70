// For a FerretDB over SQLite that our launcher started (the development default): an index on
// exactly the expression FerretDB's SQL uses for a lookup by id. FerretDB 1.24 turns `{_id: X}` into
// `WHERE _ferretdb_sjson->'$._id' = ?` but indexes `_ferretdb_sjson->"_id"`, which SQLite cannot
// match to it: every lookup by id reads the whole table (2.4 s at 100,000 records; 1.7 ms with this
// index). FerretDB creates a table per collection as it goes (the hourly history partitions), and
// SQLite has no trigger on CREATE TABLE, so the tables are looked at once a second and each new one
// gets its index; FerretDB does not know the index is there, and it goes with its table.
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { DatabaseSync } from 'node:sqlite';

const EVERY_MS = 1000;
const PREFIX = 'mailroute_id_';

/** Creates the missing indexes in every database file under `dir` now; returns how many. */
export function indexSqliteIds(dir: string, open: Map<string, DatabaseSync>): number {
  if (!existsSync(dir)) return 0;
  let created = 0;
  for (const file of readdirSync(dir)) {
    if (!file.endsWith('.sqlite')) continue;
    let db = open.get(file);
    if (!db) {
      db = new DatabaseSync(path.join(dir, file));
      // FerretDB writes too: wait for its locks rather than fail
      db.exec('PRAGMA busy_timeout = 2000');
      open.set(file, db);
    }
    const tables = db
      .prepare(
        `SELECT t.name AS name FROM sqlite_master t
         WHERE t.type = 'table' AND t.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND t.name NOT LIKE '\\_ferretdb\\_%' ESCAPE '\\'
           AND NOT EXISTS (SELECT 1 FROM sqlite_master i WHERE i.type = 'index' AND i.name = '${PREFIX}' || t.name)`,
      )
      .all() as Array<{ name: string }>;
    for (const { name } of tables) {
      const quoted = `"${name.replaceAll('"', '""')}"`;
      const index = `"${`${PREFIX}${name}`.replaceAll('"', '""')}"`;
      try {
        db.exec(`CREATE INDEX IF NOT EXISTS ${index} ON ${quoted} (_ferretdb_sjson->'$._id')`);
        created++;
      } catch {
        // dropped meanwhile, or busy beyond the timeout: the next look tries again
      }
    }
  }
  return created;
}

/** Keeps indexing new tables until stopped. */
export function watchSqliteIds(dir: string): { stop(): void } {
  const open = new Map<string, DatabaseSync>();
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
      for (const db of open.values()) db.close();
      open.clear();
    },
  };
}
