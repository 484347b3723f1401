// The capacity routes (API.md "Capacity") through `inject`: resource caps, pool pause and
// resume for a team and for an admin, lane dispatch caps, the noisy neighbours, who may call
// them, their bad input, the run's `waiting_for`, and the metrics they feed.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cronJob, startHarness, startMs, type Harness } from './harness.js';
import { Metrics } from '../../src/obs/metrics.js';
import type { Logger } from '../../src/obs/log.js';
import { DispatchShares } from '../../src/service/dispatch-shares.js';

const keys = new Map([['k-admin', 'admin'], ['k-a', 'team-a'], ['k-b', 'team-b']]);

async function triggered(h: Harness, key: string, body: Record<string, unknown> = {}): Promise<string> {
  const created = await h.call('POST', '/v1/jobs', { key, body: cronJob({ pool: 'shared', ...body }) });
  assert.equal(created.status, 201, created.text);
  const run = await h.call('POST', `/v1/jobs/${created.json.job_id}/trigger`, { key });
  assert.equal(run.status, 201);
  return run.json.run_id as string;
}

async function lease(h: Harness, key: string, max = 10): Promise<{ run_id: string; fencing_token: string; team: string }[]> {
  const answer = await h.call('POST', '/v1/workers/lease', { key, body: { pool: 'shared', max } });
  assert.equal(answer.status, 200, answer.text);
  return answer.json.runs;
}

void describe('capacity routes', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ apiKeys: keys });
  });
  after(() => h.close());

  void it('caps a resource: the run over it stays ready and says which resource holds it', async () => {
    assert.equal((await h.call('PUT', '/v1/resources/db', { key: 'k-a', body: { max_concurrency: 1 } })).status, 403);
    const put = await h.call('PUT', '/v1/resources/db', { key: 'k-admin', body: { max_concurrency: 1 } });
    assert.deepEqual(put.json, { name: 'db', max_concurrency: 1, in_use: 0 });
    const first = await triggered(h, 'k-a', { resources: ['db'] });
    const second = await triggered(h, 'k-a', { resources: ['db'] });
    const leased = await lease(h, 'k-a');
    assert.equal(leased.length, 1);
    const waiting = leased[0]!.run_id === first ? second : first;
    const run = await h.call('GET', `/v1/runs/${waiting}`, { key: 'k-a' });
    assert.equal(run.json.status, 'ready');
    assert.deepEqual(run.json.waiting_for, { resource: 'db', max_concurrency: 1, in_use: 1 });
    const metrics = await h.call('GET', '/metrics', { key: 'k-admin' });
    assert.match(metrics.text, /tickler_resource_in_use\{resource="db"\} 1/);
    assert.match(metrics.text, /tickler_ready_lag_seconds_count\{lane="P1",team="team-a"\} 1/);
    const done = await h.call('POST', `/v1/runs/${leased[0]!.run_id}/complete`,
      { key: 'k-a', body: { fencing_token: leased[0]!.fencing_token, status: 'succeeded' } });
    assert.equal(done.status, 200);
    assert.equal((await h.call('GET', `/v1/runs/${waiting}`, { key: 'k-a' })).json.waiting_for, undefined);
    assert.deepEqual((await lease(h, 'k-a')).map((run) => run.run_id), [waiting]);
    assert.deepEqual((await h.call('GET', '/v1/resources', { key: 'k-admin' })).json.items, [{ name: 'db', max_concurrency: 1, in_use: 1 }]);
    const deleted = await h.call('DELETE', '/v1/resources/db', { key: 'k-admin' });
    assert.deepEqual(deleted.json, { name: 'db', max_concurrency: null, in_use: 1 });
    assert.equal((await h.call('DELETE', '/v1/resources/db', { key: 'k-admin' })).json.error.code, 'not_found');
  });

  void it('refuses a bad cap with 400 and changes nothing', async () => {
    for (const body of [{ max_concurrency: 0 }, { max_concurrency: 1.5 }, { max_concurrency: '3' }, {}, { max_concurrency: 2, x: 1 }]) {
      const answer = await h.call('PUT', '/v1/resources/cache', { key: 'k-admin', body });
      assert.equal(answer.status, 400, JSON.stringify(body));
      assert.equal(answer.json.error.code, 'invalid_request');
    }
    assert.deepEqual((await h.call('GET', '/v1/resources/cache', { key: 'k-admin' })).json, { name: 'cache', max_concurrency: null, in_use: 0 });
    assert.equal((await h.call('PUT', '/v1/lanes/P9', { key: 'k-admin', body: { dispatch_per_s: 5 } })).status, 400);
    assert.equal((await h.call('PUT', '/v1/lanes/P1', { key: 'k-admin', body: { dispatch_per_s: -1 } })).status, 400);
    assert.equal((await h.call('POST', '/v1/pools/bad%0Apool/pause', { key: 'k-a' })).status, 400);
  });

  void it('pauses a team\'s runs in a pool, an admin every team\'s; resume leases again', async () => {
    const runA = await triggered(h, 'k-a');
    await triggered(h, 'k-b');
    const paused = await h.call('POST', '/v1/pools/shared/pause', { key: 'k-a' });
    assert.deepEqual(paused.json, { pool: 'shared', paused: true, team: 'team-a' });
    assert.equal((await h.call('POST', '/v1/pools/shared/pause?team=team-b', { key: 'k-a' })).status, 403);
    assert.deepEqual(await lease(h, 'k-a'), []);
    assert.deepEqual((await h.call('GET', `/v1/runs/${runA}`, { key: 'k-a' })).json.waiting_for, { pause: 'team' });
    assert.equal((await lease(h, 'k-b')).length, 1, 'another team goes on');
    await h.call('POST', '/v1/pools/shared/pause', { key: 'k-admin' });
    await h.call('POST', '/v1/pools/shared/resume', { key: 'k-a' });
    assert.deepEqual(await lease(h, 'k-a'), [], 'an admin\'s pause holds');
    assert.deepEqual((await h.call('GET', `/v1/runs/${runA}`, { key: 'k-a' })).json.waiting_for, { pause: 'pool' });
    const resumed = await h.call('POST', '/v1/pools/shared/resume', { key: 'k-admin' });
    assert.deepEqual(resumed.json, { pool: 'shared', paused: false, team: null });
    assert.deepEqual((await lease(h, 'k-a')).map((run) => run.run_id), [runA]);
  });

  void it('caps a lane\'s dispatches per second, and lists the caps and the noisy neighbours', async () => {
    assert.equal((await h.call('PUT', '/v1/lanes/P1', { key: 'k-a', body: { dispatch_per_s: 1 } })).status, 403);
    const put = await h.call('PUT', '/v1/lanes/P1', { key: 'k-admin', body: { dispatch_per_s: 1 } });
    assert.deepEqual(put.json, { lane: 'P1', dispatch_per_s: 1 });
    for (let index = 0; index < 3; index++) await triggered(h, 'k-a');
    assert.equal((await lease(h, 'k-a')).length, 1);
    assert.equal((await lease(h, 'k-a')).length, 0, 'the rest wait, ready');
    await h.call('POST', '/v1/clock/advance', { key: 'k-admin', body: { seconds: 2 } });
    assert.equal((await lease(h, 'k-a')).length, 1);
    const lanes = await h.call('GET', '/v1/lanes', { key: 'k-admin' });
    assert.deepEqual(lanes.json.items, [{ lane: 'P0', dispatch_per_s: null }, { lane: 'P1', dispatch_per_s: 1 }, { lane: 'P2', dispatch_per_s: null }]);
    await h.call('PUT', '/v1/lanes/P1', { key: 'k-admin', body: { dispatch_per_s: null } });
    const noisy = await h.call('GET', '/v1/ops/noisy-neighbours', { key: 'k-admin' });
    assert.deepEqual(noisy.json, { items: [] });
    assert.equal((await h.call('GET', '/v1/ops/noisy-neighbours', { key: 'k-a' })).status, 403);
  });
});

