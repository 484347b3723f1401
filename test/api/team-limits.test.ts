// Team limits over HTTP (docs/API.md "Team limits"), on the SQLite store and on PostgreSQL,
// on the virtual clock: who may read and write them, the specific 400s, and creates over
// create_per_s or pending_max answered 429 with Retry-After, nothing written, another team
// untouched; a batch refused whole, an upsert counted, a trigger not; the metrics.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, delayJob, cronJob, type Harness } from './harness.js';
import { openTestStore, postgresSkipReason, type PostgresHandle } from '../store/postgres-harness.js';

const pgSkip = await postgresSkipReason();
const keys = new Map([['key-a', 'team-a'], ['key-b', 'team-b'], ['key-admin', 'admin']]);
const admin = { key: 'key-admin' };
const teamA = { key: 'key-a' };
const teamB = { key: 'key-b' };

for (const kind of ['sqlite', 'postgres'] as const) {
  void describe(`team limits on ${kind}`, { skip: kind === 'postgres' ? (pgSkip ?? false) : false }, () => {
    let h: Harness;
    let pg: PostgresHandle | undefined;
    before(async () => {
      if (kind === 'postgres') pg = await openTestStore();
      h = await startHarness({ apiKeys: keys, ...(pg === undefined ? {} : { wrapStore: () => pg!.store }) });
    });
    after(async () => {
      await h.close();
      await pg?.cleanup();
    });

    const jobsOf = async (who: { key: string }): Promise<number> =>
      (await h.call('GET', '/v1/jobs?limit=500', who)).json.items.length as number;
    const put = (team: string, body: unknown) => h.call('PUT', `/v1/teams/${team}/limits`, { ...admin, body });

    it('reads as unlimited with weight 1 until set; a team reads its own, not another\'s, and cannot write', async () => {
      const own = await h.call('GET', '/v1/teams/team-a/limits', teamA);
      assert.equal(own.status, 200, own.text);
      assert.deepEqual(own.json, { team: 'team-a', create_per_s: null, pending_max: null, dispatch_per_s: null, weight: 1, source: 'none' });
      assert.equal((await h.call('GET', '/v1/teams/team-b/limits', teamA)).status, 403);
      const write = await h.call('PUT', '/v1/teams/team-a/limits', { ...teamA, body: { create_per_s: 1000 } });
      assert.equal(write.status, 403);
      assert.equal(write.json.error.code, 'forbidden');
      assert.equal((await h.call('DELETE', '/v1/teams/team-a/limits', teamA)).status, 403);
      assert.equal((await h.call('GET', '/v1/teams/team-a/limits')).status, 401);
      assert.equal((await h.call('GET', '/v1/teams/team-b/limits', admin)).status, 200);
    });

    it('refuses bad values with a 400 naming the field, and changes nothing', async () => {
      const cases: [unknown, string][] = [
        [{ create_per_s: 0 }, 'create_per_s'], [{ create_per_s: -1 }, 'create_per_s'], [{ create_per_s: '5' }, 'create_per_s'],
        [{ create_per_s: 2_000_000 }, 'create_per_s'], [{ pending_max: 1.5 }, 'pending_max'], [{ pending_max: 0 }, 'pending_max'],
        [{ pending_max: 2_000_000_000 }, 'pending_max'], [{ dispatch_per_s: 0 }, 'dispatch_per_s'], [{ weight: 0 }, 'weight'],
        [{ weight: null }, 'weight'], [{ weight: 1001 }, 'weight'], [{ burst: 5 }, 'burst'],
      ];
      for (const [body, field] of cases) {
        const answer = await put('team-a', body);
        assert.equal(answer.status, 400, `${JSON.stringify(body)}: ${answer.text}`);
        assert.equal(answer.json.error.code, 'invalid_request');
        assert.equal(answer.json.error.field, field, JSON.stringify(body));
      }
      assert.equal((await put('team-a', [])).status, 400);
      assert.equal((await h.call('PUT', '/v1/teams/bad%20name/limits', { ...admin, body: {} })).status, 400);
      assert.equal((await h.call('GET', '/v1/teams/team-a/limits', admin)).json.source, 'none');
    });

    it('create_per_s: over it, 429 rate_limited with Retry-After and the limit named; nothing written; another team unaffected', async () => {
      const set = await put('team-a', { create_per_s: 2, weight: 3, dispatch_per_s: 50 });
      assert.deepEqual(set.json, { team: 'team-a', create_per_s: 2, pending_max: null, dispatch_per_s: 50, weight: 3, source: 'team' });
      assert.equal((await h.call('POST', '/v1/jobs', { ...teamA, body: delayJob() })).status, 201);
      assert.equal((await h.call('POST', '/v1/jobs', { ...teamA, body: delayJob() })).status, 201);
      const refused = await h.call('POST', '/v1/jobs', { ...teamA, body: delayJob() });
      assert.equal(refused.status, 429, refused.text);
      assert.equal(refused.json.error.code, 'rate_limited');
      assert.match(refused.json.error.message, /create_per_s/);
      assert.equal(refused.headers['retry-after'], '1');
      assert.equal(await jobsOf(teamA), 2);
      for (let index = 0; index < 5; index++) {
        assert.equal((await h.call('POST', '/v1/jobs', { ...teamB, body: delayJob() })).status, 201, 'team-b has no limit');
      }
      await h.clock.advance(500);
      assert.equal((await h.call('POST', '/v1/jobs', { ...teamA, body: delayJob() })).status, 201);
      const metrics = await h.call('GET', '/metrics', admin);
      assert.match(metrics.text, /tickler_rate_limited_total\{team="team-a",limit="create_per_s"\} 1/);
      assert.match(metrics.text, /tickler_jobs_created_total\{team="team-b"\} 5/);
    });

    it('a batch that does not fit is refused whole with 429; the same batch goes in once the tokens are back', async () => {
      await put('team-a', { create_per_s: 5 });
      await h.clock.advance(10_000);
      const before = await jobsOf(teamA);
      const batch = { jobs: [delayJob(), delayJob(), delayJob()] };
      assert.equal((await h.call('POST', '/v1/jobs:batch', { ...teamA, body: batch })).status, 200);
      const refused = await h.call('POST', '/v1/jobs:batch', { ...teamA, body: batch });
      assert.equal(refused.status, 429, refused.text);
      assert.equal(refused.headers['retry-after'], '1');
      assert.equal(await jobsOf(teamA), before + 3, 'none of the refused batch written');
      const asIds = await h.call('POST', '/v1/jobs:batch', { ...teamA, body: { ...batch, answer: 'id' } });
      assert.equal(asIds.status, 429);
      await h.clock.advance(1_000);
      const again = await h.call('POST', '/v1/jobs:batch', { ...teamA, body: batch });
      assert.equal(again.status, 200);
      assert.deepEqual(again.json.results.map((result: { status: number }) => result.status), [201, 201, 201]);
    });

    it('an upsert that creates is counted; one that replaces is not, nor is a trigger', async () => {
      await put('team-a', { create_per_s: 1 });
      await h.clock.advance(10_000);
      const created = await h.call('PUT', '/v1/jobs/by-key/nightly', { ...teamA, body: cronJob() });
      assert.equal(created.status, 201, created.text);
      const second = await h.call('PUT', '/v1/jobs/by-key/weekly', { ...teamA, body: cronJob() });
      assert.equal(second.status, 429, second.text);
      const replaced = await h.call('PUT', '/v1/jobs/by-key/nightly', { ...teamA, body: cronJob({ payload: { n: 2 } }) });
      assert.equal(replaced.status, 200, replaced.text);
      const trigger = await h.call('POST', `/v1/jobs/${created.json.job.job_id}/trigger`, teamA);
      assert.equal(trigger.status, 201, trigger.text);
    });

    it('pending_max: the team\'s pending timers and ready runs; Retry-After 1; a lease frees room after it', async () => {
      await put('team-a', { pending_max: null, create_per_s: null });
      await h.clock.advance(10_000);
      // Whatever team-a holds now, counted when the limit is set.
      const held = (await h.call('GET', '/v1/jobs?state=active&limit=500', teamA)).json.items.length as number;
      const ready = (await h.call('GET', '/v1/runs?status=ready&limit=500', teamA)).json.items.length as number;
      await put('team-a', { pending_max: held + ready + 2 });
      assert.equal((await h.call('POST', '/v1/jobs', { ...teamA, body: delayJob() })).status, 201);
      const due = await h.call('POST', '/v1/jobs', { ...teamA, body: delayJob({ schedule: { delay_s: 0 }, pool: 'now' }) });
      assert.equal(due.status, 201, 'a job due now is a ready run: it counts too');
      const refused = await h.call('POST', '/v1/jobs', { ...teamA, body: delayJob() });
      assert.equal(refused.status, 429, refused.text);
      assert.match(refused.json.error.message, /pending_max/);
      assert.equal(refused.headers['retry-after'], '1');
      assert.equal((await h.call('POST', '/v1/jobs', { ...teamB, body: delayJob() })).status, 201);
      const lease = await h.call('POST', '/v1/workers/lease', { ...teamA, body: { pool: 'now', max: 1, wait_s: 0 } });
      assert.equal(lease.json.runs.length, 1);
      await h.clock.advance(1_000);
      assert.equal((await h.call('POST', '/v1/jobs', { ...teamA, body: delayJob() })).status, 201);
      const metrics = await h.call('GET', '/metrics', admin);
      assert.match(metrics.text, /tickler_rate_limited_total\{team="team-a",limit="pending_max"\} 1/);
    });

    it('the default entry holds every team without its own; removing a team\'s entry puts it back under the default', async () => {
      await put('default', { create_per_s: 1 });
      const teamBLimits = await h.call('GET', '/v1/teams/team-b/limits', teamB);
      assert.deepEqual([teamBLimits.json.source, teamBLimits.json.create_per_s], ['default', 1]);
      await h.clock.advance(10_000);
      assert.equal((await h.call('POST', '/v1/jobs', { ...teamB, body: delayJob() })).status, 201);
      assert.equal((await h.call('POST', '/v1/jobs', { ...teamB, body: delayJob() })).status, 429);
      assert.equal((await h.call('GET', '/v1/teams/team-a/limits', teamA)).json.source, 'team');
      const removed = await h.call('DELETE', '/v1/teams/team-a/limits', admin);
      assert.deepEqual([removed.status, removed.json.source, removed.json.create_per_s], [200, 'default', 1]);
      await h.call('DELETE', '/v1/teams/default/limits', admin);
      assert.equal((await h.call('GET', '/v1/teams/team-b/limits', teamB)).json.source, 'none');
      assert.equal((await h.call('POST', '/v1/jobs', { ...teamB, body: delayJob() })).status, 201);
    });
  });
}
