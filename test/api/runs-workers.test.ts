import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cronJob, startHarness, type Harness } from './harness.js';
import type { LeaseWaiters } from '../../src/service/lease-waiters.js';
import { shardOf as shardOfJob } from '../../src/domain/identity.js';
import type { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { firePending } from '../store/conformance-fixtures.js';

async function triggeredRun(h: Harness, pool = 'billing'): Promise<{ jobId: string; runId: string }> {
  const created = await h.call('POST', '/v1/jobs', { body: cronJob({ pool, payload: { invoice: 7 } }) });
  assert.equal(created.status, 201);
  const trigger = await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`);
  assert.equal(trigger.status, 201);
  return { jobId: created.json.job_id, runId: trigger.json.run_id };
}

/** A triggered run of a job retried after 30 s (±20 %), leased and failed once: now in retry_wait. */
async function failedOnce(h: Harness, pool: string): Promise<string> {
  const created = await h.call('POST', '/v1/jobs', {
    body: cronJob({ pool, retry: { max_attempts: 3, base_s: 30, max_s: 60 } }),
  });
  await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`);
  const first = await h.call('POST', '/v1/workers/lease', { body: { pool } });
  const { run_id: runId, fencing_token: token } = first.json.runs[0];
  const failed = await h.call('POST', `/v1/runs/${runId}/complete`, { body: { fencing_token: token, status: 'failed', error: 'boom' } });
  assert.equal(failed.json.status, 'retry_wait');
  return runId;
}

function parkedWaiters(h: Harness): number {
  return (h.app as unknown as { leaseWaiters: LeaseWaiters }).leaseWaiters.waitingCount();
}

/** Yields to the event loop until `condition` holds (bounded, so a broken wait fails the test). */
async function waitFor(condition: () => boolean): Promise<void> {
  for (let turn = 0; turn < 10_000 && !condition(); turn++) await new Promise((resolve) => setImmediate(resolve));
  assert.ok(condition(), 'condition never held');
}

async function counterValue(h: Harness, name: string, labels: Record<string, string>): Promise<number> {
  const metric = await h.metrics.registry.getSingleMetric(name)?.get();
  const value = metric?.values.find((entry) => Object.entries(labels).every(([key, wanted]) => entry.labels[key] === wanted));
  return value?.value ?? 0;
}

