// Team quotas end to end (docs/API.md "Team limits"), on real `tickler serve` processes under
// the virtual clock, so that no token comes back while the test runs. One server on SQLite:
// team A floods past its create_per_s and pending_max and is answered 429 with Retry-After,
// while team B, creating at the same moments, gets every create through and its runs fire and
// are leased as ever. Two servers on one PostgreSQL database, both limited by the same file:
// team A's creates through both take from one bucket, so the cluster lets in a second's worth,
// not a second's worth per node.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { withDefaultUser } from '../../src/store/postgres/connection.js';
import { adminQuery, postgresSkipReason, testPgUrl } from '../store/postgres-harness.js';
import { eventually, startServerProcess, tempDataDir, type ServerProcess } from './server-process.js';

const keys = { 'team-a': 'key-a', 'team-b': 'key-b', admin: 'key-admin' };
const startAt = '2026-11-29T02:00:00.000Z';

// Tests read answers loosely; assertions pin what matters.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Answer = { status: number; retryAfter: string | null; json: any };

async function call(url: string, key: string, method: string, path: string, body?: unknown): Promise<Answer> {
  const response = await fetch(`${url}${path}`, {
    method, headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  return { status: response.status, retryAfter: response.headers.get('retry-after'), json: text === '' ? null : JSON.parse(text) };
}

const job = (pool: string, delayS = 60) => ({ schedule: { delay_s: delayS }, pool, payload: { pool } });

void describe('one team over its quota, another team beside it (SQLite)', { timeout: 300_000 }, () => {
  const data = tempDataDir();
  let server: ServerProcess;
  before(async () => {
    writeFileSync(join(data.dir, 'keys.json'), JSON.stringify(keys));
    writeFileSync(join(data.dir, 'limits.json'), JSON.stringify({ 'team-a': { create_per_s: 20, pending_max: 50 } }));
    server = await startServerProcess({
      dataDir: data.dir,
      args: ['--virtual-clock', '--start-at', startAt, '--api-keys', join(data.dir, 'keys.json'), '--limits', join(data.dir, 'limits.json')],
    });
  });
  after(async () => {
    assert.equal(await server.stop(), 0);
    data.remove();
  });

  it('team A is answered 429 past its limits; team B, at the same moments, is not, and its runs fire and are leased', async () => {
    // 40 single creates and 4 batches of 10 from team A, 40 creates from team B, all at once.
    const teamA = [
      ...Array.from({ length: 40 }, () => call(server.url, keys['team-a'], 'POST', '/v1/jobs', job('a'))),
      ...Array.from({ length: 4 }, () => call(server.url, keys['team-a'], 'POST', '/v1/jobs:batch', { jobs: Array.from({ length: 10 }, () => job('a')) })),
    ];
    const teamB = Array.from({ length: 40 }, () => call(server.url, keys['team-b'], 'POST', '/v1/jobs', job('b')));
    const [answersA, answersB] = await Promise.all([Promise.all(teamA), Promise.all(teamB)]);

    assert.deepEqual(answersB.map((answer) => answer.status), Array.from({ length: 40 }, () => 201), 'team B never noticed');
    const refused = answersA.filter((answer) => answer.status === 429);
    assert.ok(refused.length > 0, 'team A was limited');
    for (const answer of refused) {
      assert.equal(answer.json.error.code, 'rate_limited');
      assert.match(answer.json.error.message, /create_per_s|pending_max/);
      assert.ok(Number(answer.retryAfter) >= 1, `Retry-After ${answer.retryAfter}`);
    }
    const createdA = answersA.reduce((sum, answer) => sum + (answer.status !== 201 && answer.status !== 200 ? 0
      : answer.json.results === undefined ? 1 : answer.json.results.length), 0);
    const listedA = (await call(server.url, keys['team-a'], 'GET', '/v1/jobs?limit=500')).json.items.length;
    assert.equal(listedA, createdA, 'a refused request wrote nothing');
    // 20 tokens at the frozen instant; a batch in debt may take it past 20, never past 20 + 9.
    assert.ok(createdA >= 20 && createdA <= 29, `team A created ${createdA}`);

    // A second later, more tokens, and pending_max (50) holds: team A reaches 50 pending and no more.
    for (let second = 1; second <= 5; second++) {
      await call(server.url, keys.admin, 'POST', '/v1/clock/advance', { seconds: 1 });
      await Promise.all(Array.from({ length: 25 }, () => call(server.url, keys['team-a'], 'POST', '/v1/jobs', job('a', 600))));
    }
    const pendingA = (await call(server.url, keys['team-a'], 'GET', '/v1/jobs?state=active&limit=500')).json.items.length;
    assert.equal(pendingA, 50);
    const last = await call(server.url, keys['team-a'], 'POST', '/v1/jobs', job('a', 600));
    assert.equal(last.status, 429);
    assert.match(last.json.error.message, /pending_max limit \(50 /);

    // 55 s on, team B's 40 jobs and team A's first ones are due within the next 10 s: the herd is seen before it lands.
    const metricsText = () => fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${keys.admin}` } }).then((answer) => answer.text());
    await call(server.url, keys.admin, 'POST', '/v1/clock/advance', { seconds: 50 });
    assert.match(await metricsText(), new RegExp(`^tickler_due_per_second ${(40 + createdA) / 10}$`, 'm'));

    // Team B's jobs fire at their time and its worker leases every one.
    await call(server.url, keys.admin, 'POST', '/v1/clock/advance', { seconds: 10 });
    const leased = await eventually(async () => {
      const lease = await call(server.url, keys['team-b'], 'POST', '/v1/workers/lease', { pool: 'b', max: 100, wait_s: 0 });
      return lease.json.runs.length === 40 ? lease.json.runs : undefined;
    }, 'team B\'s 40 runs', 30_000);
    assert.equal(leased.length, 40);
    const failed = await call(server.url, keys['team-b'], 'POST', `/v1/runs/${leased[0].run_id}/complete`,
      { fencing_token: leased[0].fencing_token, status: 'failed', error: 'downstream down' });
    assert.equal(failed.status, 200);

    const metrics = await metricsText();
    assert.match(metrics, /^tickler_due_per_second 0$/m);
    assert.match(metrics, /^tickler_runs_dispatched_total\{team="team-b"\} 40$/m);
    assert.match(metrics, new RegExp(`^tickler_runs_dispatched_total\\{team="team-a"\\} ${createdA}$`, 'm'));
    assert.match(metrics, /^tickler_runs_failed_total\{team="team-b"\} 1$/m);
    assert.match(metrics, /^tickler_runs_attempts_gt_1_total\{team="team-b"\} 1$/m);
    assert.match(metrics, /tickler_rate_limited_total\{team="team-a",limit="create_per_s"\} [1-9]/);
    assert.match(metrics, /tickler_rate_limited_total\{team="team-a",limit="pending_max"\} [1-9]/);
    assert.doesNotMatch(metrics, /tickler_rate_limited_total\{team="team-b"/);
    assert.match(metrics, /tickler_jobs_created_total\{team="team-b"\} 40/);
  });
});

const pgSkip = await postgresSkipReason();

void describe('one team\'s bucket shared by two servers on PostgreSQL', { skip: pgSkip ?? false, timeout: 300_000 }, () => {
  const data = tempDataDir();
  const database = `tickler_quota_${randomBytes(5).toString('hex')}`;
  const nodes: ServerProcess[] = [];
  before(async () => {
    writeFileSync(join(data.dir, 'keys.json'), JSON.stringify(keys));
    writeFileSync(join(data.dir, 'limits.json'), JSON.stringify({ 'team-a': { create_per_s: 10 } }));
    await adminQuery(`CREATE DATABASE "${database}"`);
    const url = new URL(withDefaultUser(testPgUrl));
    url.pathname = `/${database}`;
    // The first migrates alone; the second finds the schema done.
    for (const name of ['api-1', 'api-2']) {
      nodes.push(await startServerProcess({
        dataDir: data.dir,
        args: ['--store', url.toString(), '--roles', 'api', '--node-id', name, '--virtual-clock', '--start-at', startAt,
          '--api-keys', join(data.dir, 'keys.json'), '--limits', join(data.dir, 'limits.json')],
      }));
    }
  });
  after(async () => {
    for (const node of nodes) assert.equal(await node.stop(), 0);
    await adminQuery(`DROP DATABASE IF EXISTS "${database}"`);
    data.remove();
  });

  it('lets in 10 creates a second from the two nodes together, not 10 from each', async () => {
    const round = async (): Promise<number[]> => {
      const answers = await Promise.all(Array.from({ length: 40 }, (_, index) =>
        call(nodes[index % 2]!.url, keys['team-a'], 'POST', '/v1/jobs', job('a'))));
      return [0, 1].map((node) => answers.filter((answer, index) => index % 2 === node && answer.status === 201).length);
    };
    const first = await round();
    assert.equal(first[0]! + first[1]!, 10, `created through each node: ${first.join(', ')}`);
    const teamB = await call(nodes[1]!.url, keys['team-b'], 'POST', '/v1/jobs', job('b'));
    assert.equal(teamB.status, 201);
    // Each node's clock moves a second; the bucket holds 10 again, for both together.
    for (const node of nodes) await call(node.url, keys.admin, 'POST', '/v1/clock/advance', { seconds: 1 });
    const second = await round();
    assert.equal(second[0]! + second[1]!, 10, `created through each node: ${second.join(', ')}`);
    const listed = (await call(nodes[0]!.url, keys['team-a'], 'GET', '/v1/jobs?limit=500')).json.items.length;
    assert.equal(listed, 20);
  });
});
