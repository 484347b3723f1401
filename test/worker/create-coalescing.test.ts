// TicklerClient with `coalesceCreates`: concurrent createJob calls share POST /v1/jobs:batch
// requests against a real server on a real SQLite file, each caller answered as a single
// create would answer it; the per-request fallbacks against the HTTP fake.
import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import { TicklerClient } from '../../src/worker/client.js';
import { TicklerApiError, TicklerNetworkError } from '../../src/worker/errors.js';
import type { Job, JobCreateRequest } from '../../src/worker/wire.js';
import { startHarness, type Harness } from '../api/harness.js';
import { FakeTicklerServer } from './fake-server.js';

const pool = 'coalesced';

function job(index: number, overrides: Partial<JobCreateRequest> = {}): JobCreateRequest {
  return { schedule: { delay_s: 900 }, pool, payload: { i: index }, ...overrides };
}

/** What a call settled to: its job, or its error's kind, status, code and field. */
async function outcomeOf(call: Promise<Job>): Promise<{ job: Job } | { error: (string | number | undefined)[]; message: string }> {
  try {
    return { job: await call };
  } catch (error) {
    const { message } = error as Error;
    if (error instanceof TicklerApiError) return { error: ['api', error.status, error.code, error.field], message };
    return { error: [(error as Error).name], message };
  }
}

