/**
 * The embedded store's fencing tokens come from blocks reserved in `token_sequence`
 * (tables.ts): the table is not written in every lease transaction. These pin what makes
 * that safe: tokens only grow, and a reservation whose transaction rolled back is made good
 * by the next one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { TokenSequence } from '../../src/store/sqlite/tables.js';

function sequenceTable(): Database.Database {
  const db = new Database(':memory:');
  db.exec('CREATE TABLE token_sequence (id INTEGER PRIMARY KEY, value INTEGER NOT NULL); INSERT INTO token_sequence VALUES (1, 0)');
  return db;
}

const tableValue = (db: Database.Database): number =>
  db.prepare('SELECT value FROM token_sequence WHERE id = 1').pluck().get() as number;

void describe('sqlite token sequence', () => {
  void it('hands out growing tokens and writes the table once per block', () => {
    const db = sequenceTable();
    const tokens = new TokenSequence(db, 10);
    const firsts = [tokens.reserve(3), tokens.reserve(3), tokens.reserve(3)];
    assert.deepEqual(firsts, [1, 4, 7]);
    assert.equal(tableValue(db), 10, 'one block reserved for all three');
    const next = tokens.reserve(3);
    assert.ok(next >= 10, `a reservation crossing the block's end takes a new block (got ${next})`);
    assert.ok(tableValue(db) >= next + 2, 'the table covers every token handed out');
  });

  void it('never repeats a token when a reservation\'s transaction rolled back', () => {
    const db = sequenceTable();
    const tokens = new TokenSequence(db, 4);
    const handedOut: number[] = [];
    const take = (count: number): void => {
      const first = tokens.reserve(count);
      for (let token = first; token < first + count; token++) handedOut.push(token);
    };
    assert.throws(() => db.transaction(() => {
      take(3);
      throw new Error('the lease failed');
    })());
    assert.equal(tableValue(db), 0, 'the reservation rolled back with its transaction');
    take(3);
    take(3);
    assert.equal(new Set(handedOut).size, handedOut.length, `no token twice: ${handedOut.join(', ')}`);
    assert.deepEqual(handedOut, [...handedOut].sort((a, b) => a - b), 'tokens only grow');
    assert.ok(tableValue(db) >= Math.max(...handedOut), 'the table caught up past the rolled-back block');
  });

  void it('takes a batch larger than a block whole', () => {
    const db = sequenceTable();
    const tokens = new TokenSequence(db, 4);
    const first = tokens.reserve(10);
    assert.equal(first, 1);
    assert.equal(tableValue(db), 10);
    assert.equal(tokens.reserve(1), 11);
  });
});
