// TicklerClient against a real HTTP server: paths, query strings, auth, bodies, and how
// error answers and missing answers become typed errors.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { TicklerClient } from '../../src/worker/client.js';
import { TicklerApiError, TicklerNetworkError } from '../../src/worker/errors.js';
import { FakeTicklerServer } from './fake-server.js';
import { startHarness } from '../api/harness.js';

const server = new FakeTicklerServer();
before(() => server.listen());
after(() => server.close());

function client(apiKey?: string): TicklerClient {
  return new TicklerClient({ baseUrl: `${server.url}/`, ...(apiKey === undefined ? {} : { apiKey }) });
}

test('routes, encoded ids, query strings without unset values, bearer auth, JSON bodies', async () => {
  server.routes.set('GET /v1/jobs/a%2F..%3B--', { status: 200, body: { job_id: 'a/..;--' } });
  server.routes.set('GET /v1/runs?status=dead&limit=5', { status: 200, body: { items: [], next_cursor: null } });
  server.routes.set('POST /v1/jobs:batch', { status: 200, body: { results: [] } });
  server.routes.set('DELETE /v1/jobs?key_prefix=tenant-7%2F', { status: 200, body: { cancelled: 3 } });
  const tickler = client('secret');
  assert.deepEqual(await tickler.getJob('a/..;--'), { job_id: 'a/..;--' });
  assert.deepEqual(await tickler.listRuns({ status: 'dead', limit: 5, pool: undefined }), { items: [], next_cursor: null });
  assert.deepEqual(await tickler.batchCreateJobs([{ schedule: { delay_s: 1 }, pool: 'p' }]), { results: [] });
  assert.deepEqual(await tickler.cancelJobsByKeyPrefix('tenant-7/'), { cancelled: 3 });
  const batch = server.requests.find((request) => request.path === '/v1/jobs:batch');
  assert.deepEqual(batch?.body, { jobs: [{ schedule: { delay_s: 1 }, pool: 'p' }] });
  assert.equal(batch?.headers.authorization, 'Bearer secret');
  assert.equal(batch?.headers['content-type'], 'application/json');
  const get = server.requests.find((request) => request.path.startsWith('/v1/jobs/a'));
  assert.equal(get?.headers['content-type'], undefined, 'no content type without a body');
});

test('body-less POSTs send {}', async () => {
  server.routes.set('POST /v1/jobs/j1/pause', { status: 200, body: { job_id: 'j1', state: 'paused' } });
  await client().pauseJob('j1');
  assert.deepEqual(server.requests.at(-1)?.body, {});
  assert.equal(server.requests.at(-1)?.headers.authorization, undefined);
});

test('an error answer becomes TicklerApiError with status, code, message and field', async () => {
  server.routes.set('POST /v1/jobs', {
    status: 400,
    body: { error: { code: 'invalid_schedule', message: 'step 0', field: 'schedule.cron' } },
  });
  await assert.rejects(client().createJob({ schedule: { cron: '*/0 * * * *' }, pool: 'p' }), (error: unknown) => {
    assert.ok(error instanceof TicklerApiError);
    assert.deepEqual([error.status, error.code, error.message, error.field, error.retryable],
      [400, 'invalid_schedule', 'step 0', 'schedule.cron', false]);
    return true;
  });
});

test('an answer that is not an error document still carries its status', async () => {
  server.routes.set('GET /readyz', { status: 503, body: ['not', 'an', 'error'] });
  await assert.rejects(client().readyz(), (error: unknown) => {
    assert.ok(error instanceof TicklerApiError);
    assert.deepEqual([error.status, error.code, error.retryable], [503, 'http_503', true]);
    return true;
  });
});

test('no answer at all becomes TicklerNetworkError', async () => {
  const closed = new TicklerClient({ baseUrl: 'http://127.0.0.1:1' });
  await assert.rejects(closed.healthz(), TicklerNetworkError);
});

test('a request longer than its timeout is a network error', async () => {
  // The fake holds lease requests until runs are offered: a long-poll that never answers.
  const tickler = client();
  await assert.rejects(tickler.leaseRuns({ pool: 'empty', max: 1, wait_s: 0 }, { timeoutMs: 50 }), TicklerNetworkError);
});

test('a connection cut before any answer is a network error, and the next request gets a fresh socket', async () => {
  server.routes.set('GET /v1/jobs/cut', 'destroy');
  server.routes.set('GET /v1/jobs/after-cut', { status: 200, body: { job_id: 'after-cut' } });
  const tickler = client();
  await assert.rejects(tickler.getJob('cut'), TicklerNetworkError);
  assert.deepEqual(await tickler.getJob('after-cut'), { job_id: 'after-cut' });
});

test('aborting a long-poll ends it at once as a network error', async () => {
  const tickler = client();
  const controller = new AbortController();
  const arrived = server.next<{ pool: string }>('lease', (lease) => lease.pool === 'never');
  const leasing = tickler.leaseRuns({ pool: 'never', max: 1, wait_s: 20 }, { signal: controller.signal });
  await arrived;
  const startedMs = performance.now();
  controller.abort(new Error('stopping'));
  await assert.rejects(leasing, (error: unknown) => error instanceof TicklerNetworkError && /stopping/.test(error.message));
  assert.ok(performance.now() - startedMs < 1_000, 'the abort does not wait for the long-poll');
});

test('a fetch passed in replaces the default transport', async () => {
  const seen: string[] = [];
  const tickler = new TicklerClient({
    baseUrl: 'http://tickler.invalid',
    fetch: async (url, init) => {
      seen.push(`${init?.method} ${String(url)}`);
      return new Response(JSON.stringify({ ok: true }), { status: 200, headers: { 'retry-after': '3' } });
    },
  });
  assert.deepEqual(await tickler.healthz(), { ok: true });
  assert.deepEqual(seen, ['GET http://tickler.invalid/healthz']);
});

test('a fetch passed in gets the request timeout as its signal', async () => {
  const tickler = new TicklerClient({
    baseUrl: 'http://tickler.invalid',
    // Never answers: only the signal can end it.
    fetch: (_url, init) => new Promise<Response>((_resolve, reject) => {
      init?.signal?.addEventListener('abort', () => reject(init.signal!.reason as Error));
    }),
  });
  await assert.rejects(tickler.healthz({ timeoutMs: 50 }),
    (error: unknown) => error instanceof TicklerNetworkError && /timeout/i.test(error.message));
});

test('batchCreateJobIds answers each accepted job\'s id alone, on a real server', async () => {
  const harness = await startHarness();
  try {
    const baseUrl = await harness.app.listen({ host: '127.0.0.1', port: 0 });
    const tickler = new TicklerClient({ baseUrl });
    const { results } = await tickler.batchCreateJobIds([
      { schedule: { delay_s: 60 }, pool: 'ids', payload: { n: 1 } },
      { schedule: { cron: 'not a cron' }, pool: 'ids' },
    ]);
    assert.equal(results.length, 2);
    const [created, bad] = results;
    assert.ok(created !== undefined && 'job_id' in created && created.status === 201);
    assert.deepEqual((await tickler.getJob(created.job_id)).payload, { n: 1 });
    assert.ok(bad !== undefined && 'error' in bad && bad.status === 400);
    assert.equal(bad.error.field, 'schedule.cron');
  } finally {
    await harness.close();
  }
});
