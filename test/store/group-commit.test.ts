// The embedded store's group commit with its fsync off the loop: callers are answered only
// once their commit is durable, writes that arrive during a sync share the next commit, a
// write that needs no sync does not wait for one, and a failed sync stops the queue.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, it } from 'node:test';
import { TicklerError } from '../../src/errors.js';
import {
  GroupCommitQueue, type Durability, type GatherOptions, type OperationOutcome, type QueuedOperation,
} from '../../src/store/sqlite/group-commit.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { jobRecord, jobSpec, minuteMs, t0Ms, timerAt } from './conformance-fixtures.js';

/** A disk whose syncs finish when the test says so. */
class ManualDisk implements Durability {
  readonly syncs: { resolve(): void; reject(error: Error): void }[] = [];
  syncNowCount = 0;

  sync(): Promise<void> {
    return new Promise((resolve, reject) => this.syncs.push({ resolve, reject }));
  }

  syncNow(): void {
    this.syncNowCount++;
  }
}

function queueOver(disk: Durability | null, options: GatherOptions = {}): { queue: GroupCommitQueue; groups: string[][]; log: string[] } {
  const groups: string[][] = [];
  const log: string[] = [];
  const commit = (operations: readonly QueuedOperation[]): OperationOutcome[] => {
    groups.push(operations.map((operation) => String(operation.run())));
    return operations.map((operation) => ({ ok: true, value: operation.run() }));
  };
  return { queue: new GroupCommitQueue(commit, 100, disk, options), groups, log };
}

function submit(queue: GroupCommitQueue, log: string[], name: string, durable = true): Promise<string> {
  return queue.submit({ run: () => name, afterCommit: () => log.push(`after ${name}`), weight: 1, durable })
    .then((value) => {
      log.push(`answered ${value}`);
      return value;
    });
}

void describe('sqlite group commit with the sync off the loop', () => {
  void it('answers a write only after the sync that covers its commit, notifications first', async () => {
    const disk = new ManualDisk();
    const { queue, groups, log } = queueOver(disk);
    const first = submit(queue, log, 'a');
    await nextTurn();
    assert.deepEqual(groups, [['a']]);
    assert.equal(disk.syncs.length, 1);
    await nextTurn();
    assert.deepEqual(log, [], 'nothing is answered before the sync finishes');
    disk.syncs[0]!.resolve();
    assert.equal(await first, 'a');
    assert.deepEqual(log, ['after a', 'answered a']);
  });

  void it('gathers the writes that arrive during a sync into one commit after it', async () => {
    const disk = new ManualDisk();
    const { queue, groups, log } = queueOver(disk);
    const first = submit(queue, log, 'a');
    await nextTurn();
    const later = [submit(queue, log, 'b')];
    await nextTurn();
    later.push(submit(queue, log, 'c'));
    await nextTurn();
    assert.deepEqual(groups, [['a']], 'b and c wait while the disk works');
    disk.syncs[0]!.resolve();
    await first;
    await nextTurn();
    await nextTurn();
    assert.deepEqual(groups, [['a'], ['b', 'c']]);
    assert.equal(disk.syncs.length, 2);
    disk.syncs[1]!.resolve();
    assert.deepEqual(await Promise.all(later), ['b', 'c']);
    assert.deepEqual(queue.stats, { transactions: 2, operations: 3 });
  });

  void it('when a sync lands, commits the next group and starts its sync before answering the first', async () => {
    const disk = new ManualDisk();
    const { queue, groups, log } = queueOver(disk);
    const first = submit(queue, log, 'a');
    await nextTurn();
    const second = submit(queue, log, 'b');
    await nextTurn();
    let syncsWhenAnswered = -1;
    let groupsWhenAnswered: string[][] = [];
    const answered = first.then(() => {
      syncsWhenAnswered = disk.syncs.length;
      groupsWhenAnswered = groups.map((group) => [...group]);
    });
    disk.syncs[0]!.resolve();
    await answered;
    assert.deepEqual(groupsWhenAnswered, [['a'], ['b']], 'b was committed before a was answered');
    assert.equal(syncsWhenAnswered, 2, 'and its sync had started: the answer overlaps the disk');
    disk.syncs[1]!.resolve();
    assert.equal(await second, 'b');
  });

  void it('commits and answers a write that needs no sync while a sync is in flight', async () => {
    const disk = new ManualDisk();
    const { queue, groups, log } = queueOver(disk);
    const durable = submit(queue, log, 'a');
    await nextTurn();
    const lease = submit(queue, log, 'lease', false);
    const durableToo = submit(queue, log, 'b');
    assert.equal(await lease, 'lease');
    assert.deepEqual(groups, [['a'], ['lease', 'b']]);
    assert.deepEqual(log, ['after lease', 'answered lease']);
    disk.syncs[0]!.resolve();
    await durable;
    await nextTurn();
    assert.equal(disk.syncs.length, 2, 'b, committed during the first sync, gets a sync of its own');
    disk.syncs[1]!.resolve();
    assert.equal(await durableToo, 'b');
  });

  void it('fails the writes of a failed sync and every later write as unavailable', async () => {
    const disk = new ManualDisk();
    const { queue, log } = queueOver(disk);
    const first = submit(queue, log, 'a');
    await nextTurn();
    disk.syncs[0]!.reject(new Error('EIO'));
    const isUnavailable = (error: unknown): boolean => error instanceof TicklerError && error.code === 'unavailable';
    await assert.rejects(first, isUnavailable);
    await assert.rejects(submit(queue, log, 'b'), isUnavailable);
    assert.deepEqual(log, []);
  });

  void it('on drain, commits what is queued and syncs it before answering', async () => {
    const disk = new ManualDisk();
    const { queue, groups, log } = queueOver(disk);
    const queued = submit(queue, log, 'a');
    await queue.drain();
    assert.deepEqual(groups, [['a']]);
    assert.equal(disk.syncNowCount, 1);
    assert.equal(await queued, 'a');
  });

  void it('without a durability answers right after the commit, one group per turn', async () => {
    const { queue, groups, log } = queueOver(null);
    const answers = Promise.all([submit(queue, log, 'a'), submit(queue, log, 'b')]);
    assert.deepEqual(await answers, ['a', 'b']);
    assert.deepEqual(groups, [['a', 'b']]);
  });
});

