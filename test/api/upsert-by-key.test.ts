// PUT /v1/jobs/by-key/{key} (docs/API.md, "Upsert by key"), on the SQLite store and on
// PostgreSQL: created or replaced under one job_id, the pending timer recomputed with the
// definition, run history kept, "changed" false when nothing is.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, startMs, type Harness } from './harness.js';
import { openTestStore, postgresSkipReason, type PostgresHandle } from '../store/postgres-harness.js';

const hourMs = 3_600_000;
const iso = (ms: number): string => new Date(ms).toISOString();
const nightly = { schedule: { cron: '0 2 * * *', tz: 'UTC' }, pool: 'cron', payload: { command: 'backup' } };

const pgSkip = await postgresSkipReason();

for (const kind of ['sqlite', 'postgres'] as const) {
  void describe(`PUT /v1/jobs/by-key/{key} on ${kind}`, { skip: kind === 'postgres' ? (pgSkip ?? false) : false }, () => {
    let h: Harness;
    let pg: PostgresHandle | undefined;
    before(async () => {
      if (kind === 'postgres') pg = await openTestStore();
      h = await startHarness(pg === undefined ? {} : { wrapStore: () => pg!.store });
    });
    after(async () => {
      await h.close();
      await pg?.cleanup();
    });

    it('creates (201), then answers 200 unchanged for the same definition, whatever its field order', async () => {
      const created = await h.call('PUT', '/v1/jobs/by-key/nightly', { body: nightly });
      assert.equal(created.status, 201, created.text);
      assert.equal(created.json.changed, true);
      assert.equal(created.json.created, true);
      assert.equal(created.json.job.key, 'nightly');
      assert.equal(created.json.job.next_scheduled_at, iso(startMs + 2 * hourMs));
      const again = await h.call('PUT', '/v1/jobs/by-key/nightly',
        { body: { payload: { command: 'backup' }, pool: 'cron', schedule: { tz: 'UTC', cron: '0 2 * * *' } } });
      assert.equal(again.status, 200);
      assert.deepEqual([again.json.changed, again.json.created], [false, false]);
      assert.equal(again.json.job.job_id, created.json.job.job_id);
      assert.equal(again.json.job.updated_at, created.json.job.updated_at);
    });

    it('replaces the definition: same job_id, new timer, runs kept, and a POST with the new body answers the job', async () => {
      const first = await h.call('PUT', '/v1/jobs/by-key/hourly', { body: { ...nightly, schedule: { cron: '30 * * * *' } } });
      assert.equal((await h.call('POST', `/v1/jobs/${first.json.job.job_id}/trigger`)).status, 201);
      const runs = await h.call('GET', `/v1/jobs/${first.json.job.job_id}/runs`);
      assert.equal(runs.json.items.length, 1);
      const body = { ...nightly, schedule: { cron: '0 5 * * *' }, payload: { command: 'other' } };
      const replaced = await h.call('PUT', '/v1/jobs/by-key/hourly', { body });
      assert.equal(replaced.status, 200);
      assert.equal(replaced.json.changed, true);
      assert.equal(replaced.json.job.job_id, first.json.job.job_id);
      assert.equal(replaced.json.job.next_scheduled_at, iso(startMs + 5 * hourMs));
      assert.deepEqual(replaced.json.job.payload, { command: 'other' });
      const runsAfter = await h.call('GET', `/v1/jobs/${first.json.job.job_id}/runs`);
      assert.deepEqual(runsAfter.json.items.map((run: { run_id: string }) => run.run_id),
        runs.json.items.map((run: { run_id: string }) => run.run_id));
      const post = await h.call('POST', '/v1/jobs', { body: { ...body, key: 'hourly' } });
      assert.equal(post.status, 200, 'a keyed create of the upserted body finds the job');
      assert.equal(post.json.job_id, first.json.job.job_id);
    });

    it('pauses and resumes through "paused", and brings a cancelled job back', async () => {
      const created = await h.call('PUT', '/v1/jobs/by-key/paused-one', { body: { ...nightly, paused: true } });
      assert.equal(created.status, 201);
      assert.equal(created.json.job.state, 'paused');
      assert.equal(created.json.job.next_fire_at, null);
      const same = await h.call('PUT', '/v1/jobs/by-key/paused-one', { body: { ...nightly, paused: true } });
      assert.equal(same.json.changed, false);
      const unsaid = await h.call('PUT', '/v1/jobs/by-key/paused-one', { body: nightly });
      assert.equal(unsaid.json.changed, false, 'without "paused" the state stays');
      const resumed = await h.call('PUT', '/v1/jobs/by-key/paused-one', { body: { ...nightly, paused: false } });
      assert.equal(resumed.json.job.state, 'active');
      assert.notEqual(resumed.json.job.next_fire_at, null);
      await h.call('DELETE', `/v1/jobs/${created.json.job.job_id}`);
      const back = await h.call('PUT', '/v1/jobs/by-key/paused-one', { body: nightly });
      assert.equal(back.status, 200);
      assert.deepEqual([back.json.changed, back.json.job.state, back.json.job.job_id], [true, 'active', created.json.job.job_id]);
    });

    it('takes any key URL-encoded in the path', async () => {
      const key = 'crontab:web 1/deploy?x=1#2';
      const created = await h.call('PUT', `/v1/jobs/by-key/${encodeURIComponent(key)}`, { body: nightly });
      assert.equal(created.status, 201, created.text);
      assert.equal(created.json.job.key, key);
      const again = await h.call('PUT', `/v1/jobs/by-key/${encodeURIComponent(key)}`, { body: { ...nightly, key } });
      assert.deepEqual([again.status, again.json.changed], [200, false]);
    });

    it('dry_run=true answers what would change and writes nothing', async () => {
      const dry = await h.call('PUT', '/v1/jobs/by-key/dry?dry_run=true', { body: nightly });
      assert.equal(dry.status, 201);
      assert.equal(dry.json.changed, true);
      assert.equal((await h.call('GET', '/v1/jobs?key=dry')).json.items.length, 0);
      await h.call('PUT', '/v1/jobs/by-key/dry', { body: nightly });
      const dryChange = await h.call('PUT', '/v1/jobs/by-key/dry?dry_run=true', { body: { ...nightly, pool: 'elsewhere' } });
      assert.deepEqual([dryChange.status, dryChange.json.changed, dryChange.json.job.pool], [200, true, 'elsewhere']);
      assert.equal((await h.call('GET', '/v1/jobs?key=dry')).json.items[0].pool, 'cron');
    });

    it('refuses bad input with a specific 400 and changes nothing', async () => {
      const cases: [string, unknown, string][] = [
        ['/v1/jobs/by-key/k1', { ...nightly, key: 'other' }, 'key'],
        ['/v1/jobs/by-key/k1', { ...nightly, schedule: { delay_s: 60 } }, 'schedule.delay_s'],
        ['/v1/jobs/by-key/k1', { ...nightly, schedule: { at: '2026-03-02T00:00:00Z' }, paused: true }, 'paused'],
        ['/v1/jobs/by-key/k1', { ...nightly, paused: 'yes' }, 'paused'],
        ['/v1/jobs/by-key/k1', { ...nightly, surprise: 1 }, 'surprise'],
      ];
      for (const [url, body, field] of cases) {
        const answer = await h.call('PUT', url, { body });
        assert.equal(answer.status, 400, answer.text);
        assert.equal(answer.json.error.code, 'invalid_request');
        assert.equal(answer.json.error.field, field, answer.text);
      }
      const schedule = await h.call('PUT', '/v1/jobs/by-key/k1', { body: { ...nightly, schedule: { cron: '61 * * * *' } } });
      assert.equal(schedule.status, 400);
      assert.equal(schedule.json.error.code, 'invalid_schedule');
      assert.equal((await h.call('GET', '/v1/jobs?key=k1')).json.items.length, 0);
    });

    it('refuses to change a done one-shot job (409 invalid_state) but answers it unchanged for the same body', async () => {
      // Due when created: dispatched by its create, done at once (docs/API.md).
      const once = { schedule: { at: iso(h.clock.nowMs()) }, pool: 'cron' };
      assert.equal((await h.call('PUT', '/v1/jobs/by-key/once', { body: once })).json.job.state, 'done');
      const same = await h.call('PUT', '/v1/jobs/by-key/once', { body: once });
      assert.deepEqual([same.status, same.json.changed, same.json.job.state], [200, false, 'done']);
      const changed = await h.call('PUT', '/v1/jobs/by-key/once', { body: { ...once, pool: 'other' } });
      assert.equal(changed.status, 409);
      assert.equal(changed.json.error.code, 'invalid_state');
    });
  });
}