describe('workers: lease, heartbeat, complete', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('leases a ready run, extends it and records its success with events', async () => {
    const { jobId, runId } = await triggeredRun(h);
    const lease = await h.call('POST', '/v1/workers/lease', { body: { pool: 'billing', max: 10, worker_id: 'w-1' } });
    assert.equal(lease.status, 200);
    assert.equal(lease.json.runs.length, 1);
    const leased = lease.json.runs[0];
    assert.equal(leased.run_id, runId);
    assert.equal(leased.job_id, jobId);
    assert.equal(leased.attempt, 1);
    assert.deepEqual(leased.payload, { invoice: 7 });
    assert.equal(typeof leased.fencing_token, 'string');
    assert.equal(leased.lease_expires_at, new Date(h.clock.nowMs() + 60_000).toISOString());

    const empty = await h.call('POST', '/v1/workers/lease', { body: { pool: 'billing' } });
    assert.deepEqual(empty.json, { runs: [] });

    await h.clock.advance(10_000);
    const beat = await h.call('POST', `/v1/runs/${runId}/heartbeat`, { body: { fencing_token: leased.fencing_token } });
    assert.equal(beat.status, 200);
    assert.equal(beat.json.lease_expires_at, new Date(h.clock.nowMs() + 60_000).toISOString());

    const staleBeat = await h.call('POST', `/v1/runs/${runId}/heartbeat`, { body: { fencing_token: '999999999' } });
    assert.equal(staleBeat.status, 409);
    assert.equal(staleBeat.json.error.code, 'stale_token');
    const staleDone = await h.call('POST', `/v1/runs/${runId}/complete`, {
      body: { fencing_token: '999999999', status: 'succeeded' },
    });
    assert.equal(staleDone.status, 409);
    assert.equal(staleDone.json.error.code, 'stale_token');
    assert.equal((await h.call('GET', `/v1/runs/${runId}`)).json.status, 'running', 'a stale completion changes nothing');
    assert.equal(await counterValue(h, 'tickler_worker_stale_token_total', { call: 'complete' }), 1);
    assert.equal(await counterValue(h, 'tickler_worker_stale_token_total', { call: 'heartbeat' }), 1);

    const done = await h.call('POST', `/v1/runs/${runId}/complete`, {
      body: { fencing_token: leased.fencing_token, status: 'succeeded', result: { rows: 3 } },
    });
    assert.equal(done.status, 200);
    assert.equal(done.json.status, 'succeeded');
    assert.equal(await counterValue(h, 'tickler_attempts_total', { outcome: 'succeeded' }), 1);

    const run = await h.call('GET', `/v1/runs/${runId}`);
    assert.equal(run.status, 200);
    assert.equal(run.json.status, 'succeeded');
    assert.deepEqual(run.json.result, { rows: 3 });
    assert.equal(run.json.finished_at, new Date(h.clock.nowMs()).toISOString());
    const types = run.json.events.map((event: { type: string }) => event.type);
    assert.ok(types.includes('leased') && types.includes('succeeded'), types.join(','));
    for (const event of run.json.events) assert.match(event.at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);

    const again = await h.call('POST', `/v1/runs/${runId}/complete`, { body: { fencing_token: leased.fencing_token, status: 'failed' } });
    assert.equal(again.status, 409, 'a second completion is not accepted');
  });

  it('sends a permanent failure to the DLQ and replays it under the same run_id', async () => {
    const { runId } = await triggeredRun(h, 'dlq-pool');
    const lease = await h.call('POST', '/v1/workers/lease', { body: { pool: 'dlq-pool' } });
    const token = lease.json.runs[0].fencing_token;
    const failed = await h.call('POST', `/v1/runs/${runId}/complete`, {
      body: { fencing_token: token, status: 'failed_permanent', error: 'bad invoice' },
    });
    assert.equal(failed.status, 200);
    assert.equal(failed.json.status, 'dead');
    const dlq = await h.call('GET', '/v1/dlq?pool=dlq-pool');
    assert.deepEqual(dlq.json.items.map((run: { run_id: string }) => run.run_id), [runId]);
    assert.equal(dlq.json.items[0].last_error, 'bad invoice');
    const otherPool = await h.call('GET', '/v1/dlq?pool=billing');
    assert.deepEqual(otherPool.json.items, []);

    const replay = await h.call('POST', `/v1/runs/${runId}/replay`);
    assert.equal(replay.status, 200);
    assert.equal(replay.json.run_id, runId);
    assert.equal(replay.json.status, 'ready');
    const replayAgain = await h.call('POST', `/v1/runs/${runId}/replay`, { body: {} });
    assert.equal(replayAgain.status, 409);
    assert.equal(replayAgain.json.error.code, 'invalid_state');
    const relet = await h.call('POST', '/v1/workers/lease', { body: { pool: 'dlq-pool' } });
    assert.equal(relet.json.runs[0].attempt, 2, 'the attempt number keeps counting');
  });

  it('lists the team\'s runs by status and time window', async () => {
    const all = await h.call('GET', '/v1/runs');
    assert.equal(all.status, 200);
    assert.ok(all.json.items.length >= 2);
    const succeeded = await h.call('GET', '/v1/runs?status=succeeded');
    assert.ok(succeeded.json.items.every((run: { status: string }) => run.status === 'succeeded'));
    assert.equal(succeeded.json.items.length, 1);
    const future = await h.call('GET', `/v1/runs?since=${new Date(h.clock.nowMs() + 1000).toISOString()}`);
    assert.deepEqual(future.json.items, []);
    const badSince = await h.call('GET', '/v1/runs?since=yesterday');
    assert.equal(badSince.status, 400);
    assert.equal(badSince.json.error.field, 'since');
    const unknownRun = await h.call('GET', '/v1/runs/00000000000000000000000000000000');
    assert.equal(unknownRun.status, 404);
  });
});

