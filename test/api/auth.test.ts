import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cronJob, startHarness, type Harness } from './harness.js';

const keys = new Map([['key-a', 'team-a'], ['key-b', 'team-b'], ['key-admin', 'admin']]);
const unknownJobId = 'j_0000000000000000000000000000';

describe('auth matrix', () => {
  let h: Harness;
  let jobId: string;
  let runId: string;
  let token: string;

  before(async () => {
    h = await startHarness({ apiKeys: keys });
    const created = await h.call('POST', '/v1/jobs', { key: 'key-a', body: cronJob({ key: 'mine' }) });
    assert.equal(created.status, 201);
    assert.equal(created.json.team, 'team-a');
    jobId = created.json.job_id;
    const trigger = await h.call('POST', `/v1/jobs/${jobId}/trigger`, { key: 'key-a' });
    runId = trigger.json.run_id;
  });
  after(async () => {
    await h.close();
  });

  it('refuses calls without a key or with an unknown key', async () => {
    for (const options of [{}, { key: 'nope' }, { headers: { authorization: 'Basic a2V5LWE6' } }]) {
      const answer = await h.call('GET', '/v1/jobs', options);
      assert.equal(answer.status, 401);
      assert.equal(answer.json.error.code, 'unauthorized');
      assert.equal(answer.headers['www-authenticate'], 'Bearer');
    }
    const create = await h.call('POST', '/v1/jobs', { body: cronJob() });
    assert.equal(create.status, 401);
    const list = await h.call('GET', '/v1/jobs', { key: 'key-a' });
    assert.equal(list.json.items.length, 1, 'nothing was created without a key');
  });

  it('lets health, readiness and the contract through without a key', async () => {
    assert.equal((await h.call('GET', '/healthz')).status, 200);
    assert.equal((await h.call('GET', '/readyz')).status, 200);
    assert.equal((await h.call('GET', '/openapi.json')).status, 200);
  });

  it('answers another team\'s ids exactly like unknown ones', async () => {
    const calls: [string, string, unknown?][] = [
      ['GET', `/v1/jobs/${jobId}`],
      ['PATCH', `/v1/jobs/${jobId}`, { payload: 'stolen' }],
      ['DELETE', `/v1/jobs/${jobId}`],
      ['POST', `/v1/jobs/${jobId}/pause`],
      ['POST', `/v1/jobs/${jobId}/resume`],
      ['POST', `/v1/jobs/${jobId}/trigger`],
      ['GET', `/v1/jobs/${jobId}/runs`],
    ];
    for (const [method, url, body] of calls) {
      const foreign = await h.call(method, url, { key: 'key-b', body });
      const unknown = await h.call(method, url.replace(jobId, unknownJobId), { key: 'key-b', body });
      assert.equal(foreign.status, 404, `${method} ${url}`);
      assert.equal(foreign.json.error.code, 'not_found');
      assert.deepEqual(Object.keys(foreign.json.error), Object.keys(unknown.json.error));
      assert.equal(foreign.json.error.message.replace(jobId, 'ID'), unknown.json.error.message.replace(unknownJobId, 'ID'));
    }
    for (const [method, url, body] of [
      ['GET', `/v1/runs/${runId}`, undefined],
      ['POST', `/v1/runs/${runId}/replay`, undefined],
      ['POST', `/v1/runs/${runId}/heartbeat`, { fencing_token: '1' }],
      ['POST', `/v1/runs/${runId}/complete`, { fencing_token: '1', status: 'succeeded' }],
    ] as const) {
      const foreign = await h.call(method, url, { key: 'key-b', body });
      assert.equal(foreign.status, 404, `${method} ${url}`);
    }
    const batch = await h.call('POST', '/v1/jobs:cancel', { key: 'key-b', body: { job_ids: [jobId, unknownJobId] } });
    assert.equal(batch.status, 200);
    const [foreignItem, unknownItem] = batch.json.results;
    assert.deepEqual([foreignItem.status, foreignItem.error.code], [404, 'not_found'], 'a batch cancel item too');
    assert.equal(foreignItem.error.message.replace(jobId, 'ID'), unknownItem.error.message.replace(unknownJobId, 'ID'));
    const stillMine = await h.call('GET', `/v1/jobs/${jobId}`, { key: 'key-a' });
    assert.equal(stillMine.json.state, 'active', 'the other team changed nothing');
    assert.deepEqual(stillMine.json.payload, { n: 1 });
    const runs = await h.call('GET', `/v1/jobs/${jobId}/runs`, { key: 'key-a' });
    assert.equal(runs.json.items.length, 1, 'the other team triggered nothing');
  });

  it('scopes lists and leases to the caller\'s team', async () => {
    assert.deepEqual((await h.call('GET', '/v1/jobs', { key: 'key-b' })).json.items, []);
    assert.deepEqual((await h.call('GET', '/v1/runs', { key: 'key-b' })).json.items, []);
    const lease = await h.call('POST', '/v1/workers/lease', { key: 'key-b', body: { pool: 'billing' } });
    assert.deepEqual(lease.json.runs, []);
    const namingOther = await h.call('GET', '/v1/jobs?team=team-a', { key: 'key-b' });
    assert.equal(namingOther.status, 403);
    assert.equal(namingOther.json.error.code, 'forbidden');
    const namingSelf = await h.call('GET', '/v1/jobs?team=team-b', { key: 'key-b' });
    assert.equal(namingSelf.status, 200);
  });

  it('lets an admin see and act on every team', async () => {
    const created = await h.call('POST', '/v1/jobs?team=team-b', { key: 'key-admin', body: cronJob() });
    assert.equal(created.status, 201);
    assert.equal(created.json.team, 'team-b');
    const all = await h.call('GET', '/v1/jobs', { key: 'key-admin' });
    assert.deepEqual(new Set(all.json.items.map((job: { team: string }) => job.team)), new Set(['team-a', 'team-b']));
    const onlyA = await h.call('GET', '/v1/jobs?team=team-a', { key: 'key-admin' });
    assert.deepEqual(onlyA.json.items.map((job: { job_id: string }) => job.job_id), [jobId]);
    assert.equal((await h.call('GET', `/v1/jobs/${jobId}`, { key: 'key-admin' })).status, 200);
    assert.equal((await h.call('GET', `/v1/runs/${runId}`, { key: 'key-admin' })).status, 200);
    const prefixWithoutTeam = await h.call('DELETE', '/v1/jobs?key_prefix=mi', { key: 'key-admin' });
    assert.equal(prefixWithoutTeam.status, 400);
    assert.equal(prefixWithoutTeam.json.error.field, 'team');
    const lease = await h.call('POST', '/v1/workers/lease', { key: 'key-admin', body: { pool: 'billing' } });
    assert.equal(lease.json.runs.length, 1);
    token = lease.json.runs[0].fencing_token;
    assert.equal((await h.call('POST', `/v1/runs/${runId}/heartbeat`, { key: 'key-a', body: { fencing_token: token } })).status, 200);
  });

  it('keeps admin-only routes from team keys', async () => {
    for (const [method, url, body] of [
      ['GET', '/metrics', undefined],
      ['GET', '/v1/clock', undefined],
      ['POST', '/v1/clock/advance', { seconds: 1 }],
    ] as const) {
      const team = await h.call(method, url, { key: 'key-a', body });
      assert.equal(team.status, 403, `${method} ${url}`);
      assert.equal(team.json.error.code, 'forbidden');
      assert.equal((await h.call(method, url, { body })).status, 401);
      assert.equal((await h.call(method, url, { key: 'key-admin', body })).status, 200, `${method} ${url}`);
    }
  });
});

describe('open mode', () => {
  it('acts as team default and opens admin routes (development)', async () => {
    const h = await startHarness({ apiKeys: null });
    try {
      const created = await h.call('POST', '/v1/jobs', { body: cronJob(), key: 'ignored' });
      assert.equal(created.json.team, 'default');
      assert.equal((await h.call('GET', '/metrics')).status, 200);
      assert.equal((await h.call('GET', '/v1/clock')).status, 200);
    } finally {
      await h.close();
    }
  });
});
