// GET /v1/jobs:silent, the dead man's switch over HTTP: active jobs whose last success is
// older than their max_silence_s, per team, with when each fell silent. Time is the
// harness's virtual clock; no scheduler runs, so nothing here ever succeeds.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TicklerClient } from '../../src/worker/client.js';
import { cronJob, startHarness, startMs, type Harness } from './harness.js';

const iso = (ms: number): string => new Date(ms).toISOString();
const hourMs = 3_600_000;

describe('GET /v1/jobs:silent', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ apiKeys: new Map([['key-a', 'team-a'], ['key-b', 'team-b'], ['key-admin', 'admin']]) });
  });
  after(async () => {
    await h.close();
  });

  it('lists a team\'s jobs silent for longer than their max_silence_s, longest first', async () => {
    const create = async (key: string, body: Record<string, unknown>): Promise<string> => {
      const answer = await h.call('POST', '/v1/jobs', { body, key });
      assert.equal(answer.status, 201, JSON.stringify(answer.json));
      return answer.json.job_id as string;
    };
    const hourly = await create('key-a', cronJob({ max_silence_s: 3_600 }));
    const halfHourly = await create('key-a', cronJob({ max_silence_s: 1_800 }));
    await create('key-a', cronJob());
    const otherTeam = await create('key-b', cronJob({ max_silence_s: 60 }));

    const none = await h.call('GET', '/v1/jobs:silent', { key: 'key-a' });
    assert.equal(none.status, 200);
    assert.deepEqual(none.json, { items: [], next_cursor: null });

    await h.clock.advance(hourMs);
    const silent = await h.call('GET', '/v1/jobs:silent', { key: 'key-a' });
    assert.equal(silent.status, 200);
    assert.deepEqual(silent.json.items.map((item: { job: { job_id: string } }) => item.job.job_id), [halfHourly, hourly]);
    assert.deepEqual(silent.json.items.map((item: { last_success_at: string | null; silent_since: string }) =>
      [item.last_success_at, item.silent_since]), [[null, iso(startMs + hourMs / 2)], [null, iso(startMs + hourMs)]]);
    assert.equal(silent.json.items[0].job.max_silence_s, 1_800, 'each item carries the whole job');

    const limited = await h.call('GET', '/v1/jobs:silent?limit=1', { key: 'key-a' });
    assert.deepEqual(limited.json.items.map((item: { job: { job_id: string } }) => item.job.job_id), [halfHourly]);
    assert.equal(typeof limited.json.next_cursor, 'string');
    const next = await h.call('GET', `/v1/jobs:silent?limit=1&cursor=${limited.json.next_cursor}`, { key: 'key-a' });
    assert.deepEqual(next.json.items.map((item: { job: { job_id: string } }) => item.job.job_id), [hourly]);
    assert.equal(next.json.next_cursor, null, 'the last page says so');
    const teamB = await h.call('GET', '/v1/jobs:silent', { key: 'key-b' });
    assert.deepEqual(teamB.json.items.map((item: { job: { job_id: string } }) => item.job.job_id), [otherTeam]);
    const admin = await h.call('GET', '/v1/jobs:silent', { key: 'key-admin' });
    assert.equal(admin.json.items.length, 3, 'an admin sees every team');
    const adminForB = await h.call('GET', '/v1/jobs:silent?team=team-b', { key: 'key-admin' });
    assert.deepEqual(adminForB.json.items.map((item: { job: { job_id: string } }) => item.job.job_id), [otherTeam]);

    const paused = await h.call('POST', `/v1/jobs/${halfHourly}/pause`, { key: 'key-a' });
    assert.equal(paused.status, 200);
    const afterPause = await h.call('GET', '/v1/jobs:silent', { key: 'key-a' });
    assert.deepEqual(afterPause.json.items.map((item: { job: { job_id: string } }) => item.job.job_id), [hourly],
      'a paused job is not watched');
    const resumed = await h.call('POST', `/v1/jobs/${halfHourly}/resume`, { key: 'key-a' });
    assert.equal(resumed.status, 200);
    const afterResume = await h.call('GET', '/v1/jobs:silent', { key: 'key-a' });
    assert.deepEqual(afterResume.json.items.map((item: { job: { job_id: string } }) => item.job.job_id), [hourly],
      'a resumed job gets its max_silence_s again from the resume');
  });

  it('refuses bad input with a specific 400 and needs a key', async () => {
    const garbage = Buffer.from('["x"]').toString('base64url');
    for (const query of ['limit=0', 'limit=abc', 'limit=100000', 'color=red', 'cursor=%2F%2F', `cursor=${garbage}`]) {
      const answer = await h.call('GET', `/v1/jobs:silent?${query}`, { key: 'key-a' });
      assert.equal(answer.status, 400, query);
      assert.equal(answer.json.error.code, 'invalid_request', query);
    }
    const anonymous = await h.call('GET', '/v1/jobs:silent');
    assert.equal(anonymous.status, 401);
  });
});

describe('TicklerClient.listSilentJobs', () => {
  it('answers the silent jobs over HTTP', async () => {
    const h = await startHarness();
    try {
      const baseUrl = await h.app.listen({ host: '127.0.0.1', port: 0 });
      const client = new TicklerClient({ baseUrl });
      const job = await client.createJob({ schedule: { cron: '0 2 * * *', tz: 'UTC' }, pool: 'p', max_silence_s: 60 });
      assert.deepEqual(await client.listSilentJobs(), { items: [], next_cursor: null });
      await h.clock.advance(60_000);
      const silent = await client.listSilentJobs({ limit: 10 });
      assert.equal(silent.next_cursor, null);
      assert.deepEqual(silent.items.map((item) => [item.job.job_id, item.last_success_at, item.silent_since]),
        [[job.job_id, null, iso(startMs + 60_000)]]);
    } finally {
      await h.close();
    }
  });
});