describe('workers: a run replaced by the overlap policy', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('answers 409 cancelled to the heartbeat and completion of the replaced attempt', async () => {
    const created = await h.call('POST', '/v1/jobs', {
      body: cronJob({ pool: 'replace', overlap: 'replace', schedule: { cron: '0 * * * *' }, tolerance_s: 0 }),
    });
    const jobId = created.json.job_id;
    await h.call('POST', `/v1/jobs/${jobId}/trigger`);
    const lease = await h.call('POST', '/v1/workers/lease', { body: { pool: 'replace' } });
    const { run_id: runId, fencing_token: token } = lease.json.runs[0];

    // Fire the job's pending timer as a scheduler would: the next occurrence replaces the running one.
    await h.clock.advance(3_600_000);
    const [timer] = await h.store.loadTimers({ shards: [shardOfJob(jobId)], untilMs: h.clock.nowMs() + 1, limit: 10 });
    assert.ok(timer !== undefined, 'the job has a pending timer');
    const [shardLease] = await h.store.acquireShardLeases('test-node', [timer.shard], 10_000, h.clock.nowMs());
    const [result] = await h.store.dispatch([{
      shard: timer.shard, shardToken: shardLease!.token, timerId: timer.timerId, jobId,
      occurrences: [{ scheduledAtMs: timer.scheduledAtMs, fireAtMs: timer.fireAtMs, status: 'ready' }], nextTimer: null,
    }], h.clock.nowMs());
    assert.equal(result?.kind, 'dispatched');

    const beat = await h.call('POST', `/v1/runs/${runId}/heartbeat`, { body: { fencing_token: token } });
    assert.equal(beat.status, 409);
    assert.equal(beat.json.error.code, 'cancelled');
    const done = await h.call('POST', `/v1/runs/${runId}/complete`, { body: { fencing_token: token, status: 'succeeded' } });
    assert.equal(done.status, 409);
    assert.equal(done.json.error.code, 'cancelled');
    assert.equal((await h.call('GET', `/v1/runs/${runId}`)).json.status, 'cancelled');
  });
});