describe('coalesced creates on a real server', () => {
  let harness: Harness;
  let baseUrl: string;
  let requests: string[];

  beforeEach(async () => {
    harness = await startHarness();
    baseUrl = await harness.app.listen({ host: '127.0.0.1', port: 0 });
    requests = [];
    harness.app.server.on('request', (request: IncomingMessage) => {
      requests.push(`${request.method} ${request.url}`);
    });
  });

  afterEach(() => harness.close());

  const countOf = (line: string): number => requests.filter((request) => request === line).length;

  test('concurrent creates share one batch request; each caller gets its own job, as the server stores it', async () => {
    const client = new TicklerClient({ baseUrl, coalesceCreates: true });
    const jobs = await Promise.all(Array.from({ length: 50 }, (_, index) => client.createJob(job(index))));
    assert.deepEqual(jobs.map((created) => created.payload), Array.from({ length: 50 }, (_, index) => ({ i: index })));
    assert.equal(new Set(jobs.map((created) => created.job_id)).size, 50);
    assert.deepEqual([countOf('POST /v1/jobs:batch'), countOf('POST /v1/jobs')], [1, 0]);
    assert.deepEqual(client.coalescedCreateStats, { requests: 1, items: 50 });
    for (const created of [jobs[0]!, jobs[49]!]) assert.deepEqual(await client.getJob(created.job_id), created);
  });

  test('a create made alone goes to POST /v1/jobs; creates made meanwhile share the next request', async () => {
    const client = new TicklerClient({ baseUrl, coalesceCreates: true });
    const first = client.createJob(job(0));
    // Submitted after the first one left, while it is in flight.
    await new Promise((resolve) => setImmediate(resolve));
    const rest = Array.from({ length: 5 }, (_, index) => client.createJob(job(index + 1)));
    const jobs = await Promise.all([first, ...rest]);
    assert.deepEqual(jobs.map((created) => (created.payload as { i: number }).i), [0, 1, 2, 3, 4, 5]);
    assert.deepEqual(requests.filter((request) => request.startsWith('POST')), ['POST /v1/jobs', 'POST /v1/jobs:batch']);
    assert.deepEqual(client.coalescedCreateStats, { requests: 2, items: 6 });
  });

  test('each bad item rejects only its caller, with the status, code and field of a single create', async () => {
    const plain = new TicklerClient({ baseUrl });
    const taken = await plain.createJob(job(0, { key: 'taken' }));
    const bodies: JobCreateRequest[] = [
      job(1),
      job(2, { schedule: { cron: '*/0 * * * *' } }),
      { ...job(3), unknown_field: true } as JobCreateRequest,
      job(4, { key: 'taken' }),
      job(0, { key: 'taken' }),
      job(5, { payload: 'x'.repeat(70_000) }),
      job(6, { schedule: { at: 'yesterday' } }),
      job(7, { key: 'twice' }),
      job(7, { key: 'twice' }),
      job(8),
    ];
    const coalescing = new TicklerClient({ baseUrl, coalesceCreates: true });
    const coalesced = await Promise.all(bodies.map((body) => outcomeOf(coalescing.createJob(body))));
    assert.deepEqual([countOf('POST /v1/jobs:batch'), countOf('POST /v1/jobs')], [1, 1], 'one batch after the setup create');
    const alone = [];
    for (const body of bodies) alone.push(await outcomeOf(plain.createJob(body)));
    const shapeOf = (outcome: Awaited<ReturnType<typeof outcomeOf>>): unknown => ('job' in outcome ? 'job' : outcome.error);
    assert.deepEqual(coalesced.map(shapeOf), alone.map(shapeOf));
    const messageOf = (outcome: Awaited<ReturnType<typeof outcomeOf>>): unknown => ('job' in outcome ? null : outcome.message);
    assert.deepEqual(coalesced.map(messageOf), alone.map(messageOf));
    assert.deepEqual(coalesced.map(shapeOf), ['job', ['api', 400, 'invalid_schedule', 'schedule.cron'],
      ['api', 400, 'invalid_request', 'unknown_field'], ['api', 409, 'key_conflict', 'key'], 'job',
      ['api', 413, 'payload_too_large', 'payload'], ['api', 400, 'invalid_schedule', 'schedule.at'], 'job', 'job', 'job']);
    const jobOf = (index: number): Job => (coalesced[index] as { job: Job }).job;
    assert.deepEqual(jobOf(4), taken, 'the same key and body again answers the existing job');
    assert.equal(jobOf(7).job_id, jobOf(8).job_id, 'one key twice in one batch is one job');
  });

  test('a batch refused whole as bad input sends each item alone: only the item at fault fails', async () => {
    // As deep as a body may be alone; two levels more inside {"jobs": [...]}.
    let payload: unknown = 1;
    for (let depth = 0; depth < 62; depth++) payload = { d: payload };
    const deep = job(1, { payload });
    const client = new TicklerClient({ baseUrl, coalesceCreates: true });
    const [created, neighbour] = await Promise.all([client.createJob(deep), client.createJob(job(2))]);
    assert.deepEqual(created.payload, payload);
    assert.deepEqual(neighbour.payload, { i: 2 });
    assert.deepEqual([countOf('POST /v1/jobs:batch'), countOf('POST /v1/jobs')], [1, 2]);
    const [refused, fine] = await Promise.all([
      outcomeOf(client.createJob({ ...job(3), payload: { d: { d: payload } } })), outcomeOf(client.createJob(job(4))),
    ]);
    const plain = await outcomeOf(new TicklerClient({ baseUrl }).createJob({ ...job(3), payload: { d: { d: payload } } }));
    assert.deepEqual('error' in refused ? refused.error : 'job', 'error' in plain ? plain.error : 'job');
    assert.equal('job' in fine, true);
  });

  test('calls with a signal or a timeout go alone; the others still share a batch', async () => {
    const client = new TicklerClient({ baseUrl, coalesceCreates: true });
    await Promise.all([
      client.createJob(job(1)), client.createJob(job(2), { timeoutMs: 10_000 }),
      client.createJob(job(3), { signal: new AbortController().signal }), client.createJob(job(4)),
    ]);
    assert.deepEqual([countOf('POST /v1/jobs:batch'), countOf('POST /v1/jobs')], [1, 2]);
  });

  test('createJobId: concurrent calls share one batch; each caller gets the id of its job as stored', async () => {
    const client = new TicklerClient({ baseUrl, coalesceCreates: true });
    const ids = await Promise.all(Array.from({ length: 40 }, (_, index) => client.createJobId(job(index))));
    assert.equal(new Set(ids).size, 40);
    assert.deepEqual([countOf('POST /v1/jobs:batch'), countOf('POST /v1/jobs')], [1, 0]);
    assert.deepEqual(client.coalescedCreateStats, { requests: 1, items: 40 });
    for (const index of [0, 17, 39]) assert.deepEqual((await client.getJob(ids[index]!)).payload, { i: index });
    // Alone (a batch of one), and with createJob's calls beside it: each kind in its own batch.
    assert.equal((await client.getJob(await client.createJobId(job(40)))).job_id.length > 0, true);
    const [id, whole] = await Promise.all([client.createJobId(job(41)), client.createJob(job(42))]);
    assert.deepEqual([(await client.getJob(id)).payload, whole.payload], [{ i: 41 }, { i: 42 }]);
    assert.deepEqual(client.coalescedCreateStats, { requests: 4, items: 43 });
  });

  test('createJobId: each bad item rejects only its caller, as createJob would; a repeated key answers the same id', async () => {
    const plain = new TicklerClient({ baseUrl });
    const taken = await plain.createJob(job(0, { key: 'taken' }));
    const bodies: JobCreateRequest[] = [
      job(1),
      job(2, { schedule: { cron: '*/0 * * * *' } }),
      job(4, { key: 'taken' }),
      job(0, { key: 'taken' }),
      job(5, { payload: 'x'.repeat(70_000) }),
      job(7, { key: 'twice' }),
      job(7, { key: 'twice' }),
    ];
    const coalescing = new TicklerClient({ baseUrl, coalesceCreates: true });
    const outcomes = await Promise.all(bodies.map(async (body) => {
      try {
        return await coalescing.createJobId(body);
      } catch (error) {
        return error instanceof TicklerApiError ? [error.status, error.code, error.field] : String(error);
      }
    }));
    assert.deepEqual([countOf('POST /v1/jobs:batch'), countOf('POST /v1/jobs')], [1, 1], 'one batch after the setup create');
    assert.equal(typeof outcomes[0], 'string');
    assert.deepEqual(outcomes.slice(1, 5), [[400, 'invalid_schedule', 'schedule.cron'], [409, 'key_conflict', 'key'],
      taken.job_id, [413, 'payload_too_large', 'payload']]);
    assert.equal(outcomes[5], outcomes[6], 'one key twice in one batch is one job');
  });

  test('off by default: each create is its own POST /v1/jobs', async () => {
    const client = new TicklerClient({ baseUrl });
    const jobs = await Promise.all(Array.from({ length: 5 }, (_, index) => client.createJob(job(index))));
    assert.equal(new Set(jobs.map((created) => created.job_id)).size, 5);
    assert.deepEqual([countOf('POST /v1/jobs:batch'), countOf('POST /v1/jobs')], [0, 5]);
    assert.equal(client.coalescedCreateStats, undefined);
  });
});

