// Gathered: a message's bytes as DATA delivers them come back whole, in a buffer of the message's
// own (the parse thread takes it over), whether the message stayed in pieces or grew in place.
import { randomBytes } from 'node:crypto';
import test from 'ava';
import { Gathered } from '../../src/smtp/gathered.ts';

const MIB = 1024 * 1024;

function gather(message: Buffer, pieceBytes: number, maxBytes = 8 * MIB): Buffer | false {
  const gathered = new Gathered(maxBytes);
  for (let offset = 0; offset < message.length; offset += pieceBytes)
    if (!gathered.push(message.subarray(offset, offset + pieceBytes))) return false;
  return gathered.whole();
}

for (const [label, bytes] of [
  ['a small message, kept in pieces', 3000],
  ['a message of 10 KB', 10 * 1024],
  ['a message past the point where it moves into one buffer', 3 * MIB + 17],
  ['a message past a collection point', 5 * MIB],
] as const) {
  test(`${label}: every byte, in order, in a buffer of its own`, (t) => {
    const message = randomBytes(bytes);
    const whole = gather(message, 65536);
    if (whole === false) return t.fail('refused');
    t.true(whole.equals(message));
    t.is(whole.byteOffset, 0);
    t.is(whole.buffer.byteLength, bytes, 'not a slice of a larger buffer (a transfer would take it along)');
  });
}

test('a piece that would pass the largest message allowed is refused, and so is every later one', (t) => {
  const gathered = new Gathered(100_000);
  t.true(gathered.push(Buffer.alloc(60_000)));
  t.false(gathered.push(Buffer.alloc(60_000)));
  gathered.drop();
  t.false(gathered.push(Buffer.alloc(1)), 'dropped: nothing more is kept');
});

test('the largest message allowed fits exactly, in either form', (t) => {
  for (const maxBytes of [200_000, 2 * MIB]) {
    const message = randomBytes(maxBytes);
    const whole = gather(message, 50_000, maxBytes);
    t.true(whole !== false && whole.equals(message), `${maxBytes} bytes`);
  }
});
