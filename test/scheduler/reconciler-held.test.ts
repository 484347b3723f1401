// The reconciler's net for a `buffer_one` run left held with no other run of its job active
// (`Store.releaseStrandedHeldRuns`), on the embedded store: its one writer releases a held run
// whenever the run before it ends, so the stranded state is made here by hand (the run before
// marked succeeded from a second connection, as a release missed would leave it); the race that
// strands one on PostgreSQL is test/store/postgres-held-race.test.ts.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import Database from 'better-sqlite3';
import { VirtualClock } from '../../src/clock.js';
import { silentLogger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { Reconciler } from '../../src/scheduler/reconciler.js';
import { ScheduleCache } from '../../src/scheduler/schedule-cache.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { heldBehindRunning, leaseOne, minuteMs, t0Ms } from '../store/conformance-fixtures.js';

it('releases a held run whose job has no other active run, and leaves one held behind an active run', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-held-'));
  const path = join(directory, 'tickler.db');
  const store = await openSqliteStore({ path });
  try {
    const clock = new VirtualClock(t0Ms + 3 * minuteMs);
    const metrics = new Metrics();
    const reconciler = new Reconciler({ store, clock, metrics, logger: silentLogger(), schedules: new ScheduleCache(),
      intervalMs: 60_000, isLeader: () => true });
    const { first, held } = await heldBehindRunning(store);
    assert.equal(await reconciler.releaseStrandedOnce(), 0, 'held behind a running run: left alone');
    assert.equal(await leaseOne(store, clock.nowMs()), undefined);

    const direct = new Database(path);
    try {
      direct.prepare("UPDATE runs SET status = 'succeeded', finished_at = ?, lease_expires_at = NULL WHERE run_id = ?")
        .run(t0Ms + 2 * minuteMs, first.runId);
    } finally {
      direct.close();
    }
    assert.equal(await leaseOne(store, clock.nowMs()), undefined, 'stranded: nothing released it');
    assert.equal(await reconciler.releaseStrandedOnce(), 1);
    assert.equal((await leaseOne(store, clock.nowMs()))?.runId, held.runId, 'released, leasable');
    assert.deepEqual((await store.getRun(null, held.runId))!.events.map((event) => event.type), ['dispatched', 'released', 'leased']);
    assert.equal((await metrics.reconcilerHeldReleasesTotal.get()).values[0]?.value, 1);
  } finally {
    await store.close();
    await rm(directory, { recursive: true, force: true });
  }
});
