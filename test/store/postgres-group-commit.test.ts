// The group committer of the PostgreSQL store, without a database: calls made in one turn
// share a commit, a call is never split, transactions in flight are bounded, and a failure
// that one call's input may own is retried call by call so only that caller sees it.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GroupCommitter } from '../../src/store/postgres/group-commit.js';

class BadInput extends Error {}

void describe('GroupCommitter', () => {
  void it('coalesces calls made in the same turn into one commit, answering each its own outcomes', async () => {
    const commits: number[][] = [];
    const committer = new GroupCommitter<number, string>(async (items) => {
      commits.push(items);
      return items.map((item) => `ok ${item}`);
    }, 100, 1);
    const answers = await Promise.all([committer.submit([1]), committer.submit([2, 3]), committer.submit([4])]);
    assert.deepEqual(commits, [[1, 2, 3, 4]]);
    assert.deepEqual(answers, [['ok 1'], ['ok 2', 'ok 3'], ['ok 4']]);
  });

  void it('never splits a call, caps items per commit, and keeps at most N commits in flight', async () => {
    const commits: number[][] = [];
    let inFlight = 0;
    let inFlightMax = 0;
    const committer = new GroupCommitter<number, number>(async (items) => {
      inFlight++;
      inFlightMax = Math.max(inFlightMax, inFlight);
      await new Promise((resolve) => setImmediate(resolve));
      commits.push(items);
      inFlight--;
      return items;
    }, 4, 2);
    const calls = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10, 11], [12]];
    const answers = await Promise.all(calls.map((call) => committer.submit(call)));
    assert.deepEqual(answers, calls);
    assert.ok(inFlightMax <= 2, `in flight at most 2, saw ${inFlightMax}`);
    for (const call of calls) {
      assert.ok(commits.some((commit) => call.every((item) => commit.includes(item))), `call ${call.join(',')} kept whole`);
    }
    assert.ok(commits.every((commit) => commit.length <= 4 || commit.length === 5), 'only an oversized call exceeds the cap');
  });

  void it('retries call by call when a shared commit failed on one call\'s input', async () => {
    const committer = new GroupCommitter<number, number>(async (items) => {
      if (items.includes(13)) throw new BadInput('13 is unlucky');
      return items;
    }, 100, 1, (error) => error instanceof BadInput);
    const results = await Promise.allSettled([committer.submit([1]), committer.submit([13]), committer.submit([2])]);
    assert.deepEqual(results.map((result) => result.status), ['fulfilled', 'rejected', 'fulfilled']);
  });

  void it('fails every call of a commit that failed for everyone', async () => {
    const committer = new GroupCommitter<number, number>(async () => {
      throw new Error('database gone');
    }, 100, 1, (error) => error instanceof BadInput);
    const results = await Promise.allSettled([committer.submit([1]), committer.submit([2])]);
    assert.deepEqual(results.map((result) => result.status), ['rejected', 'rejected']);
  });
});
