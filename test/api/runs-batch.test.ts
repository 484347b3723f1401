// The worker batch routes (extensions of API.md, see docs/API.md): POST /v1/runs:complete and
// POST /v1/runs:heartbeat. Each item is fenced and answers for itself, in order; the whole
// batch is one group commit.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cronJob, startHarness, type Harness } from './harness.js';
import { shardOf } from '../../src/domain/identity.js';
import type { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import * as limits from '../../src/limits.js';

interface Leased { run_id: string; fencing_token: string }

/** Creates `count` jobs in `pool`, triggers each, and leases the runs. */
async function leasedRuns(h: Harness, pool: string, count: number, key?: string): Promise<Leased[]> {
  for (let index = 0; index < count; index++) {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob({ pool }), ...(key === undefined ? {} : { key }) });
    assert.equal(created.status, 201);
    const trigger = await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`, key === undefined ? {} : { key });
    assert.equal(trigger.status, 201);
  }
  const lease = await h.call('POST', '/v1/workers/lease', { body: { pool, max: count }, ...(key === undefined ? {} : { key }) });
  assert.equal(lease.status, 200);
  assert.equal(lease.json.runs.length, count);
  return lease.json.runs as Leased[];
}

function succeeded(run: Leased, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { run_id: run.run_id, fencing_token: run.fencing_token, status: 'succeeded', ...extra };
}

describe('POST /v1/runs:complete', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('records every outcome of a batch in one transaction, answering each item in order', async () => {
    const runs = await leasedRuns(h, 'batch-ok', 3);
    const before = (h.store as SqliteStore).groupCommitStats;
    const answer = await h.call('POST', '/v1/runs:complete', {
      body: {
        completions: [
          succeeded(runs[2]!, { result: { rows: 3 } }),
          { run_id: runs[0]!.run_id, fencing_token: runs[0]!.fencing_token, status: 'failed', error: 'disk full' },
          { run_id: runs[1]!.run_id, fencing_token: runs[1]!.fencing_token, status: 'failed_permanent', error: null },
        ],
      },
    });
    assert.equal(answer.status, 200);
    const after = (h.store as SqliteStore).groupCommitStats;
    assert.equal(after.transactions - before.transactions, 1, 'one group commit for the batch');
    assert.deepEqual(answer.json.results.map((result: { status: number; run: { run_id: string; status: string } }) =>
      [result.status, result.run.run_id, result.run.status]), [
      [200, runs[2]!.run_id, 'succeeded'],
      [200, runs[0]!.run_id, 'retry_wait'],
      [200, runs[1]!.run_id, 'dead'],
    ]);
    assert.deepEqual(answer.json.results[0].run.result, { rows: 3 });
    assert.equal(answer.json.results[1].run.last_error, 'disk full');
    assert.equal((await h.call('GET', `/v1/runs/${runs[2]!.run_id}`)).json.status, 'succeeded');
  });

  it('answers the status alone with answer: status, and still answers each failed item its error', async () => {
    const runs = await leasedRuns(h, 'batch-brief', 2);
    const answer = await h.call('POST', '/v1/runs:complete', {
      body: { answer: 'status', completions: [succeeded(runs[0]!), succeeded(runs[1]!, { fencing_token: '999999999' })] },
    });
    assert.equal(answer.status, 200);
    assert.deepEqual(answer.json.results[0], { status: 200 });
    assert.equal(answer.json.results[1].status, 409);
    assert.equal(answer.json.results[1].error.code, 'stale_token');
    assert.equal((await h.call('GET', `/v1/runs/${runs[0]!.run_id}`)).json.status, 'succeeded');
    assert.equal((await h.call('GET', `/v1/runs/${runs[1]!.run_id}`)).json.status, 'running');
  });

  it('rejects an unknown answer form as a whole request, changing nothing', async () => {
    const runs = await leasedRuns(h, 'batch-bad-answer', 1);
    const answer = await h.call('POST', '/v1/runs:complete', { body: { answer: 'brief', completions: [succeeded(runs[0]!)] } });
    assert.equal(answer.status, 400);
    assert.equal(answer.json.error.code, 'invalid_request');
    assert.equal(answer.json.error.field, 'answer');
    assert.equal((await h.call('GET', `/v1/runs/${runs[0]!.run_id}`)).json.status, 'running');
  });

  it('fences each item alone: stale, unknown, malformed and oversized items fail without touching the others', async () => {
    const runs = await leasedRuns(h, 'batch-mixed', 2);
    const answer = await h.call('POST', '/v1/runs:complete', {
      body: {
        completions: [
          { run_id: runs[0]!.run_id, fencing_token: '999999999', status: 'succeeded' },
          succeeded(runs[1]!),
          succeeded({ run_id: 'no-such-run', fencing_token: '1' }),
          succeeded({ run_id: '../etc', fencing_token: '1' }),
          { run_id: runs[0]!.run_id, fencing_token: runs[0]!.fencing_token, status: 'done' },
          { run_id: runs[0]!.run_id, status: 'succeeded' },
          succeeded(runs[0]!, { extra: 1 }),
          'not an object',
          succeeded(runs[0]!, { result: { blob: 'x'.repeat(limits.resultBytesMax) } }),
        ],
      },
    });
    assert.equal(answer.status, 200);
    const summary = answer.json.results.map((result: { status: number; error?: { code: string; field?: string } }) =>
      [result.status, result.error?.code ?? null, result.error?.field ?? null]);
    assert.deepEqual(summary, [
      [409, 'stale_token', 'fencing_token'],
      [200, null, null],
      [404, 'not_found', null],
      [404, 'not_found', null],
      [400, 'invalid_request', 'status'],
      [400, 'invalid_request', 'fencing_token'],
      [400, 'invalid_request', 'extra'],
      [400, 'invalid_request', null],
      [413, 'payload_too_large', 'result'],
    ]);
    assert.equal((await h.call('GET', `/v1/runs/${runs[0]!.run_id}`)).json.status, 'running', 'failed items change nothing');
    assert.equal((await h.call('GET', `/v1/runs/${runs[1]!.run_id}`)).json.status, 'succeeded');
  });

  it('accepts one attempt\'s completion once when a batch carries it twice', async () => {
    const [run] = await leasedRuns(h, 'batch-twice', 1);
    const answer = await h.call('POST', '/v1/runs:complete', {
      body: { completions: [succeeded(run!), { ...succeeded(run!), status: 'failed', error: 'late' }] },
    });
    assert.deepEqual(answer.json.results.map((result: { status: number }) => result.status), [200, 409]);
    assert.equal(answer.json.results[1].error.code, 'stale_token');
    const stored = await h.call('GET', `/v1/runs/${run!.run_id}`);
    assert.equal(stored.json.status, 'succeeded');
    assert.equal(stored.json.events.filter((event: { type: string }) => event.type === 'succeeded').length, 1);
  });

  it('answers 409 cancelled for an attempt replaced by the next occurrence', async () => {
    const created = await h.call('POST', '/v1/jobs', {
      body: cronJob({ pool: 'batch-replace', overlap: 'replace', schedule: { cron: '0 * * * *' }, tolerance_s: 0 }),
    });
    const jobId = created.json.job_id;
    await h.call('POST', `/v1/jobs/${jobId}/trigger`);
    const lease = await h.call('POST', '/v1/workers/lease', { body: { pool: 'batch-replace' } });
    const run = lease.json.runs[0] as Leased;
    await h.clock.advance(3_600_000);
    const [timer] = await h.store.loadTimers({ shards: [shardOf(jobId)], untilMs: h.clock.nowMs() + 1, limit: 10 });
    assert.ok(timer !== undefined);
    const [shardLease] = await h.store.acquireShardLeases('test-node', [timer.shard], 10_000, h.clock.nowMs());
    await h.store.dispatch([{
      shard: timer.shard, shardToken: shardLease!.token, timerId: timer.timerId, jobId,
      occurrences: [{ scheduledAtMs: timer.scheduledAtMs, fireAtMs: timer.fireAtMs, status: 'ready' }], nextTimer: null,
    }], h.clock.nowMs());
    const beats = await h.call('POST', '/v1/runs:heartbeat', {
      body: { heartbeats: [{ run_id: run.run_id, fencing_token: run.fencing_token }] },
    });
    assert.deepEqual(beats.json.results.map((result: { status: number; error: { code: string } }) => [result.status, result.error.code]),
      [[409, 'cancelled']]);
    const answer = await h.call('POST', '/v1/runs:complete', { body: { completions: [succeeded(run)] } });
    assert.deepEqual(answer.json.results.map((result: { status: number; error: { code: string } }) => [result.status, result.error.code]),
      [[409, 'cancelled']]);
  });

  it('refuses a malformed batch as a whole', async () => {
    const over = Array.from({ length: limits.leaseBatchMax + 1 }, () => succeeded({ run_id: 'r', fencing_token: '1' }));
    const cases: [unknown, number, string][] = [
      [{ completions: [] }, 400, 'invalid_request'],
      [{ completions: over }, 400, 'invalid_request'],
      [{}, 400, 'invalid_request'],
      [{ completions: [], extra: true }, 400, 'invalid_request'],
      [[succeeded({ run_id: 'r', fencing_token: '1' })], 400, 'invalid_request'],
    ];
    for (const [body, status, code] of cases) {
      const answer = await h.call('POST', '/v1/runs:complete', { body });
      assert.equal(answer.status, status, JSON.stringify(body).slice(0, 80));
      assert.equal(answer.json.error.code, code);
    }
    const garbled = await h.call('POST', '/v1/runs:complete', { raw: '{"completions": [', headers: { 'content-type': 'application/json' } });
    assert.equal(garbled.status, 400);
    assert.equal(garbled.json.error.code, 'invalid_json');
  });

  it('takes up to 1,000 items in one request', async () => {
    const items = Array.from({ length: limits.leaseBatchMax }, (_, index) => succeeded({ run_id: `unknown-${index}`, fencing_token: '1' }));
    const answer = await h.call('POST', '/v1/runs:complete', { body: { completions: items } });
    assert.equal(answer.status, 200);
    assert.equal(answer.json.results.length, limits.leaseBatchMax);
    assert.ok(answer.json.results.every((result: { status: number }) => result.status === 404));
  });
});

describe('POST /v1/runs:heartbeat', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('extends each lease it holds the token of, and fails the others alone', async () => {
    const runs = await leasedRuns(h, 'beats', 2);
    await h.clock.advance(10_000);
    const answer = await h.call('POST', '/v1/runs:heartbeat', {
      body: {
        heartbeats: [
          { run_id: runs[1]!.run_id, fencing_token: runs[1]!.fencing_token },
          { run_id: runs[0]!.run_id, fencing_token: '999999999' },
          { run_id: 'no-such-run', fencing_token: '1' },
          { run_id: runs[0]!.run_id },
        ],
      },
    });
    assert.equal(answer.status, 200);
    const expiry = new Date(h.clock.nowMs() + 60_000).toISOString();
    assert.deepEqual(answer.json.results, [
      { status: 200, lease_expires_at: expiry },
      answer.json.results[1],
      answer.json.results[2],
      answer.json.results[3],
    ]);
    assert.deepEqual(answer.json.results.slice(1).map((result: { status: number; error: { code: string } }) =>
      [result.status, result.error.code]), [[409, 'stale_token'], [404, 'not_found'], [400, 'invalid_request']]);
  });

  it('refuses an empty or unknown-field batch as a whole', async () => {
    for (const body of [{ heartbeats: [] }, { heartbeats: [{ run_id: 'r', fencing_token: '1' }], more: 1 }]) {
      const answer = await h.call('POST', '/v1/runs:heartbeat', { body });
      assert.equal(answer.status, 400);
      assert.equal(answer.json.error.code, 'invalid_request');
    }
  });
});

describe('worker batch routes: teams and outages', () => {
  it('answers another team\'s run 404 per item, exactly as an unknown one, and needs a key', async () => {
    const h = await startHarness({ apiKeys: new Map([['key-a', 'team-a'], ['key-b', 'team-b']]) });
    try {
      const [run] = await leasedRuns(h, 'teams', 1, 'key-a');
      const anonymous = await h.call('POST', '/v1/runs:complete', { body: { completions: [succeeded(run!)] } });
      assert.equal(anonymous.status, 401);
      const other = await h.call('POST', '/v1/runs:complete', { body: { completions: [succeeded(run!)] }, key: 'key-b' });
      assert.equal(other.status, 200);
      assert.deepEqual(other.json.results.map((result: { status: number; error: { code: string } }) => [result.status, result.error.code]),
        [[404, 'not_found']]);
      const own = await h.call('POST', '/v1/runs:complete', { body: { completions: [succeeded(run!)] }, key: 'key-a' });
      assert.equal(own.json.results[0].status, 200);
    } finally {
      await h.close();
    }
  });

  it('answers a store outage 503 for the items it hit, and still records the rest', async () => {
    let failRunId = '';
    const h = await startHarness({
      wrapStore: (store) => new Proxy(store, {
        get(target, property, receiver): unknown {
          if (property === 'completeRun') {
            const completeRun: Store['completeRun'] = (request) => request.runId === failRunId
              ? Promise.reject(Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' }))
              : target.completeRun(request);
            return completeRun;
          }
          const value: unknown = Reflect.get(target, property, receiver);
          return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
        },
      }),
    });
    try {
      const runs = await leasedRuns(h, 'outage', 2);
      failRunId = runs[0]!.run_id;
      const answer = await h.call('POST', '/v1/runs:complete', { body: { completions: runs.map((run) => succeeded(run)) } });
      assert.equal(answer.status, 200);
      assert.deepEqual(answer.json.results.map((result: { status: number; error?: { code: string } }) =>
        [result.status, result.error?.code ?? null]), [[503, 'unavailable'], [200, null]]);
    } finally {
      await h.close();
    }
  });
});
