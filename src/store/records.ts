// The forms of a message in the store's collections of many documents: a final record in its
// history partition (history.ts), and an accepted message in its intake (intake.ts). Each keeps as
// fields what is listed or filtered on, and packs everything else as one BSON value.
import { Binary, BSON } from 'mongodb';
import type { RawDocument } from './documents.ts';
import { type ListingEntry, type MessageSummary, SUMMARY_FIELDS } from './listing.ts';
import type { MessageDoc } from './messages.ts';

/**
 * A final record as its partition keeps it: the summary fields as fields (listed, filtered,
 * queryable by an operator), and everything else (history, attempts, deliveries, envelope, ...)
 * packed as one BSON value. FerretDB decodes every document a query reads, field by field; a
 * listing page of an hour read 3 to 8 times faster this way than with the nested arrays as fields.
 */
export interface ArchivedRecord extends MessageSummary {
  detail: Binary;
  /**
   * stored by an owner whose copy was in an intake (intake.ts): no copy of the message was in
   * `messages` at the record's epoch, so a restore proven to be its next move need not look there
   */
  from_intake?: true;
}

/**
 * A final record on its way to its partition, with its line for the listing (listing.ts) and, for
 * a message whose bytes rode in its working-set document, those bytes for `raw_<day>` (raw.ts).
 */
export interface Archived {
  record: ArchivedRecord;
  entry: ListingEntry;
  raw?: RawDocument;
}

const SUMMARY_KEYS: ReadonlySet<string> = new Set(SUMMARY_FIELDS);

/**
 * A document's own fields, parted by the first of `groups` that names each; the fields no group
 * names come last. Both forms below are made by it.
 */
function partFields(doc: object, groups: ReadonlyArray<ReadonlySet<string>>): Array<Record<string, unknown>> {
  const parts: Array<Record<string, unknown>> = [...groups, undefined].map(() => ({}));
  for (const [key, value] of Object.entries(doc)) {
    const at = groups.findIndex((group) => group.has(key));
    parts[at === -1 ? groups.length : at]![key] = value;
  }
  return parts;
}

const packed = (fields: Record<string, unknown>) => new Binary(BSON.serialize(fields));

/**
 * Packs a message for its partition, leaving out what belongs to the working set only. Inline raw
 * bytes stay in it with `withRaw` (a parked record: history.ts decides); else they go to `raw_<day>`.
 */
export function packRecord(
  doc: MessageDoc,
  { fromIntake = false, withRaw = false }: { fromIntake?: boolean; withRaw?: boolean } = {},
): ArchivedRecord {
  const { due_at: _due, scheduled: _scheduled, lease_owner: _owner, raw, ...rest } = doc;
  const record = withRaw && raw ? { ...rest, raw } : rest;
  const [summary, detail] = partFields(record, [SUMMARY_KEYS]);
  return {
    ...(summary as unknown as MessageSummary),
    detail: packed(detail!),
    ...(fromIntake ? { from_intake: true as const } : {}),
  };
}

export function unpackRecord(record: ArchivedRecord): MessageDoc {
  const { detail, from_intake: _fromIntake, ...summary } = record;
  return { ...summary, ...(BSON.deserialize(detail.buffer) as Omit<MessageDoc, keyof MessageSummary>) };
}

/**
 * Of a message in its intake, what stays a field: what the intake's own filters read
 * (working-set.ts: the removal of a record whose sender was told 451 matches state, version and
 * lease_epoch; a retried insert finds its own by lease_owner), and the inline raw bytes.
 */
const INTAKE_FIELDS: ReadonlySet<string> = new Set([
  '_id',
  'state',
  'version',
  'lease_epoch',
  'lease_owner',
  'raw',
]);
/** What a listing shows besides those: packed apart (`summary`), so that a listing unpacks only it. */
const INTAKE_SUMMARY: ReadonlySet<string> = new Set(SUMMARY_FIELDS.filter((key) => !INTAKE_FIELDS.has(key)));

/**
 * An accepted message as its intake keeps it: the fields of INTAKE_FIELDS, the rest of the summary
 * packed as one BSON value, and everything else (history, envelope, client, deliveries, ...) as
 * another. FerretDB converts every field of every document it writes, and the insert of the
 * accepted messages is what each sender waits on for its 250
 * (docs/decisions/0015-packed-documents.md).
 */
export type IntakeRecord = Pick<MessageDoc, '_id' | 'state' | 'version' | 'lease_epoch'> &
  Partial<Pick<MessageDoc, 'lease_owner' | 'raw'>> & { summary: Binary; detail: Binary };

/** Packs an accepted message for its intake. */
export function packIntake(doc: MessageDoc): IntakeRecord {
  const [kept, summary, detail] = partFields(doc, [INTAKE_FIELDS, INTAKE_SUMMARY]);
  return {
    ...(kept as Omit<IntakeRecord, 'summary' | 'detail'>),
    summary: packed(summary!),
    detail: packed(detail!),
  };
}

/**
 * The message of an intake document, as far as it was read (a projection may leave `detail` or
 * both packed values out: then it is the fields read, as they are).
 */
export function unpackIntake(doc: Partial<IntakeRecord> | MessageDoc): MessageDoc {
  const { summary, detail, ...kept } = doc as Partial<IntakeRecord>;
  if (!(summary instanceof Binary) && !(detail instanceof Binary)) return doc as MessageDoc;
  return {
    ...kept,
    ...(summary instanceof Binary ? BSON.deserialize(summary.buffer) : {}),
    ...(detail instanceof Binary ? BSON.deserialize(detail.buffer) : {}),
  } as MessageDoc;
}

/** What a projection of intake documents needs of their packed values besides the fields it names. */
export function packedFor(projection: Record<string, 1>): { summary?: 1; detail?: 1 } {
  const keys = Object.keys(projection).filter((key) => !INTAKE_FIELDS.has(key));
  if (keys.some((key) => !INTAKE_SUMMARY.has(key))) return { summary: 1, detail: 1 };
  return keys.length > 0 ? { summary: 1 } : {};
}
