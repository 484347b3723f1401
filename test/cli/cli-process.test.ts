// The `tickler` command as a process (bin/tickler.js): JSON on stdout (lists as tables unless
// --json), the server's error and exit 1 on a failed call, exit 2 on a usage mistake.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { FakeTicklerServer } from '../worker/fake-server.js';
import { tickler } from './tickler-process.js';

const server = new FakeTicklerServer();
before(() => server.listen());
after(() => server.close());

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

test('jobs silent --json asks GET /v1/jobs:silent and prints the answer', async () => {
  const items = [{ job: { job_id: 'j_1', max_silence_s: 60 }, last_success_at: null, silent_since: '2026-11-30T00:01:00.000Z' }];
  server.routes.set('GET /v1/jobs:silent?limit=5', { status: 200, body: { items, next_cursor: null } });
  const outcome = await tickler(['--url', server.url, 'jobs', 'silent', '--limit', '5', '--json']);
  assert.equal(outcome.code, 0, outcome.stderr);
  assert.deepEqual(JSON.parse(outcome.stdout), { items, next_cursor: null });
  assert.equal(server.requests.at(-1)?.path, '/v1/jobs:silent?limit=5');
});

const job = {
  job_id: 'j_1', team: 'default', state: 'active', key: 'nightly-report', pool: 'reports',
  schedule: { cron: '30 2 * * *', tz: 'America/New_York' }, next_fire_at: '2026-12-01T07:30:00.000Z', max_silence_s: 90_000,
};
const run = {
  run_id: 'r_1', job_id: 'j_1', team: 'default', pool: 'reports', attempt: 3, status: 'dead',
  scheduled_at: '2026-11-30T07:30:00.000Z', finished_at: '2026-11-30T07:31:02.500Z', last_error: 'command exited with code 75: try later',
};

test('lists print as tables for people: jobs ls, runs ls, dlq ls, jobs silent', async () => {
  server.routes.set('GET /v1/jobs?state=active', { status: 200, body: { items: [job], next_cursor: 'c2' } });
  server.routes.set('GET /v1/runs?status=dead', { status: 200, body: { items: [run], next_cursor: null } });
  server.routes.set('GET /v1/dlq', { status: 200, body: { items: [run], next_cursor: null } });
  server.routes.set('GET /v1/jobs:silent', {
    status: 200, body: { items: [{ job, last_success_at: null, silent_since: '2026-12-01T08:00:00.000Z' }], next_cursor: null },
  });
  const jobs = await tickler(['--url', server.url, 'jobs', 'ls', '--state', 'active']);
  assert.equal(jobs.code, 0, jobs.stderr);
  assert.deepEqual(jobs.stdout.split('\n'), [
    'JOB_ID  STATE   POOL     SCHEDULE                       NEXT_FIRE             KEY',
    'j_1     active  reports  30 2 * * * (America/New_York)  2026-12-01 07:30:00Z  nightly-report',
    'more: --cursor c2',
    '',
  ]);
  const runs = await tickler(['--url', server.url, 'runs', 'ls', '--status', 'dead']);
  assert.equal(runs.code, 0, runs.stderr);
  assert.match(runs.stdout, /^RUN_ID +JOB_ID +STATUS +ATTEMPT +SCHEDULED +FINISHED +ERROR\n/);
  assert.match(runs.stdout, /\nr_1 +j_1 +dead +3 +2026-11-30 07:30:00Z +2026-11-30 07:31:02Z +command exited with code 75: try later\n$/);
  const dead = await tickler(['--url', server.url, 'dlq', 'ls']);
  assert.match(dead.stdout, /^RUN_ID +JOB_ID +POOL +ATTEMPTS +DIED +LAST_ERROR\nr_1 +j_1 +reports +3 +2026-11-30 07:31:02Z +command exited/);
  const silent = await tickler(['--url', server.url, 'jobs', 'silent']);
  assert.match(silent.stdout, /^JOB_ID +POOL +SCHEDULE +MAX_SILENCE_S +LAST_SUCCESS +SILENT_SINCE\nj_1 +reports +30 2 \* \* \* \(America\/New_York\) +90000 +never +2026-12-01 08:00:00Z\n$/);
  const asJson = await tickler(['--url', server.url, 'dlq', 'ls', '--json']);
  assert.deepEqual(JSON.parse(asJson.stdout), { items: [run], next_cursor: null });
});

test('an empty list says so', async () => {
  server.routes.set('GET /v1/jobs', { status: 200, body: { items: [], next_cursor: null } });
  const outcome = await tickler(['--url', server.url, 'jobs', 'ls']);
  assert.equal(outcome.stdout, '(none)\n');
});

test('jobs patch sends only the fields its flags name, and refuses an empty change', async () => {
  server.routes.set('PATCH /v1/jobs/j_1', { status: 200, body: { ...job, schedule: { cron: '0 3 * * *', tz: 'UTC' } } });
  const outcome = await tickler(['--url', server.url, 'jobs', 'patch', 'j_1', '--cron', '0 3 * * *', '--payload', '{"v":2}',
    '--lane', 'P0']);
  assert.equal(outcome.code, 0, outcome.stderr);
  assert.equal(server.requests.at(-1)?.method, 'PATCH');
  assert.deepEqual(server.requests.at(-1)?.body, { schedule: { cron: '0 3 * * *' }, payload: { v: 2 }, lane: 'P0' });
  assert.equal(JSON.parse(outcome.stdout).schedule.cron, '0 3 * * *');
  const before = server.requests.length;
  const empty = await tickler(['--url', server.url, 'jobs', 'patch', 'j_1']);
  assert.equal(empty.code, 2);
  assert.match(empty.stderr, /nothing to change/);
  assert.equal(server.requests.length, before);
});

test('an unknown enum value exits 2 naming the allowed ones, before anything is sent', async () => {
  const before = server.requests.length;
  const state = await tickler(['--url', server.url, 'jobs', 'ls', '--state', 'sleeping']);
  assert.equal(state.code, 2);
  assert.match(state.stderr, /argument 'sleeping' is invalid. Allowed choices are active, paused, cancelled, done/);
  const status = await tickler(['--url', server.url, 'runs', 'ls', '--status', 'failed']);
  assert.equal(status.code, 2);
  assert.match(status.stderr, /Allowed choices are ready, running, retry_wait, succeeded, dead/);
  const lane = await tickler(['--url', server.url, 'jobs', 'create', '--delay-s', '5', '--pool', 'p', '--lane', 'P9']);
  assert.equal(lane.code, 2);
  assert.match(lane.stderr, /Allowed choices are P0, P1, P2/);
  const level = await tickler(['serve', '--log-level', 'loud']);
  assert.equal(level.code, 2);
  assert.match(level.stderr, /Allowed choices are fatal, error, warn, info, debug, trace, silent/);
  const unknownOption = await tickler(['--url', server.url, 'jobs', 'ls', '--colour']);
  assert.equal(unknownOption.code, 2);
  assert.equal(server.requests.length, before);
});

test('--version prints the package version and exits 0', async () => {
  const outcome = await tickler(['--version']);
  assert.equal(outcome.code, 0, outcome.stderr);
  const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  assert.equal(outcome.stdout, `${version}\n`);
});
