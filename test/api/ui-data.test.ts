// The routes the web UI reads (docs/API.md, "The UI's routes") and the shell it is served
// from, through app.inject() over a real SQLite store and a virtual clock. The harness runs no
// scheduler, so a cron job's occurrences come due with no run written: exactly what the
// occurrences view must call missed.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cronJob, startHarness, startMs, type Harness } from './harness.js';

const keys = new Map([['k-ops', 'ops'], ['k-web', 'web'], ['k-admin', 'admin']]);
const hourMs = 3_600_000;
const iso = (ms: number) => new Date(ms).toISOString();

/** Triggers the job a second on (a run's id is its job's and its time's), leases the run and completes it as asked; answers its id. */
async function runOnce(h: Harness, jobId: string, pool: string, status: 'succeeded' | 'failed_permanent', error?: string): Promise<string> {
  await h.clock.advance(1000);
  const triggered = await h.call('POST', `/v1/jobs/${jobId}/trigger`, { key: 'k-ops' });
  assert.equal(triggered.status, 201);
  const lease = await h.call('POST', '/v1/workers/lease', { key: 'k-ops', body: { pool, max: 1 } });
  const run = lease.json.runs[0];
  assert.equal(run.run_id, triggered.json.run_id);
  const done = await h.call('POST', `/v1/runs/${run.run_id}/complete`, { key: 'k-ops', body: { fencing_token: run.fencing_token, status, error } });
  assert.equal(done.status, 200);
  return run.run_id;
}

