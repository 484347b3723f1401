// The `tickler` command as a process (bin/tickler.js through tsx): JSON on stdout, the
// server's error and exit 1 on a failed call, exit 2 on a usage mistake.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { after, before, test } from 'node:test';
import { FakeTicklerServer } from '../worker/fake-server.js';

const server = new FakeTicklerServer();
before(() => server.listen());
after(() => server.close());

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

function tickler(args: string[], env: Record<string, string> = {}): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['bin/tickler.js', ...args], {
      env: { PATH: process.env['PATH'] ?? '', ...env },
      timeout: 30_000,
    }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : (typeof error.code === 'number' ? error.code : -1), stdout, stderr });
    });
  });
}

test('jobs get prints the job as JSON, using TICKLER_URL and TICKLER_API_KEY', async () => {
  server.routes.set('GET /v1/jobs/j_1', { status: 200, body: { job_id: 'j_1', state: 'active' } });
  const outcome = await tickler(['jobs', 'get', 'j_1'], { TICKLER_URL: server.url, TICKLER_API_KEY: 'k-env' });
  assert.equal(outcome.code, 0, outcome.stderr);
  assert.deepEqual(JSON.parse(outcome.stdout), { job_id: 'j_1', state: 'active' });
  assert.equal(server.requests.at(-1)?.headers.authorization, 'Bearer k-env');
});

test('a refused call exits 1 with the code, message and field on stderr', async () => {
  server.routes.set('POST /v1/jobs', {
    status: 400, body: { error: { code: 'invalid_timezone', message: 'unknown zone Mars/Olympus', field: 'schedule.tz' } },
  });
  const outcome = await tickler(['--url', server.url, 'jobs', 'create', '--cron', '0 2 * * *', '--tz', 'Mars/Olympus',
    '--pool', 'p']);
  assert.equal(outcome.code, 1);
  assert.equal(outcome.stdout, '');
  assert.match(outcome.stderr, /400 invalid_timezone: unknown zone Mars\/Olympus \(field schedule.tz\)/);
  assert.deepEqual(server.requests.at(-1)?.body, { schedule: { cron: '0 2 * * *', tz: 'Mars/Olympus' }, pool: 'p' });
});

test('usage mistakes exit 2 before anything is sent or started', async () => {
  const before = server.requests.length;
  const create = await tickler(['--url', server.url, 'jobs', 'create', '--pool', 'p']);
  assert.equal(create.code, 2);
  assert.match(create.stderr, /needs a schedule/);
  const serve = await tickler(['serve', '--host', '0.0.0.0', '--port', '0']);
  assert.equal(serve.code, 2);
  assert.match(serve.stderr, /refusing to listen on 0.0.0.0 without API keys/);
  const worker = await tickler(['--url', server.url, 'worker', '--pool', 'p', '--exec', 'true', '--lease-ahead-ms', '10001']);
  assert.equal(worker.code, 2);
  assert.match(worker.stderr, /--lease-ahead-ms/);
  const teamAlone = await tickler(['--url', server.url, 'worker', '--pool', 'p', '--exec', 'true', '--team', 'billing']);
  assert.equal(teamAlone.code, 2);
  assert.match(teamAlone.stderr, /--team scopes a worker straight to the database: give --store too/);
  const sqliteStore = await tickler(['worker', '--pool', 'p', '--exec', 'true', '--store', 'sqlite:/tmp/t.db']);
  assert.equal(sqliteStore.code, 2);
  assert.match(sqliteStore.stderr, /--store must be postgres:\/\/\.\.\./);
  assert.equal(server.requests.length, before);
});

test('jobs cancel: one id is DELETE /v1/jobs/{id}; several are one POST /v1/jobs:cancel; none is a usage mistake', async () => {
  server.routes.set('DELETE /v1/jobs/j_1', { status: 200, body: { job_id: 'j_1', state: 'cancelled' } });
  const one = await tickler(['--url', server.url, 'jobs', 'cancel', 'j_1']);
  assert.equal(one.code, 0, one.stderr);
  assert.deepEqual(JSON.parse(one.stdout), { job_id: 'j_1', state: 'cancelled' });
  const results = [{ status: 200, job: { job_id: 'j_1', state: 'cancelled' } },
    { status: 404, error: { code: 'not_found', message: 'no job "j_2"' } }];
  server.routes.set('POST /v1/jobs:cancel', { status: 200, body: { results } });
  const many = await tickler(['--url', server.url, 'jobs', 'cancel', 'j_1', 'j_2']);
  assert.equal(many.code, 0, many.stderr);
  assert.deepEqual(JSON.parse(many.stdout), { results });
  assert.deepEqual(server.requests.at(-1)?.body, { job_ids: ['j_1', 'j_2'] });
  const before = server.requests.length;
  const neither = await tickler(['--url', server.url, 'jobs', 'cancel']);
  assert.equal(neither.code, 2);
  assert.match(neither.stderr, /give job ids or --key-prefix/);
  const both = await tickler(['--url', server.url, 'jobs', 'cancel', 'j_1', '--key-prefix', 'cart-']);
  assert.equal(both.code, 2);
  assert.equal(server.requests.length, before, 'nothing sent');
});

test('jobs silent asks GET /v1/jobs:silent and prints the items', async () => {
  const items = [{ job: { job_id: 'j_1', max_silence_s: 60 }, last_success_at: null, silent_since: '2026-11-30T00:01:00.000Z' }];
  server.routes.set('GET /v1/jobs:silent?limit=5', { status: 200, body: { items, next_cursor: null } });
  const outcome = await tickler(['--url', server.url, 'jobs', 'silent', '--limit', '5']);
  assert.equal(outcome.code, 0, outcome.stderr);
  assert.deepEqual(JSON.parse(outcome.stdout), { items, next_cursor: null });
  assert.equal(server.requests.at(-1)?.path, '/v1/jobs:silent?limit=5');
});
