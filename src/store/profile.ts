// The backend profile: the one place where the store learns which database it talks to, and the
// named flags by which it lays out and reads its data differently there. MongoDB (production) is
// the plain profile, every flag off: indexes serve every filter. FerretDB 1.24 (the development
// default and the tests' server) reads a whole collection for any filter but exactly `{_id: X}`
// (../shared/FERRETDB.md), so its profile turns on the deviations that keep every read bounded.
// ARCHITECTURE.md tables what each flag changes, and docs/decisions/ has a page per flag with its
// measured reason; store modules read the flags, never the server's name.

import type { StorageProfileName } from '../config/schema.ts';

/** one per name the setting accepts (PROFILES below must have each) */
export type ProfileName = StorageProfileName;
/** STORAGE_PROFILE: `auto` detects the server from `buildInfo` */
export type ProfileSetting = ProfileName | 'auto';

export interface BackendProfile {
  readonly name: ProfileName;
  /**
   * An accepted message goes into an intake, a collection per process and two seconds of
   * acceptance that is only inserted into and dropped whole (intake.ts): FerretDB spends more on
   * deleting one document than on inserting three. So does a parked message its claimant claims,
   * into an intake of claims (docs/decisions/0027-claims-intakes.md). Off, it goes into `messages`, a fixed
   * collection, and leaves it by a delete: on MongoDB a collection created and dropped every two
   * seconds per process is a replicated catalog change each, and a dropped table's files stay for
   * minutes.
   */
  readonly intakeCollections: boolean;
  /**
   * An owner's fenced write reads its fence by exact `_id` first (skipped while the owner's lease
   * holds) and then writes by `_id`, instead of fencing in the filter (fencing.ts): a filter of
   * `{_id, lease_epoch, version}` reads the whole working set on FerretDB.
   */
  readonly fenceByIdRead: boolean;
  /**
   * Intake collections (intake.ts) and retry buckets (parking.ts) live in a database of their own:
   * over SQLite a database is a file, and every collection created or dropped makes every
   * connection to that file read its whole schema again.
   */
  readonly separateIntakeDatabase: boolean;
  /**
   * A message released until a retry is due leaves the working set (`messages`): its record goes to
   * `retry_<day>`, its listing entry to `retry_list_<day>`, and a pointer to a bucket of its due
   * minute (parking.ts), which the scheduler reads whole once it comes due. Without it the
   * scheduler's poll, the listing and every gauge read every waiting message on each call. On
   * MongoDB the message stays in `messages`, found by the `scheduled_due` index.
   */
  readonly parkRetries: boolean;
  /**
   * This process sends one write command at a time to each database (write-gate.ts): over SQLite
   * a second writer does not queue but sleeps in SQLite's busy handler (1 to 100 ms a try), which
   * left a retry backlog's drain waiting with the cores idle. MongoDB runs writes side by side, and
   * so does FerretDB over PostgreSQL (the `ferretdb-postgresql` profile, named by STORAGE_PROFILE:
   * FerretDB does not say which storage it uses): there, side by side, new mail to other routes
   * kept its pace beside a backlog of 10,000 and the replay doubled, though the drain slowed
   * (docs/decisions/0026-writers-over-postgresql.md).
   */
  readonly oneWriter: boolean;
  /**
   * A partition's documents are counted (for the gauges, counts.ts) from `collStats`, the table's
   * own statistics (SQLite's cells, exact; PostgreSQL's row estimate after ANALYZE), not with
   * `count`, which FerretDB answers by decoding every document: 30,000 parked records took 16 s,
   * collStats 0.9 s, and a count round as long as that ran beside the next one. On MongoDB
   * estimatedDocumentCount reads the collection's metadata.
   */
  readonly countFromStats: boolean;
  /**
   * A record that a claim or a replay takes back into the working set (a parked one, a dead-lettered
   * or delivered one) is superseded, not deleted: its id goes into `<kind>_superseded_<day>` beside
   * its partition, and it stays until the day's partitions are dropped (history.ts). FerretDB runs a
   * delete as a select and a transaction of its own, about 1.1 ms of SQLite's one writer for each
   * claimed record, an insert of a small document a fraction of it; lookups by id read the marker
   * beside the record, and the gauges count records less markers
   * (docs/decisions/0028-superseded-records.md). On MongoDB a delete by `_id` is cheap, and the
   * gauges read the collections' metadata, which a record left in place would miscount.
   */
  readonly supersedeRecords: boolean;
}

const FERRETDB: BackendProfile = Object.freeze({
  name: 'ferretdb',
  intakeCollections: true,
  fenceByIdRead: true,
  separateIntakeDatabase: true,
  parkRetries: true,
  oneWriter: true,
  countFromStats: true,
  supersedeRecords: true,
});

const PROFILES: Readonly<Record<ProfileName, BackendProfile>> = Object.freeze({
  mongodb: Object.freeze({
    name: 'mongodb',
    intakeCollections: false,
    fenceByIdRead: false,
    separateIntakeDatabase: false,
    parkRetries: false,
    oneWriter: false,
    countFromStats: false,
    supersedeRecords: false,
  }),
  ferretdb: FERRETDB,
  'ferretdb-postgresql': Object.freeze({ ...FERRETDB, name: 'ferretdb-postgresql', oneWriter: false }),
});

/** The profile of a server as its `buildInfo` describes it, unless a setting names one. */
export function profileFor(
  buildInfo: Record<string, unknown>,
  setting: ProfileSetting = 'auto',
): BackendProfile {
  if (setting !== 'auto') return PROFILES[setting];
  return PROFILES['ferretdbVersion' in buildInfo ? 'ferretdb' : 'mongodb'];
}

export function isProfileSetting(value: string): value is ProfileSetting {
  return value === 'auto' || value in PROFILES;
}