void describe('noisy neighbours', () => {
  void it('names a team over half of a shared lane for 10 minutes, logged once, and forgets it when it falls back', () => {
    const warnings: string[] = [];
    const metrics = new Metrics();
    const logger = { warn: (...args: unknown[]) => warnings.push(String(args[1])) } as unknown as Pick<Logger, 'warn'>;
    const shares = new DispatchShares(metrics, logger);
    const leases = (team: string, count: number) => Array.from({ length: count }, () => ({ lane: 'P1' as const, team }));
    for (let second = 0; second < 600; second += 5) shares.record('shared', [...leases('team-a', 3), ...leases('team-b', 1)], startMs + second * 1_000);
    assert.equal(warnings.length, 0, 'not before 10 minutes');
    shares.record('shared', [...leases('team-a', 3), ...leases('team-b', 1)], startMs + 611_000);
    assert.deepEqual(shares.noisy(startMs + 611_000).map((noisy) => [noisy.lane, noisy.team]), [['P1', 'team-a']]);
    for (let second = 612; second <= 700; second += 5) shares.record('shared', [...leases('team-a', 3), ...leases('team-b', 1)], startMs + second * 1_000);
    assert.equal(warnings.length, 1, 'logged once when it crossed');
    for (let second = 701; second <= 800; second += 5) shares.record('shared', [...leases('team-a', 1), ...leases('team-b', 3)], startMs + second * 1_000);
    assert.deepEqual(shares.noisy(startMs + 800_000), []);
  });
});
