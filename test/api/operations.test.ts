import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cronJob, startHarness, startMs, type Harness } from './harness.js';

describe('operations', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('answers liveness and readiness', async () => {
    const health = await h.call('GET', '/healthz');
    assert.equal(health.status, 200);
    assert.deepEqual(health.json, { status: 'ok' });
    const ready = await h.call('GET', '/readyz');
    assert.equal(ready.status, 200);
    assert.equal(ready.json.ready, true);
  });

  it('serves Prometheus text counting creates and error codes', async () => {
    await h.call('POST', '/v1/jobs', { body: cronJob() });
    await h.call('GET', '/v1/jobs/j_0000000000000000000000000000');
    await h.call('POST', '/v1/jobs', { raw: '{' });
    const metrics = await h.call('GET', '/metrics');
    assert.equal(metrics.status, 200);
    assert.match(String(metrics.headers['content-type']), /^text\/plain/);
    assert.match(metrics.text, /^tickler_jobs_created_total\{team="default"\} 1$/m);
    assert.match(metrics.text, /^tickler_http_errors_total\{code="not_found"\} 1$/m);
    assert.match(metrics.text, /^tickler_http_errors_total\{code="invalid_json"\} 1$/m);
  });

  it('moves the virtual clock and answers once everything due has happened', async () => {
    const before = await h.call('GET', '/v1/clock');
    assert.deepEqual(before.json, { now: new Date(h.clock.nowMs()).toISOString() });
    let fired = false;
    h.clock.setTimer(h.clock.nowMs() + 1_800_000, () => {
      fired = true;
    });
    const advanced = await h.call('POST', '/v1/clock/advance', { body: { seconds: 3600 } });
    assert.equal(advanced.status, 200);
    assert.equal(advanced.json.now, new Date(Date.parse(before.json.now) + 3_600_000).toISOString());
    assert.ok(fired, 'a timer due within the hour ran before the answer');
    const negative = await h.call('POST', '/v1/clock/advance', { body: { seconds: -1 } });
    assert.equal(negative.status, 400);
    assert.equal(negative.json.error.field, 'seconds');
    const text = await h.call('POST', '/v1/clock/advance', { body: { seconds: '60' } });
    assert.equal(text.status, 400);
  });

  it('publishes the contract as OpenAPI 3.1 built from the route schemas', async () => {
    const answer = await h.call('GET', '/openapi.json');
    assert.equal(answer.status, 200);
    const document = answer.json;
    assert.equal(document.openapi, '3.1.0');
    const expected: [string, string][] = [
      ['/v1/jobs', 'post'], ['/v1/jobs', 'get'], ['/v1/jobs', 'delete'], ['/v1/jobs:batch', 'post'], ['/v1/jobs:cancel', 'post'],
      ['/v1/jobs/{job_id}', 'get'], ['/v1/jobs/{job_id}', 'patch'], ['/v1/jobs/{job_id}', 'delete'],
      ['/v1/jobs/{job_id}/pause', 'post'], ['/v1/jobs/{job_id}/resume', 'post'], ['/v1/jobs/{job_id}/trigger', 'post'],
      ['/v1/jobs/{job_id}/runs', 'get'], ['/v1/schedules/preview', 'get'], ['/v1/jobs:silent', 'get'],
      ['/v1/runs', 'get'], ['/v1/runs/{run_id}', 'get'], ['/v1/dlq', 'get'], ['/v1/runs/{run_id}/replay', 'post'],
      ['/v1/workers/lease', 'post'], ['/v1/runs/{run_id}/heartbeat', 'post'], ['/v1/runs/{run_id}/complete', 'post'],
      ['/metrics', 'get'], ['/healthz', 'get'], ['/readyz', 'get'], ['/v1/clock', 'get'], ['/v1/clock/advance', 'post'], ['/', 'get'],
    ];
    for (const [path, method] of expected) assert.ok(document.paths[path]?.[method], `${method} ${path}`);
    const create = document.paths['/v1/jobs'].post;
    const bodySchema = create.requestBody.content['application/json'].schema;
    assert.equal(bodySchema.additionalProperties, false);
    assert.deepEqual(bodySchema.required.sort(), ['pool', 'schedule']);
    assert.deepEqual(document.paths['/v1/jobs/{job_id}'].get.parameters.find((parameter: { in: string }) => parameter.in === 'path'),
      { name: 'job_id', in: 'path', required: true, schema: { type: 'string' } });
    assert.deepEqual(document.paths['/healthz'].get.security, [], 'public');
    assert.deepEqual(document.paths['/v1/jobs'].get.security, [{ bearer: [] }]);
  });
});

describe('operations without the virtual clock, and not ready', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({
      virtualClockRoutes: false,
      readiness: async () => ({ ready: false, detail: { shards_owned: 0 } }),
    });
  });
  after(async () => {
    await h.close();
  });

  it('answers 404 for the clock routes', async () => {
    for (const [method, url, body] of [['GET', '/v1/clock', undefined], ['POST', '/v1/clock/advance', { seconds: 60 }]] as const) {
      const answer = await h.call(method, url, { body });
      assert.equal(answer.status, 404);
      assert.equal(answer.json.error.code, 'not_found');
    }
    assert.equal(h.clock.nowMs(), startMs, 'time did not move');
  });

  it('answers 503 from /readyz with the detail', async () => {
    const answer = await h.call('GET', '/readyz');
    assert.equal(answer.status, 503);
    assert.deepEqual(answer.json, { ready: false, shards_owned: 0 });
  });
});

describe('process metrics', () => {
  it('keep the standard names that stock Node.js dashboards read', async () => {
    const { Metrics } = await import('../../src/obs/metrics.js');
    const text = await new Metrics({ defaultMetrics: true }).registry.metrics();
    for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_seconds',
      'nodejs_heap_size_used_bytes']) {
      assert.match(text, new RegExp(`^${name} `, 'm'), name);
    }
    assert.doesNotMatch(text, /tickler_process_/);
  });
});
