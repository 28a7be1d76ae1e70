// Where a message lives and who may write it: one frozen table of places and the queue seam's
// moves between them (src/store/queue.ts performs each move; no other code moves a message).
// diagram.ts draws it for ARCHITECTURE.md, and a unit test keeps the two identical. Data only.

export const PLACES = Object.freeze(['intake', 'working_set', 'parked', 'record', 'gone'] as const);
export type PlaceName = (typeof PLACES)[number];

/** Who writes a message in each place, and how its writes are fenced. */
export const PLACE_OWNERS: Readonly<Record<PlaceName, string>> = Object.freeze({
  intake:
    'the accepting process, epoch 1 from the insert (a claimed or restored message: its claimant, at the epoch of its lease); insert-only (a departure note ends it)',
  working_set:
    'the holder of lease <id>:<epoch> (epoch 1: its acceptor); every write matches {_id, lease_epoch, version}',
  parked: 'nobody: the first to insert lease <id>:<epoch+1> when its pointer is due claims it',
  record: 'nobody: replaced only by the message final again after a replay',
  gone: 'nobody: its sender was told 451 and sends it again',
});

export const MOVES = Object.freeze([
  'accept', // stored before the 250: into this process's intake, or the working set where the profile has no intakes
  'move_in', // the first write other than the final one: out of the intake at epoch 2
  'take_over', // its owner's lease expired (or its intake went stale): the next epoch, by a unique lease insert
  'park', // released until a retry is due, on a profile that parks (parking.ts)
  'claim', // a parked message whose pointer is due: the next epoch, by a unique lease insert; into the claimant's intake of claims (the working set where the profile has no intakes)
  'finish', // final (delivered or dlq): its record into its day's partition
  'restore', // an operator's replay: the record (or a parked one) back at the next epoch, as a claim goes
  'abandon', // answered 451 after all, its insert landed late: removed untouched
] as const);
export type MoveName = (typeof MOVES)[number];

type Table = Readonly<Record<PlaceName, Readonly<Partial<Record<MoveName, PlaceName>>>>>;

export const PLACE_TABLE: Table = Object.freeze({
  intake: Object.freeze({
    move_in: 'working_set',
    take_over: 'working_set',
    park: 'parked',
    finish: 'record',
    abandon: 'gone',
  }),
  working_set: Object.freeze({
    take_over: 'working_set',
    park: 'parked',
    finish: 'record',
    abandon: 'gone',
  }),
  parked: Object.freeze({ claim: 'intake', restore: 'intake' }),
  record: Object.freeze({ restore: 'intake' }),
  gone: Object.freeze({}),
});

/** Where a message accepted (or claimed) now lives first: an intake, or the working set (profile.ts, `intakeCollections`). */
export const FIRST_PLACES: readonly PlaceName[] = Object.freeze(['intake', 'working_set']);