/** A gather timer the test fires by hand. */
class ManualTimer {
  readonly armed: { callback(): void; delayMs: number; cancelled: boolean }[] = [];

  readonly setTimer = (callback: () => void, delayMs: number): (() => void) => {
    const timer = { callback, delayMs, cancelled: false };
    this.armed.push(timer);
    return () => {
      timer.cancelled = true;
    };
  };

  fire(): void {
    const live = this.armed.filter((timer) => !timer.cancelled);
    assert.equal(live.length, 1, 'one gather timer armed');
    live[0]!.cancelled = true;
    live[0]!.callback();
  }
}

function gatheringQueue(disk: Durability, timer: ManualTimer): { queue: GroupCommitQueue; groups: string[][]; log: string[] } {
  return queueOver(disk, { gatherMs: 60_000, recentNotDurableMs: 60_000, setTimer: timer.setTimer });
}

void describe('sqlite group commit: durable writes gathering for company', () => {
  void it('while dispatches commit steadily, a lone completion waits and rides the next one', async () => {
    const disk = new ManualDisk();
    const timer = new ManualTimer();
    const { queue, groups, log } = gatheringQueue(disk, timer);
    await submit(queue, log, 'dispatch-1', false);
    const completion = submit(queue, log, 'complete', true);
    await nextTurn();
    assert.deepEqual(groups, [['dispatch-1']], 'the completion waits');
    assert.equal(timer.armed.length, 1);
    const dispatch = submit(queue, log, 'dispatch-2', false);
    await nextTurn();
    assert.deepEqual(groups, [['dispatch-1'], ['complete', 'dispatch-2']], 'one transaction for both');
    assert.ok(timer.armed[0]!.cancelled, 'the gather ended with the commit');
    assert.equal(await dispatch, 'dispatch-2');
    disk.syncs.at(-1)!.resolve();
    assert.equal(await completion, 'complete', 'answered once its commit is synced');
  });

  void it('commits the lone completion when the gather runs out', async () => {
    const disk = new ManualDisk();
    const timer = new ManualTimer();
    const { queue, groups, log } = gatheringQueue(disk, timer);
    await submit(queue, log, 'dispatch', false);
    const completion = submit(queue, log, 'complete', true);
    await nextTurn();
    await nextTurn();
    assert.deepEqual(groups, [['dispatch']]);
    timer.fire();
    assert.deepEqual(groups, [['dispatch'], ['complete']]);
    disk.syncs.at(-1)!.resolve();
    assert.equal(await completion, 'complete');
  });

  void it('does not wait when nothing but durable writes commit (creates alone), nor for a heavy group', async () => {
    const disk = new ManualDisk();
    const timer = new ManualTimer();
    const { queue, groups, log } = gatheringQueue(disk, timer);
    const create = submit(queue, log, 'create', true);
    await nextTurn();
    assert.deepEqual(groups, [['create']], 'no dispatch or lease committed lately: no wait');
    disk.syncs[0]!.resolve();
    await create;
    await submit(queue, log, 'dispatch', false);
    const heavy = queue.submit({ run: () => 'batch', afterCommit: () => undefined, weight: 64, durable: true });
    await nextTurn();
    assert.deepEqual(groups, [['create'], ['dispatch'], ['batch']], 'a batch of 64 commits at once');
    assert.equal(timer.armed.length, 0);
    disk.syncs.at(-1)!.resolve();
    assert.equal(await heavy, 'batch');
  });
});

void describe('sqlite store: groups of one and of many', () => {
  void it('a write that fails alone in its group leaves nothing behind; the next group commits', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'tickler-group-'));
    const store = await openSqliteStore({ path: join(directory, 'tickler.db') });
    try {
      const first = jobRecord(jobSpec(), t0Ms);
      await store.createJobs([{ job: first, timer: timerAt(t0Ms + minuteMs) }], t0Ms);
      // One create of two: the second repeats the first's id, so the whole operation fails,
      // the new job with it, though it was written first inside the operation.
      const fresh = jobRecord(jobSpec(), t0Ms);
      await assert.rejects(store.createJobs([
        { job: fresh, timer: timerAt(t0Ms + minuteMs) },
        { job: { ...first, spec: jobSpec({ key: 'other' }) }, timer: null },
      ], t0Ms), /UNIQUE|PRIMARY KEY/);
      assert.equal(await store.getJob(null, fresh.jobId), null);
      const later = jobRecord(jobSpec(), t0Ms);
      const [outcome] = await store.createJobs([{ job: later, timer: timerAt(t0Ms + minuteMs) }], t0Ms);
      assert.equal(outcome?.kind, 'created');
      assert.deepEqual((await store.listJobs({ team: null, limit: 10 })).items.map((job) => job.jobId).sort(),
        [first.jobId, later.jobId].sort());
    } finally {
      await store.close();
      await rm(directory, { recursive: true, force: true });
    }
  });
});
