// TicklerClient with `coalesceCancels`: concurrent cancelJob calls share POST /v1/jobs:cancel
// requests against a real server on a real SQLite file, each caller answered as a single
// cancel would answer it; a server without the route (the HTTP fake) gets single cancels.
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import { TicklerClient } from '../../src/worker/client.js';
import { TicklerApiError } from '../../src/worker/errors.js';
import type { Job } from '../../src/worker/wire.js';
import { startHarness, type Harness } from '../api/harness.js';
import { FakeTicklerServer } from './fake-server.js';

const unknownJobId = 'j_000000000000nosuch00000000000';

describe('coalesced cancels on a real server', () => {
  let harness: Harness;
  let baseUrl: string;
  let requests: string[];
  let jobIds: string[];

  beforeEach(async () => {
    harness = await startHarness();
    baseUrl = await harness.app.listen({ host: '127.0.0.1', port: 0 });
    const { results } = await new TicklerClient({ baseUrl }).batchCreateJobIds(
      Array.from({ length: 30 }, (_, index) => ({ schedule: { delay_s: 900 }, pool: 'p', payload: { i: index } })));
    jobIds = results.map((result) => ('job_id' in result ? result.job_id : ''));
    requests = [];
    harness.app.server.on('request', (request: IncomingMessage) => {
      requests.push(`${request.method} ${request.url!.replace(/j_[0-9a-z]+/, 'ID')}`);
    });
  });

  afterEach(() => harness.close());

  test('concurrent cancels share one request; each caller gets its job as a single cancel answers it', async () => {
    const client = new TicklerClient({ baseUrl, coalesceCancels: true });
    const jobs = await Promise.all(jobIds.map((jobId) => client.cancelJob(jobId)));
    assert.deepEqual(jobs.map((job) => job.job_id), jobIds);
    assert.ok(jobs.every((job) => job.state === 'cancelled'));
    assert.deepEqual(requests, ['POST /v1/jobs:cancel']);
    const plain = new TicklerClient({ baseUrl });
    assert.deepEqual(await plain.cancelJob(jobIds[7]!), jobs[7], 'the same job as DELETE /v1/jobs/{id} answers');
  });

  test('an unknown id rejects only its caller, with the single route\'s 404; a cancel alone goes alone', async () => {
    const client = new TicklerClient({ baseUrl, coalesceCancels: true });
    const outcomes = await Promise.allSettled([client.cancelJob(jobIds[0]!), client.cancelJob(unknownJobId), client.cancelJob(jobIds[1]!)]);
    assert.deepEqual(outcomes.map((outcome) => outcome.status), ['fulfilled', 'rejected', 'fulfilled']);
    const error = (outcomes[1] as PromiseRejectedResult).reason as TicklerApiError;
    assert.ok(error instanceof TicklerApiError);
    assert.deepEqual([error.status, error.code], [404, 'not_found']);
    const single = await new TicklerClient({ baseUrl }).cancelJob(unknownJobId).catch((caught: TicklerApiError) => caught);
    assert.equal(error.message, (single as TicklerApiError).message);
    assert.equal((await client.cancelJob(jobIds[2]!)).state, 'cancelled');
    assert.deepEqual(requests, ['POST /v1/jobs:cancel', 'DELETE /v1/jobs/ID', 'DELETE /v1/jobs/ID']);
  });

  test('an id that is not a string (an untyped caller) goes alone and fails alone', async () => {
    const client = new TicklerClient({ baseUrl, coalesceCancels: true });
    const outcomes = await Promise.allSettled([client.cancelJob(jobIds[0]!), client.cancelJob(7 as unknown as string)]);
    assert.equal(outcomes[0].status, 'fulfilled');
    assert.equal(((outcomes[1] as PromiseRejectedResult).reason as TicklerApiError).status, 404);
    assert.deepEqual(requests.sort(), ['DELETE /v1/jobs/7', 'DELETE /v1/jobs/ID']);
  });

  test('cancelJobs and cancelJobsBriefly send one request of their own', async () => {
    const client = new TicklerClient({ baseUrl });
    const { results } = await client.cancelJobs([jobIds[0]!, unknownJobId]);
    assert.equal(results[0]?.status, 200);
    assert.equal(results[0] !== undefined && 'job' in results[0] ? results[0].job.state : null, 'cancelled');
    assert.equal(results[1]?.status, 404);
    const brief = await client.cancelJobsBriefly([jobIds[1]!]);
    assert.deepEqual(brief.results, [{ status: 200 }]);
    assert.deepEqual(requests, ['POST /v1/jobs:cancel', 'POST /v1/jobs:cancel']);
  });
});

describe('coalesced cancels against a server without the route', () => {
  const server = new FakeTicklerServer();
  before(() => server.listen());
  after(() => server.close());

  test('a batch refused whole as bad input (400) sends each alone, so only an item at fault fails', async () => {
    server.requests.length = 0;
    server.routes.set('POST /v1/jobs:cancel', { status: 400, body: { error: { code: 'invalid_request', message: 'no', field: 'job_ids' } } });
    server.routes.set('DELETE /v1/jobs/j1', { status: 200, body: { job_id: 'j1', state: 'cancelled' } });
    server.routes.set('DELETE /v1/jobs/j3', { status: 404, body: { error: { code: 'not_found', message: 'no job "j3"' } } });
    const client = new TicklerClient({ baseUrl: server.url, coalesceCancels: true });
    const outcomes = await Promise.allSettled([client.cancelJob('j1'), client.cancelJob('j3')]);
    assert.equal(outcomes[0].status, 'fulfilled');
    assert.equal(((outcomes[1] as PromiseRejectedResult).reason as TicklerApiError).code, 'not_found');
    const paths = server.requests.map((request) => `${request.method} ${request.path}`);
    assert.deepEqual(paths, ['POST /v1/jobs:cancel', 'DELETE /v1/jobs/j1', 'DELETE /v1/jobs/j3']);
    server.routes.delete('POST /v1/jobs:cancel');
  });

  test('a 404 to the batch route sends single cancels, then and from then on', async () => {
    server.requests.length = 0;
    const cancelled = { job_id: 'j1', state: 'cancelled' } as unknown as Job;
    server.routes.set('DELETE /v1/jobs/j1', { status: 200, body: cancelled });
    server.routes.set('DELETE /v1/jobs/j2', { status: 200, body: cancelled });
    const client = new TicklerClient({ baseUrl: server.url, coalesceCancels: true });
    assert.deepEqual(await Promise.all([client.cancelJob('j1'), client.cancelJob('j2')]), [cancelled, cancelled]);
    assert.deepEqual(await Promise.all([client.cancelJob('j1'), client.cancelJob('j2')]), [cancelled, cancelled]);
    const paths = server.requests.map((request) => `${request.method} ${request.path}`);
    assert.deepEqual(paths, ['POST /v1/jobs:cancel', 'DELETE /v1/jobs/j1', 'DELETE /v1/jobs/j2', 'DELETE /v1/jobs/j1', 'DELETE /v1/jobs/j2']);
  });
});
