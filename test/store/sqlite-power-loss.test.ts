// A dispatch on the embedded store is answered after its commit, before the fsync that makes
// it durable (SqliteStore.dispatch). What a power failure can do to it: the WAL keeps a
// prefix of whole transactions, so the dispatch is gone together with the timer it marked
// fired, and the timer fires again after the restart under the same run id (invariant 1).
// The power failure is the disk image of the moment before the dispatch, restored.
import assert from 'node:assert/strict';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { createJob, firePending, leaseOne, minuteMs, t0Ms } from './conformance-fixtures.js';

test('a dispatch lost in a power failure fires again after the restart, under the same run id', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-power-loss-'));
  const path = join(directory, 'tickler.db');
  try {
    let store = await openSqliteStore({ path });
    const job = await createJob(store);
    await copyFile(path, `${path}.at-power-loss`);
    await copyFile(`${path}-wal`, `${path}-wal.at-power-loss`);
    const first = await firePending(store, job, t0Ms + minuteMs, { recurring: false });
    assert.equal(first.result.kind, 'dispatched');
    const leased = await leaseOne(store, t0Ms + minuteMs);
    assert.equal(leased?.runId, first.runId, 'a worker may already hold the run when the power goes');
    await store.close();

    await copyFile(`${path}.at-power-loss`, path);
    await copyFile(`${path}-wal.at-power-loss`, `${path}-wal`);
    await rm(`${path}-shm`, { force: true });
    store = await openSqliteStore({ path });
    try {
      assert.equal(await store.getRun(null, first.runId), null, 'the dispatch went with the power');
      const again = await firePending(store, job, t0Ms + minuteMs, { recurring: false });
      assert.equal(again.runId, first.runId, 'the same occurrence, the same run id: the worker sees a duplicate, not a new run');
      assert.equal(again.result.kind, 'dispatched');
      assert.equal((await store.getRun(null, first.runId))?.status, 'ready');
    } finally {
      await store.close();
    }
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
});
