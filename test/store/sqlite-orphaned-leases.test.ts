// A restarted embedded server cuts the worker leases its crashed predecessor granted
// (SqliteStore.shortenOrphanedLeases, called from server.ts when the data-directory lock was
// taken over from a dead process): to a third of each lease plus a margin from the restart,
// or from the ready time of a run leased ahead; a lease already ending sooner is left alone.
// The process-level story (kill -9, restart, heartbeat, re-offer) is in test/e2e/engine.test.ts.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { createJob, dispatchItem, firePending, leaseOne, minuteMs, ownShard, pendingTimerOf, t0Ms, timerAt } from './conformance-fixtures.js';

test('leases granted before a crash are cut to a third of the lease plus the margin, from now or the ready time', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-orphaned-leases-'));
  const path = join(directory, 'tickler.db');
  const dueMs = t0Ms + minuteMs;
  try {
    let store = await openSqliteStore({ path });
    const leaseAt = async (pool: string, leaseMs: number) => {
      const job = await createJob(store, { spec: { pool } });
      await firePending(store, job, dueMs, { recurring: false });
      return (await leaseOne(store, dueMs, { pool, leaseMs }))!;
    };
    const long = await leaseAt('long', 60_000);
    const short = await leaseAt('short', 6_000);
    // Written ahead and leased 50 ms before its ready time: its lease counts from that time.
    const aheadJob = await createJob(store, { spec: { pool: 'ahead' }, timer: timerAt(dueMs + 1_000) });
    const timer = (await pendingTimerOf(store, aheadJob))!;
    const shard = await ownShard(store, aheadJob.shard, dueMs);
    await store.writeRunsAhead([dispatchItem(shard, timer)], dueMs);
    const ahead = (await leaseOne(store, dueMs + 950, { pool: 'ahead', leaseMs: 30_000, aheadMs: 50 }))!;
    assert.equal(ahead.leaseExpiresAtMs, dueMs + 1_000 + 30_000);
    await store.close();

    store = await openSqliteStore({ path });
    try {
      const restartMs = dueMs + 960;
      assert.equal(store.shortenOrphanedLeases(restartMs, 5_000), 2);
      const expiryOf = async (runId: string) => (await store.getRun(null, runId))?.leaseExpiresAtMs;
      assert.equal(await expiryOf(long.runId), restartMs + 20_000 + 5_000);
      assert.equal(await expiryOf(ahead.runId), dueMs + 1_000 + 10_000 + 5_000, 'from its ready time, not the restart');
      assert.equal(await expiryOf(short.runId), dueMs + 6_000, 'ending before the cut: left alone');
    } finally {
      await store.close();
    }
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
});