describe('workers: long-poll', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('answers a waiting worker as soon as a run becomes ready', async () => {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob({ pool: 'poll' }) });
    const waiting = h.call('POST', '/v1/workers/lease', { body: { pool: 'poll', wait_s: 30 } });
    // The waiter is parked before the run exists; the trigger's onRunsReady wakes it.
    await waitFor(() => parkedWaiters(h) === 1);
    const startedMs = performance.now();
    const trigger = await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`);
    const answer = await waiting;
    const waitedMs = performance.now() - startedMs;
    assert.equal(answer.status, 200);
    assert.equal(answer.json.runs.length, 1);
    assert.equal(answer.json.runs[0].run_id, trigger.json.run_id);
    assert.ok(waitedMs < 1000, `answered after ${waitedMs} ms`);
  });

  it('answers a parked worker from the dispatch itself, without a lease transaction of its own', async () => {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob({ pool: 'inline' }) });
    const waiting = h.call('POST', '/v1/workers/lease', { body: { pool: 'inline', max: 5, wait_s: 30 } });
    await waitFor(() => parkedWaiters(h) === 1);
    const store = h.store as SqliteStore;
    const job = (await store.getJob(null, created.json.job_id))!;
    const transactionsBefore = store.groupCommitStats.transactions;
    const { runId } = await firePending(store, job, h.clock.nowMs());
    const answer = await waiting;
    assert.deepEqual(answer.json.runs.map((run: { run_id: string }) => run.run_id), [runId]);
    // The shard grant and the dispatch, which leased the run to the waiter.
    assert.equal(store.groupCommitStats.transactions - transactionsBefore, 2);
    assert.equal(parkedWaiters(h), 0);
  });

  it('wakes a waiter when a retry comes due under the virtual clock', async () => {
    const runId = await failedOnce(h, 'retry');

    const waiting = h.call('POST', '/v1/workers/lease', { body: { pool: 'retry', wait_s: 30 } });
    // Parked, and its wake-up armed on the clock at the retry's ready_at.
    await waitFor(() => parkedWaiters(h) === 1 && h.clock.pendingTimerCount() === 1);
    await h.clock.advance(40_000); // 30 s × uniform(0.8, 1.2) at most 36 s
    const answer = await waiting;
    assert.equal(answer.json.runs.length, 1);
    assert.equal(answer.json.runs[0].run_id, runId);
    assert.equal(answer.json.runs[0].attempt, 2);
  });

  it('wakes a waiter parked before the failure when the retry comes due, not at its wait_s', async () => {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob({ pool: 'parked-first', retry: { max_attempts: 3, base_s: 1 } }) });
    await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`);
    const first = await h.call('POST', '/v1/workers/lease', { body: { pool: 'parked-first' } });
    const { run_id: runId, fencing_token: token } = first.json.runs[0];
    // The worker's next lease parks while its completion is in flight: nothing is ready yet.
    const waiting = h.call('POST', '/v1/workers/lease', { body: { pool: 'parked-first', wait_s: 20 } });
    await waitFor(() => parkedWaiters(h) === 1);
    const failed = await h.call('POST', `/v1/runs/${runId}/complete`, { body: { fencing_token: token, status: 'failed', error: 'boom' } });
    assert.equal(failed.json.status, 'retry_wait');
    const readyAtMs = Date.parse(failed.json.ready_at);
    // The failure's announcement armed the waiter's wake-up at the retry's ready time.
    await waitFor(() => h.clock.pendingTimerCount() === 1);
    await h.clock.advance(readyAtMs - h.clock.nowMs() - 1);
    assert.equal(parkedWaiters(h), 1, 'not before the ready time');
    await h.clock.advance(1);
    const answer = await waiting;
    assert.equal(answer.json.runs.length, 1, 'answered with the retry, not empty at wait_s');
    assert.equal(answer.json.runs[0].run_id, runId);
    assert.equal(answer.json.runs[0].attempt, 2);
  });

  it('serves a waiter with ahead_ms that much before a retry is ready, with the ready time and a lease counted from it', async () => {
    const runId = await failedOnce(h, 'ahead');
    const readyAtMs = Date.parse((await h.call('GET', `/v1/runs/${runId}`)).json.ready_at);
    assert.ok(readyAtMs > h.clock.nowMs());

    const waiting = h.call('POST', '/v1/workers/lease', { body: { pool: 'ahead', wait_s: 30, ahead_ms: 1_000 } });
    await waitFor(() => parkedWaiters(h) === 1 && h.clock.pendingTimerCount() === 1);
    await h.clock.advance(readyAtMs - 1_000 - h.clock.nowMs() - 1);
    assert.equal(parkedWaiters(h), 1, 'still parked 1,001 ms before the ready time');
    await h.clock.advance(1);
    const answer = await waiting;
    assert.equal(answer.json.runs.length, 1);
    const leased = answer.json.runs[0];
    assert.equal(leased.run_id, runId);
    assert.equal(leased.ready_at, new Date(readyAtMs).toISOString());
    assert.equal(leased.lease_expires_at, new Date(readyAtMs + 60_000).toISOString());
  });

  it('serves a waiter leasing ahead when a waiter parked before it, leasing only ready runs, finds nothing', async () => {
    const runId = await failedOnce(h, 'behind');
    const readyAtMs = Date.parse((await h.call('GET', `/v1/runs/${runId}`)).json.ready_at);
    // A worker's slot lease (ready runs only) parks first, its hold lease (ahead_ms) behind it.
    const readyOnly = h.call('POST', '/v1/workers/lease', { body: { pool: 'behind', wait_s: 30 } });
    await waitFor(() => parkedWaiters(h) === 1);
    const ahead = h.call('POST', '/v1/workers/lease', { body: { pool: 'behind', wait_s: 30, ahead_ms: 1_000 } });
    await waitFor(() => parkedWaiters(h) === 2);
    await h.clock.advance(readyAtMs - 1_000 - h.clock.nowMs());
    const answer = await ahead;
    assert.deepEqual(answer.json.runs.map((run: { run_id: string }) => run.run_id), [runId],
      'the first waiter\'s empty answer says nothing of runs within 1,000 ms');
    assert.equal(parkedWaiters(h), 1, 'the ready-only waiter still parked');
    await h.clock.advance(1_000);
    assert.equal(parkedWaiters(h), 1, 'the run was leased ahead: nothing for it at the ready time');
    const created = await h.call('POST', '/v1/jobs', { body: cronJob({ pool: 'behind' }) });
    const triggered = await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`);
    assert.deepEqual((await readyOnly).json.runs.map((run: { run_id: string }) => run.run_id), [triggered.json.run_id]);
  });

  it('with max_ready, answers at most that many ready runs and fills the rest of max with runs ready within ahead_ms', async () => {
    const retryId = await failedOnce(h, 'mixed');
    const readyIds: string[] = [];
    for (let index = 0; index < 2; index++) {
      const created = await h.call('POST', '/v1/jobs', { body: cronJob({ pool: 'mixed' }) });
      readyIds.push((await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`)).json.run_id);
    }
    // The retry is ready 24–36 s after its failure (30 s × 0.8–1.2).
    const answer = await h.call('POST', '/v1/workers/lease', { body: { pool: 'mixed', max: 3, max_ready: 1, ahead_ms: 10_000 } });
    assert.equal(answer.status, 200);
    const runIds = answer.json.runs.map((run: { run_id: string }) => run.run_id);
    assert.equal(runIds.length, 1, 'one ready run; the retry is further off than 10 s');
    assert.ok(readyIds.includes(runIds[0]));
    // 26 s on, the retry is ready or within 10 s of it: as a ready run or a run ahead, it comes.
    await h.clock.advance(26_000);
    const later = await h.call('POST', '/v1/workers/lease', { body: { pool: 'mixed', max: 3, max_ready: 2, ahead_ms: 10_000 } });
    assert.equal(later.json.runs.length, 2, 'the other ready run and the retry');
    assert.deepEqual(later.json.runs.map((run: { run_id: string }) => run.run_id).sort(),
      [readyIds.find((id) => id !== runIds[0]), retryId].sort());
  });

  it('serves a waiter whose retry came due while its first pass ran', async () => {
    const created = await h.call('POST', '/v1/jobs', {
      body: cronJob({ pool: 'race', retry: { max_attempts: 3, base_s: 30, max_s: 60 } }),
    });
    await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`);
    const first = await h.call('POST', '/v1/workers/lease', { body: { pool: 'race' } });
    const { run_id: runId, fencing_token: token } = first.json.runs[0];
    await h.call('POST', `/v1/runs/${runId}/complete`, { body: { fencing_token: token, status: 'failed' } });
    // Time moves before the waiter's first pass can arm anything: no timer is left to fire.
    const advancing = h.clock.advance(40_000);
    const waiting = h.call('POST', '/v1/workers/lease', { body: { pool: 'race', wait_s: 5 } });
    await advancing;
    const answer = await waiting;
    assert.equal(answer.json.runs.length, 1);
    assert.equal(answer.json.runs[0].attempt, 2);
  });

  it('answers [] when wait_s runs out, in real time', async () => {
    const startedMs = performance.now();
    const answer = await h.call('POST', '/v1/workers/lease', { body: { pool: 'idle', wait_s: 0.2 } });
    const waitedMs = performance.now() - startedMs;
    assert.deepEqual(answer.json, { runs: [] });
    assert.ok(waitedMs >= 150 && waitedMs < 2000, `waited ${waitedMs} ms`);
  });

  it('serves several waiters of one pool, each run to one of them', async () => {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob({ pool: 'herd', overlap: 'allow' }) });
    const waiters = Array.from({ length: 3 }, () => h.call('POST', '/v1/workers/lease', { body: { pool: 'herd', wait_s: 5 } }));
    await waitFor(() => parkedWaiters(h) === 3);
    for (let index = 0; index < 3; index++) {
      await h.clock.advance(1000); // triggers at distinct instants have distinct run ids
      await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`);
    }
    const answers = await Promise.all(waiters);
    const runIds = answers.flatMap((answer) => answer.json.runs.map((run: { run_id: string }) => run.run_id));
    assert.equal(runIds.length, 3);
    assert.equal(new Set(runIds).size, 3);
  });
});

