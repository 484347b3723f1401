// WAL checkpoints on a thread of their own (src/store/sqlite/checkpointer.ts): the thread
// copies the WAL into the database while commits go on, nothing committed is lost or damaged
// by it, the WAL starts over under commits that never pause, and when the thread cannot run,
// the connection checkpoints by itself again.
import assert from 'node:assert/strict';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { Checkpointer } from '../../src/store/sqlite/checkpointer.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { jobInput, jobSpec } from '../fixtures/jobs.js';

const t0Ms = Date.parse('2026-11-29T00:00:00.000Z');

test('a thread checkpoints the WAL while commits go on, and every committed job is there after reopening', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-checkpoint-'));
  const path = join(directory, 'tickler.db');
  try {
    const store = await openSqliteStore({ path, checkpointIntervalMs: 0 });
    const created: string[] = [];
    for (let batch = 0; batch < 20; batch++) {
      const inputs = Array.from({ length: 500 }, (_, index) =>
        jobInput(jobSpec({ at: new Date(t0Ms + 86_400_000 + batch * 500 + index).toISOString() }), t0Ms));
      // Not awaiting the checkpoint between batches: they commit while it runs.
      const outcomes = await store.createJobs(inputs, t0Ms);
      for (const outcome of outcomes) {
        assert.equal(outcome.kind, 'created');
        created.push(outcome.job.jobId);
      }
    }
    const stats = await store.checkpointIdle();
    assert.ok(stats.checkpoints >= 1, `the thread checkpointed (${JSON.stringify(stats)})`);
    assert.ok(stats.framesCheckpointed > 0, 'and copied WAL frames into the database');
    assert.equal(stats.failures, 0);
    await store.close();

    const raw = new Database(path, { readonly: true });
    try {
      assert.equal(raw.pragma('integrity_check', { simple: true }), 'ok');
      assert.equal((raw.prepare('SELECT count(*) AS n FROM jobs').get() as { n: number }).n, created.length);
    } finally {
      raw.close();
    }
    const reopened = await openSqliteStore({ path });
    try {
      for (const jobId of [created[0]!, created[created.length - 1]!]) {
        assert.equal((await reopened.getJob(null, jobId))?.jobId, jobId);
      }
    } finally {
      await reopened.close();
    }
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
});

test('commits that never pause still let the WAL start over: the connection copies what the thread\'s pass missed', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-checkpoint-'));
  const path = join(directory, 'tickler.db');
  try {
    // Every pass catches up, however small the WAL it found.
    const store = await openSqliteStore({ path, checkpointIntervalMs: 0, checkpointCatchUpFramesMin: 1 });
    let created = 0;
    try {
      // 800 creates at once: the group commit runs them back to back, each commit's fsync
      // overlapping the next one's transaction, so no moment finds the WAL copied whole by the
      // thread alone (without the catch-up, this WAL grew to 37-46 MB beside a 25 MB database).
      const outcomes = await Promise.all(Array.from({ length: 800 }, () => store.createJobs(Array.from({ length: 50 }, () =>
        jobInput(jobSpec({ at: new Date(t0Ms + 86_400_000 + created++).toISOString() }), t0Ms)), t0Ms)));
      assert.ok(outcomes.flat().every((outcome) => outcome.kind === 'created'));
      const stats = await store.checkpointIdle();
      const walBytes = (await stat(`${path}-wal`)).size;
      const databaseBytes = (await stat(path)).size;
      assert.ok(walBytes < databaseBytes / 2, `the WAL started over: ${walBytes} bytes beside a database of ${databaseBytes}`);
      assert.ok(stats.catchUps >= 1, `the connection caught up (${JSON.stringify(stats)})`);
      assert.equal(stats.failures, 0);
    } finally {
      await store.close();
    }

    const raw = new Database(path, { readonly: true });
    try {
      assert.equal(raw.pragma('integrity_check', { simple: true }), 'ok');
      assert.equal((raw.prepare('SELECT count(*) AS n FROM jobs').get() as { n: number }).n, created);
    } finally {
      raw.close();
    }
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
});

test('when the thread cannot open the database, checkpoints go back to the connection', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-checkpoint-'));
  try {
    const handedBack: number[] = [];
    // A directory is not a database: the thread fails as it starts.
    const checkpointer = new Checkpointer({ path: directory, intervalMs: 0, setAutocheckpoint: (pages) => handedBack.push(pages) });
    checkpointer.afterCommit();
    await checkpointer.whenIdle();
    assert.deepEqual(handedBack, [10_000], 'the connection checkpoints at the usual size again');
    checkpointer.afterCommit();
    await checkpointer.whenIdle();
    assert.equal(handedBack.length, 1, 'and the thread is not started again');
    await checkpointer.close();
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
});