describe('the UI routes', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ apiKeys: keys });
  });
  after(async () => {
    await h.close();
  });

  it('says who the key belongs to, and which teams an admin may pick', async () => {
    const team = await h.call('GET', '/v1/whoami', { key: 'k-ops' });
    assert.deepEqual(team.json, { team: 'ops', admin: false, open: false, now: iso(h.clock.nowMs()) });
    const admin = await h.call('GET', '/v1/whoami', { key: 'k-admin' });
    assert.equal(admin.json.admin, true);
    assert.equal((await h.call('GET', '/v1/whoami')).status, 401);
    assert.equal((await h.call('GET', '/v1/whoami', { key: 'nope' })).status, 401);
    assert.deepEqual((await h.call('GET', '/v1/teams', { key: 'k-admin' })).json, { items: ['ops', 'web'] });
    const refused = await h.call('GET', '/v1/teams', { key: 'k-ops' });
    assert.equal(refused.status, 403);
    assert.equal(refused.json.error.code, 'forbidden');
  });

  it('lists every occurrence due in a window: missed ones (no run at all) first, a trigger outside the schedule, a dead run', async () => {
    const nightly = await h.call('POST', '/v1/jobs', { key: 'k-ops', body: cronJob({ key: 'nightly', pool: 'reports', tolerance_s: 0 }) });
    const fine = await h.call('POST', '/v1/jobs', { key: 'k-ops', body: cronJob({ key: 'fine', pool: 'fine', schedule: { at: iso(startMs + 400 * 86_400_000) } }) });
    const frequent = await h.call('POST', '/v1/jobs', { key: 'k-ops', body: cronJob({ key: 'frequent', pool: 'sync', schedule: { cron: '*/2 * * * *', tz: 'UTC' }, tolerance_s: 0 }) });
    await h.call('POST', '/v1/jobs', { key: 'k-web', body: cronJob({ key: 'other-team', pool: 'reports' }) });
    await h.clock.advance(2 * hourMs);
    const deadRun = await runOnce(h, nightly.json.job_id, 'reports', 'failed_permanent', 'disk full');
    await runOnce(h, fine.json.job_id, 'fine', 'succeeded');
    await h.clock.advance(2 * 24 * hourMs);
    const since = iso(startMs);
    const answer = await h.call('GET', `/v1/occurrences?since=${since}`, { key: 'k-ops' });
    assert.equal(answer.status, 200);
    assert.equal(answer.json.until, iso(h.clock.nowMs()));
    const rows = answer.json.items;
    assert.deepEqual(rows.map((row: { job: { key: string } | null; pool: string }) => row.job?.key ?? `pool:${row.pool}`),
      ['frequent', 'nightly', 'pool:fine'], 'missed first (by key), another team never, one-shot runs grouped by pool');
    const nightlyRow = rows[1];
    // 02:00 Berlin on 1, 2 and 3 March (01:00 UTC): no scheduler ran, so no run was written.
    assert.deepEqual(nightlyRow.occurrences.filter((o: { status: string }) => o.status === 'missed').map((o: { scheduled_at: string }) => o.scheduled_at),
      ['2026-03-03T01:00:00.000Z', '2026-03-02T01:00:00.000Z', '2026-03-01T01:00:00.000Z']);
    const dead = nightlyRow.occurrences.find((o: { run_id: string | null }) => o.run_id === deadRun);
    assert.equal(dead.status, 'dead');
    assert.equal(dead.expected, false, 'a trigger is outside the schedule');
    assert.equal(dead.last_error, 'disk full');
    assert.deepEqual([nightlyRow.missed, nightlyRow.failed, nightlyRow.total], [3, 1, 4]);
    assert.equal(rows[0].missed, 50 * 30 - 1, '*/2 over 50 hours, counted');
    const ahead = await h.call('GET', `/v1/occurrences?since=${since}&until=${iso(h.clock.nowMs() + 600_000)}&key_prefix=freq`, { key: 'k-ops' });
    // 02:00 (two seconds ago, inside the 60-s grace) to 02:10: pending, not missed.
    assert.equal(ahead.json.items[0].counts.pending, 6);
    assert.equal(rows[2].counts.succeeded, 1);

    const oneJob = await h.call('GET', `/v1/occurrences?since=${since}&job_id=${nightly.json.job_id}`, { key: 'k-ops' });
    assert.deepEqual(oneJob.json.items.map((row: { job: { key: string } }) => row.job.key), ['nightly']);
    const byPrefix = await h.call('GET', `/v1/occurrences?since=${since}&key_prefix=nig`, { key: 'k-ops' });
    assert.deepEqual(byPrefix.json.items.map((row: { job: { key: string } }) => row.job.key), ['nightly']);
    const before = await h.call('GET', `/v1/occurrences?since=${since}&until=${iso(startMs + hourMs)}`, { key: 'k-ops' });
    assert.equal(before.json.items.find((row: { job: { key: string } | null }) => row.job?.key === 'nightly')?.total ?? 0, 0);
    const otherTeam = await h.call('GET', `/v1/occurrences?since=${since}&job_id=${frequent.json.job_id}`, { key: 'k-web' });
    assert.equal(otherTeam.status, 404);
  });

  it('refuses bad occurrence queries with a 4xx naming the field', async () => {
    const cases: [string, number, string | undefined][] = [
      ['', 400, 'since'],
      ['?since=yesterday', 400, 'since'],
      [`?since=${iso(startMs)}&until=${iso(startMs)}`, 400, 'until'],
      [`?since=${iso(startMs)}&until=${iso(startMs + 32 * 24 * hourMs)}`, 400, 'until'],
      [`?since=${iso(startMs)}&late_s=-1`, 400, 'late_s'],
      [`?since=${iso(startMs)}&colour=red`, 400, undefined],
      [`?since=${iso(startMs)}&job_id=j_nope`, 404, undefined],
      [`?since=${iso(startMs)}&job_id=${'x'.repeat(300)}`, 404, undefined],
    ];
    for (const [query, status, field] of cases) {
      const answer = await h.call('GET', `/v1/occurrences${query}`, { key: 'k-ops' });
      assert.equal(answer.status, status, query);
      if (field !== undefined) assert.equal(answer.json.error.field, field, query);
    }
  });

  it('sums up: fire lag, due per minute ahead, backlog per pool, failing runs, silent jobs, stale tokens', async () => {
    const job = await h.call('POST', '/v1/jobs', { key: 'k-web', body: cronJob({ key: 'every-2', pool: 'web-sync', tolerance_s: 0, max_silence_s: 60, overlap: 'allow',
      schedule: { cron: '*/2 * * * *', tz: 'UTC' } }) });
    await h.call('POST', `/v1/jobs/${job.json.job_id}/trigger`, { key: 'k-web' });
    const lease = await h.call('POST', '/v1/workers/lease', { key: 'k-web', body: { pool: 'web-sync' } });
    const stale = await h.call('POST', `/v1/runs/${lease.json.runs[0].run_id}/complete`,
      { key: 'k-web', body: { fencing_token: 'not-the-token', status: 'succeeded' } });
    assert.equal(stale.status, 409);
    await h.clock.advance(1000);
    await h.call('POST', `/v1/jobs/${job.json.job_id}/trigger`, { key: 'k-web' });
    await h.clock.advance(120_000);
    const overview = await h.call('GET', '/v1/overview', { key: 'k-web' });
    assert.equal(overview.status, 200);
    const body = overview.json;
    assert.equal(body.due_ahead.per_minute.length, 60);
    // 30 of the */2 job, and team web's nightly job whose fire is overdue (no scheduler runs here), in the current minute.
    assert.equal(body.due_ahead.per_minute.reduce((sum: number, minute: { count: number }) => sum + minute.count, 0), 31);
    assert.equal(body.due_ahead.per_minute[0].count, 2);
    assert.deepEqual(body.backlog.items, [{ pool: 'web-sync', ready: 1, running: 1, retry_wait: 0 }]);
    assert.equal(body.fire_lag.count, 2);
    assert.equal(body.fire_lag.p99_s, 0);
    assert.equal(body.failing.dead_last_day, 0);
    assert.deepEqual(body.silent.map((item: { job: { key: string } }) => item.job.key), ['every-2']);
    assert.equal(body.stale_tokens.complete, 1);
    const failing = await h.call('POST', '/v1/jobs', { key: 'k-ops', body: cronJob({ key: 'failing', pool: 'failing' }) });
    await runOnce(h, failing.json.job_id, 'failing', 'failed_permanent', 'nope');
    const ops = await h.call('GET', '/v1/overview', { key: 'k-ops' });
    assert.equal(ops.json.failing.dead_last_day, 1, 'team ops sees its own dead run only');
    assert.deepEqual(ops.json.silent, []);
    assert.equal((await h.call('GET', '/v1/overview?team=web', { key: 'k-ops' })).status, 403);
    assert.equal((await h.call('GET', '/v1/overview?team=web', { key: 'k-admin' })).json.silent.length, 1);
    assert.equal((await h.call('GET', '/v1/overview?window=1', { key: 'k-ops' })).status, 400);
  });

  it('replays a selection of dead runs, each item answering for itself, at most 10/s per team after a burst of 50', async () => {
    const job = await h.call('POST', '/v1/jobs', { key: 'k-ops', body: cronJob({ key: 'replayable', pool: 'replay' }) });
    const dead = await runOnce(h, job.json.job_id, 'replay', 'failed_permanent', 'boom');
    const fine = await runOnce(h, job.json.job_id, 'replay', 'succeeded');
    const first = await h.call('POST', '/v1/runs:replay', { key: 'k-ops', body: { run_ids: [dead, fine, 'r_nope', dead] } });
    assert.equal(first.status, 200);
    assert.deepEqual(first.json.results.map((item: { status: number }) => item.status), [200, 409, 404, 409]);
    assert.equal(first.json.results[0].run.status, 'ready');
    assert.equal(first.json.results[0].run.run_id, dead);
    assert.equal((await h.call('POST', '/v1/runs:replay', { key: 'k-web', body: { run_ids: [dead] } })).json.results[0].status, 404,
      'another team\'s run is unknown');
    // The clock stands still: 4 + 1 tokens are spent, 45 are left of the burst.
    const many = Array.from({ length: 45 }, (_, index) => `r_unknown_${index}`);
    assert.equal((await h.call('POST', '/v1/runs:replay', { key: 'k-ops', body: { run_ids: many } })).status, 200);
    const limited = await h.call('POST', '/v1/runs:replay', { key: 'k-ops', body: { run_ids: ['r_a', 'r_b'] } });
    assert.equal(limited.status, 429);
    assert.equal(limited.json.error.code, 'rate_limited');
    assert.equal(limited.headers['retry-after'], '1');
    assert.equal((await h.call('POST', '/v1/runs:replay', { key: 'k-web', body: { run_ids: ['r_a'] } })).status, 200, 'each team has its own budget');
    await h.clock.advance(200);
    assert.equal((await h.call('POST', '/v1/runs:replay', { key: 'k-ops', body: { run_ids: ['r_a', 'r_b'] } })).status, 200);
    for (const body of [{}, { run_ids: [] }, { run_ids: Array.from({ length: 51 }, () => 'r_x') }, { run_ids: [1] }, { run_ids: ['r_x'], extra: 1 }]) {
      const answer = await h.call('POST', '/v1/runs:replay', { key: 'k-ops', body });
      assert.equal(answer.status, 400, JSON.stringify(body).slice(0, 60));
      assert.equal(answer.json.error.code, 'invalid_request');
    }
  });

  it('serves the UI shell and its assets without a key, and nothing outside them', async () => {
    const shell = await h.call('GET', '/');
    assert.equal(shell.status, 200);
    assert.match(String(shell.headers['content-type']), /^text\/html/);
    assert.match(String(shell.headers['content-security-policy']), /default-src 'self'/);
    const assets = [...shell.text.matchAll(/(?:src|href)="(\/ui\/assets\/[^"]+)"/g)].map((match) => match[1]!);
    assert.ok(assets.some((path) => path.endsWith('.js')) && assets.some((path) => path.endsWith('.css')), shell.text);
    for (const path of assets) {
      const asset = await h.call('GET', path);
      assert.equal(asset.status, 200, path);
      assert.match(String(asset.headers['cache-control']), /immutable/);
    }
    for (const path of ['/ui/assets/nope.js', '/ui/assets/..%2F..%2Fpackage.json', '/ui/assets/../index.html', '/ui/index.html']) {
      assert.equal((await h.call('GET', path)).status, 404, path);
    }
    assert.equal((await h.call('GET', '/v1/jobs')).status, 401, 'the data still needs a key');
  });
});
