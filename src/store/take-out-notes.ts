// The take-outs this process's restores saw land (history.ts, restoreRecord): the finish of the
// round a restore began then knows that the record it came from is out without reading that
// record's marker (storeRecord). A note is only ever a shortcut: without one, the marker is read.
import type { RecordKind } from './partitions.ts';

/** Notes kept at most: past it, the oldest go first (a replay of many waits for room to run). */
const MOST_NOTES = 50_000;

export class TakeOutNotes {
  /** by message id: the kind of the record taken out and the replays count its restore gave */
  private readonly notes = new Map<string, { kind: RecordKind; replays: number }>();

  /** The record of `kind` that the restore giving the message `replays` came from is out. */
  note(id: string, kind: RecordKind, replays: number): void {
    this.notes.delete(id);
    this.notes.set(id, { kind, replays });
    if (this.notes.size > MOST_NOTES) this.notes.delete(this.notes.keys().next().value!);
  }

  /**
   * Whether the message's record of `kind` was taken out by the restore that began its round
   * (`replays`: every restore counts one more, so an earlier round's note does not answer).
   */
  tookOut(id: string, kind: RecordKind, replays: number): boolean {
    const found = this.notes.get(id);
    return found !== undefined && found.kind === kind && found.replays === replays;
  }

  /** The round has ended (its final record is stored). */
  forget(id: string): void {
    this.notes.delete(id);
  }
}