describe('coalesced creates: requests that fail whole', () => {
  const server = new FakeTicklerServer();
  before(() => server.listen());
  after(() => server.close());
  beforeEach(() => {
    server.requests.length = 0;
    server.routes.clear();
  });

  const createdJob = { job_id: 'j1', pool } as unknown as Job;
  const posts = (): string[] => server.requests.filter((request) => request.method === 'POST').map((request) => request.path);

  test('a server without the batch route (404) gets single creates, then and from then on', async () => {
    server.routes.set('POST /v1/jobs', { status: 201, body: createdJob });
    const client = new TicklerClient({ baseUrl: server.url, coalesceCreates: true });
    const jobs = await Promise.all([client.createJob(job(1)), client.createJob(job(2)), client.createJob(job(3))]);
    assert.deepEqual(jobs, [createdJob, createdJob, createdJob]);
    assert.deepEqual(await Promise.all([client.createJob(job(4)), client.createJob(job(5))]), [createdJob, createdJob]);
    assert.deepEqual(posts(), ['/v1/jobs:batch', '/v1/jobs', '/v1/jobs', '/v1/jobs', '/v1/jobs', '/v1/jobs']);
    const resent = server.requests.slice(1, 4).map((request) => (request.body as { payload: { i: number } }).payload.i);
    assert.deepEqual(resent.sort(), [1, 2, 3], 'each create of the refused batch sent once');
  });

  test('createJobId: a server that refuses answer "id" (400 on answer) gets batches asking for whole jobs', async () => {
    server.routes.set('POST /v1/jobs:batch', {
      status: 400, body: { error: { code: 'invalid_request', message: 'unknown field', field: 'answer' } },
    });
    server.routes.set('POST /v1/jobs', { status: 201, body: createdJob });
    const client = new TicklerClient({ baseUrl: server.url, coalesceCreates: true });
    assert.deepEqual(await Promise.all([client.createJobId(job(1)), client.createJobId(job(2))]), ['j1', 'j1']);
    const batches = server.requests.filter((request) => request.path === '/v1/jobs:batch')
      .map((request) => (request.body as { answer?: string }).answer ?? null);
    // Asked for ids, asked again for whole jobs; that batch was refused too (this fake refuses
    // every batch), so each item went alone.
    assert.deepEqual(batches, ['id', null]);
    assert.deepEqual(posts(), ['/v1/jobs:batch', '/v1/jobs:batch', '/v1/jobs', '/v1/jobs']);
    server.requests.length = 0;
    await Promise.all([client.createJobId(job(3)), client.createJobId(job(4))]);
    assert.equal((server.requests[0]!.body as { answer?: string }).answer, undefined, 'no longer asks for ids');
  });

  test('a batch that gets no answer, or a 503, rejects every caller in it with that error', async () => {
    const client = new TicklerClient({ baseUrl: server.url, coalesceCreates: true });
    server.routes.set('POST /v1/jobs:batch', 'destroy');
    const cut = await Promise.allSettled([client.createJob(job(1)), client.createJob(job(2))]);
    assert.deepEqual(cut.map((outcome) => outcome.status === 'rejected' && outcome.reason instanceof TicklerNetworkError), [true, true]);
    server.routes.set('POST /v1/jobs:batch', { status: 503, body: { error: { code: 'unavailable', message: 'down' } } });
    const down = await Promise.all([outcomeOf(client.createJob(job(1))), outcomeOf(client.createJob(job(2)))]);
    assert.deepEqual(down.map((outcome) => ('error' in outcome ? outcome.error : 'job')),
      [['api', 503, 'unavailable', undefined], ['api', 503, 'unavailable', undefined]]);
    assert.deepEqual(posts(), ['/v1/jobs:batch', '/v1/jobs:batch'], 'nothing resent on its own');
  });
});