describe('workers: shutdown', () => {
  it('releases a long-poll on a real socket at once when the server closes', async () => {
    const h = await startHarness();
    const address = await h.app.listen({ host: '127.0.0.1', port: 0 });
    const waiting = fetch(`${address}/v1/workers/lease`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ pool: 'socket', wait_s: 30 }),
    });
    await waitFor(() => parkedWaiters(h) === 1);
    const startedMs = performance.now();
    await h.close();
    const answer = await waiting;
    assert.ok(performance.now() - startedMs < 3000, 'close did not wait for wait_s');
    assert.equal(answer.status, 200);
    assert.deepEqual(await answer.json(), { runs: [] });
  });

  it('stops waiting for a worker that went away mid long-poll, and only then', async () => {
    const h = await startHarness();
    try {
      const address = await h.app.listen({ host: '127.0.0.1', port: 0 });
      const lease = (signal?: AbortSignal) => fetch(`${address}/v1/workers/lease`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ pool: 'gone', wait_s: 30 }),
        ...(signal === undefined ? {} : { signal }),
      });
      const worker = new AbortController();
      const abandoned = lease(worker.signal);
      await waitFor(() => parkedWaiters(h) === 1);
      worker.abort();
      await assert.rejects(abandoned);
      await waitFor(() => parkedWaiters(h) === 0);
      // A long-poll answered normally is not counted as gone: the next one parks and is served.
      const created = await h.call('POST', '/v1/jobs', { body: cronJob({ pool: 'gone' }) });
      const waiting = lease();
      await waitFor(() => parkedWaiters(h) === 1);
      await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`);
      const answer = await waiting;
      assert.equal(((await answer.json()) as { runs: unknown[] }).runs.length, 1);
    } finally {
      await h.close();
    }
  });

  it('releases waiting workers when the app closes', async () => {
    const h = await startHarness();
    const waiting = h.call('POST', '/v1/workers/lease', { body: { pool: 'closing', wait_s: 30 } });
    await waitFor(() => parkedWaiters(h) === 1);
    const startedMs = performance.now();
    await h.close();
    const answer = await waiting;
    assert.ok(performance.now() - startedMs < 5000);
    assert.ok(answer.status === 200 || answer.status === 503, `status ${answer.status}`);
    if (answer.status === 200) assert.deepEqual(answer.json, { runs: [] });
  });
});
