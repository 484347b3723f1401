// The lease sweeper on the virtual clock, over a real SQLite file: it wakes for worker-lease
// expiries only. A run waiting in retry_wait needs no sweep (it is leasable from its ready
// time), so an idle server with retries past their ready time must not wake at all, and an
// advance of the virtual clock must end.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import { silentLogger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { RunLeaseSweeper } from '../../src/scheduler/run-lease-sweeper.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import type { Store } from '../../src/store/store.js';
import { createJob, firePending, leaseOne, minuteMs, t0Ms } from '../store/conformance-fixtures.js';

/** A store that counts the sweeper's deadline reads and refuses after `callsMax` (so a spin ends). */
function countingDeadlines(store: Store, callsMax: number): { store: Store; calls: () => number } {
  let calls = 0;
  const counted = new Proxy(store, {
    get(target, property, receiver) {
      if (property !== 'nextLeaseExpiryMs') return Reflect.get(target, property, receiver) as unknown;
      return async () => {
        calls += 1;
        if (calls > callsMax) throw new Error(`the sweeper read its next deadline ${calls} times`);
        return target.nextLeaseExpiryMs();
      };
    },
  });
  return { store: counted, calls: () => calls };
}

it('does not wake for a retry past its ready time: an advance ends and the sweeper stays idle', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-sweeper-'));
  const sqlite = await openSqliteStore({ path: join(directory, 'tickler.db') });
  try {
    const job = await createJob(sqlite, { spec: { retry: { max_attempts: 3, base_s: 1, max_s: 1 } } });
    const { runId } = await firePending(sqlite, job, t0Ms + minuteMs);
    const leased = (await leaseOne(sqlite, t0Ms + minuteMs))!;
    const failed = await sqlite.completeRun({ team: null, runId, fencingToken: leased.fencingToken, status: 'failed',
      error: 'boom', result: null, nowMs: t0Ms + minuteMs });
    assert.ok(failed.kind === 'completed' && failed.run.status === 'retry_wait');

    const clock = new VirtualClock(t0Ms + 2 * minuteMs); // the retry is due, and no worker takes it
    const { store, calls } = countingDeadlines(sqlite, 50);
    const sweeper = new RunLeaseSweeper({ store, clock, metrics: new Metrics(), logger: silentLogger(), intervalMs: 5_000 });
    await sweeper.start();
    await clock.advance(10 * minuteMs);
    sweeper.stop();
    assert.equal(calls(), 1, 'one sweep at start, and no wake-up for the waiting retry');
    assert.equal(clock.pendingTimerCount(), 0, 'nothing armed: there is no lease to expire');
    assert.equal((await sqlite.getRun(null, runId))?.status, 'retry_wait', 'the retry waits for a worker, untouched');
  } finally {
    await sqlite.close();
    await rm(directory, { recursive: true, force: true });
  }
});

it('wakes at a lease expiry and re-offers the run, then goes idle', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-sweeper-'));
  const sqlite = await openSqliteStore({ path: join(directory, 'tickler.db') });
  try {
    const job = await createJob(sqlite);
    const { runId } = await firePending(sqlite, job, t0Ms + minuteMs);
    await leaseOne(sqlite, t0Ms + minuteMs, { leaseMs: 5_000 });
    const clock = new VirtualClock(t0Ms + minuteMs);
    const { store, calls } = countingDeadlines(sqlite, 50);
    const sweeper = new RunLeaseSweeper({ store, clock, metrics: new Metrics(), logger: silentLogger(), intervalMs: 5_000 });
    await sweeper.start();
    await clock.advance(minuteMs);
    sweeper.stop();
    assert.equal((await sqlite.getRun(null, runId))?.status, 'ready', 're-offered at its expiry');
    assert.equal(calls(), 2, 'the sweep at start and the one at the expiry');
  } finally {
    await sqlite.close();
    await rm(directory, { recursive: true, force: true });
  }
});
