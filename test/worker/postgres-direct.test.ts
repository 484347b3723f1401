// Workers straight to PostgreSQL (src/direct-worker/postgres-direct.ts) against a real database: a
// scheduler over one store dispatches, and a PostgresWorkerApi with its own connections (as
// in a worker's process) is woken by the dispatch's NOTIFY, leases, and completes. Fencing,
// the ledger and bad input behave as over HTTP. Time is a VirtualClock shared by both sides.
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import { runIdOf } from '../../src/domain/identity.js';
import { timingDefaults } from '../../src/limits.js';
import { silentLogger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';
import { TicklerApiError } from '../../src/worker/errors.js';
import { openPostgresWorkerApi, type PostgresWorkerApi } from '../../src/direct-worker/postgres-direct.js';
import type { WorkerRun } from '../../src/worker/run-attempt.js';
import { createWorker, type Worker } from '../../src/worker/worker.js';
import { jobInput, jobSpec } from '../fixtures/jobs.js';
import { openTestStore, postgresSkipReason, startProxy, testPgUrl, type PostgresHandle } from '../store/postgres-harness.js';

const skip = await postgresSkipReason();
const startMs = Date.parse('2026-11-29T00:00:00.000Z');

/** Polls another process's state (the database, a NOTIFY in flight), not the passing of time. */
async function eventually<T>(probe: () => Promise<T | undefined> | T | undefined, what: string): Promise<T> {
  for (let turn = 0; turn < 1_000; turn++) {
    const found = await probe();
    if (found !== undefined) return found;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`never saw ${what}`);
}

void describe('workers straight to PostgreSQL', { skip: skip ?? false }, () => {
  let handle: PostgresHandle;
  let clock: VirtualClock;
  let scheduler: Scheduler;
  let api: PostgresWorkerApi;
  let worker: Worker | undefined;

  beforeEach(async () => {
    handle = await openTestStore();
    clock = new VirtualClock(startMs);
    scheduler = new Scheduler({
      store: handle.store, clock, metrics: new Metrics(), logger: silentLogger(), nodeId: 'node-a', forceFirstAcquire: false,
      timing: timingDefaults, fullReloadEveryRefreshes: 10,
    });
    await scheduler.start();
    api = await openPostgresWorkerApi({ url: testPgUrl, schema: handle.schema, clock });
  });

  afterEach(async () => {
    await worker?.stop({ timeoutMs: 0 });
    worker = undefined;
    await api.close();
    await scheduler.stop();
    await handle.cleanup();
  });

  async function createAt(atMs: number, payload: unknown, overrides: Parameters<typeof jobSpec>[1] = {}): Promise<string> {
    const [outcome] = await handle.store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() }, { payload, ...overrides }),
      clock.nowMs())], clock.nowMs());
    return outcome!.job.jobId;
  }

  it('a worker parked on the database runs a timer at its time, and the ledger records the lease and the outcome', async () => {
    const atMs = startMs + 60_000;
    const jobId = await createAt(atMs, { invoice: 7 });
    const seen: WorkerRun[] = [];
    worker = createWorker({
      client: api, pool: 'default', concurrency: 2, waitS: 5, workerId: 'direct-1', clock, logger: silentLogger(),
      handler: (run) => {
        seen.push(run);
        return { sent: true };
      },
    });
    worker.start();
    // The worker's long-polls park in this api's LeaseWaiters before the run exists: the
    // dispatch's NOTIFY must wake them.
    await eventually(() => (api.parkedLeaseCount() > 0 ? true : undefined), 'a parked lease');
    await clock.advance(60_000);
    const runId = runIdOf(jobId, atMs);
    const run = await eventually(async () => {
      const found = await handle.store.getRun(null, runId);
      return found?.status === 'succeeded' ? found : undefined;
    }, 'the run succeeded');
    assert.deepEqual(seen.map((item) => [item.run_id, item.payload, item.attempt]), [[runId, { invoice: 7 }, 1]]);
    assert.equal(run.workerId, 'direct-1');
    assert.deepEqual(run.result, { sent: true });
    assert.deepEqual(run.events.map((event) => [event.type, event.fromStatus, event.toStatus]), [
      ['dispatched', null, 'ready'], ['leased', 'ready', 'running'], ['succeeded', 'running', 'succeeded'],
    ]);
    assert.match(await api.metrics.registry.metrics(), /tickler_attempts_total\{outcome="succeeded"\} 1/);
  });

  it('a completion or heartbeat with a stale token is rejected and changes nothing', async () => {
    const atMs = startMs + 1_000;
    const jobId = await createAt(atMs, null, { lease_s: 5 });
    await clock.advance(1_000);
    const runId = runIdOf(jobId, atMs);
    const first = await eventually(async () => {
      const { runs } = await api.leaseRuns({ pool: 'default', max: 1, worker_id: 'zombie' });
      return runs[0];
    }, 'the first lease');
    // The lease runs out; the lease sweep (a server's RunLeaseSweeper) re-offers the run after
    // its retry delay, and a second worker takes it.
    await clock.advance(6_000);
    assert.deepEqual((await handle.store.expireRunLeases(clock.nowMs(), 10)).map((expired) => expired.runId), [runId]);
    await clock.advance(60_000);
    const second = await eventually(async () => {
      const { runs } = await api.leaseRuns({ pool: 'default', max: 1, worker_id: 'second' });
      return runs[0];
    }, 'the second lease');
    assert.equal(second.run_id, runId);
    assert.equal(second.attempt, 2);
    assert.notEqual(second.fencing_token, first.fencing_token);
    const before = await handle.store.getRun(null, runId);

    const { results } = await api.completeRunsBriefly([{ run_id: runId, fencing_token: first.fencing_token, status: 'succeeded' }]);
    assert.equal(results[0]!.status, 409);
    assert.equal('error' in results[0]! ? results[0].error.code : null, 'stale_token');
    await assert.rejects(api.heartbeat(runId, first.fencing_token), (error: unknown) =>
      error instanceof TicklerApiError && error.status === 409 && error.code === 'stale_token');
    assert.deepEqual(await handle.store.getRun(null, runId), before, 'the zombie changed nothing');
    assert.match(await api.metrics.registry.metrics(), /tickler_worker_stale_token_total\{call="complete"\} 1/);

    const answer = await api.heartbeat(runId, second.fencing_token);
    assert.equal(answer.lease_expires_at, new Date(clock.nowMs() + 5_000).toISOString());
    const done = await api.completeRunsBriefly([{ run_id: runId, fencing_token: second.fencing_token, status: 'succeeded' }]);
    assert.deepEqual(done.results, [{ status: 200 }]);
    assert.equal((await handle.store.getRun(null, runId))?.status, 'succeeded');
  });

  it('bad input gets the 4xx the HTTP routes answer, and changes nothing', async () => {
    const atMs = startMs + 1_000;
    const jobId = await createAt(atMs, null);
    await clock.advance(1_000);
    const runId = runIdOf(jobId, atMs);
    await eventually(async () => ((await handle.store.getRun(null, runId))?.status === 'ready' ? true : undefined), 'the run ready');

    await assert.rejects(api.leaseRuns({ pool: 'default', max: 0 }), (error: unknown) =>
      error instanceof TicklerApiError && error.status === 400 && error.field === 'max');
    await assert.rejects(api.leaseRuns({ pool: 'no spaces allowed', max: 1 }), (error: unknown) =>
      error instanceof TicklerApiError && error.status === 400 && error.field === 'pool');
    assert.equal((await handle.store.getRun(null, runId))?.status, 'ready', 'a rejected lease leased nothing');

    const { runs: [leased] } = await api.leaseRuns({ pool: 'default', max: 1 });
    assert.ok(leased !== undefined);
    await assert.rejects(api.completeRunsBriefly([]), (error: unknown) =>
      error instanceof TicklerApiError && error.status === 400 && error.field === 'completions');
    const { results } = await api.completeRunsBriefly([
      { run_id: runId, fencing_token: leased.fencing_token, status: 'finished' as 'succeeded' },
      { run_id: 'not-a-run-id', fencing_token: leased.fencing_token, status: 'succeeded' },
    ]);
    assert.deepEqual(results.map((result) => [result.status, 'error' in result ? result.error.code : null]),
      [[400, 'invalid_request'], [404, 'not_found']]);
    await assert.rejects(api.completeRun(runId, { fencing_token: leased.fencing_token, status: 'succeeded', result: 'x'.repeat(70_000) }),
      (error: unknown) => error instanceof TicklerApiError && error.status === 413);
    const run = await handle.store.getRun(null, runId);
    assert.equal(run?.status, 'running', 'no bad completion was recorded');
    assert.deepEqual(run?.events.map((event) => event.type), ['dispatched', 'leased']);
  });

  it('leases parked under one long-lived signal (the worker\'s) leave no listener on it once answered', async () => {
    const worker = new AbortController();
    for (let lease = 0; lease < 20; lease++) {
      // wait_s is a transport timeout and runs in real time: a millisecond parks and answers.
      assert.deepEqual(await api.leaseRuns({ pool: 'default', max: 1, wait_s: 0.001 }, { signal: worker.signal }), { runs: [] });
    }
    assert.equal(getEventListeners(worker.signal, 'abort').length, 0);
  });

  it('losing the database answers 503 unavailable, and the same api leases again once it is back', async (t) => {
    const proxy = await startProxy(new URL(testPgUrl));
    const viaProxy = new URL(testPgUrl);
    viaProxy.port = String(proxy.port);
    const flaky = await openPostgresWorkerApi({ url: viaProxy.toString(), schema: handle.schema, clock });
    t.after(async () => {
      await flaky.close();
      await proxy.stop();
    });
    const atMs = startMs + 1_000;
    const jobId = await createAt(atMs, null);
    await clock.advance(1_000);
    const runId = runIdOf(jobId, atMs);
    await eventually(async () => ((await handle.store.getRun(null, runId))?.status === 'ready' ? true : undefined), 'the run ready');

    await proxy.stop();
    await assert.rejects(flaky.leaseRuns({ pool: 'default', max: 1 }), (error: unknown) =>
      error instanceof TicklerApiError && error.status === 503 && error.code === 'unavailable');
    assert.equal((await handle.store.getRun(null, runId))?.status, 'ready');

    await proxy.restart();
    const { runs } = await flaky.leaseRuns({ pool: 'default', max: 1 });
    assert.deepEqual(runs.map((run) => run.run_id), [runId]);
  });

  it('close answers a parked lease with no runs at once', async () => {
    const parked = api.leaseRuns({ pool: 'default', max: 1, wait_s: 20 });
    await new Promise((resolve) => setImmediate(resolve));
    const closing = api.close();
    assert.deepEqual(await parked, { runs: [] });
    await closing;
    // afterEach closes again: closing twice is harmless.
  });
});
