import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { shardOf } from '../../src/domain/identity.js';
import { cronJob, delayJob, startHarness, startMs, type Harness } from './harness.js';

const iso = (ms: number): string => new Date(ms).toISOString();
const hourMs = 3_600_000;

describe('jobs API', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('creates a cron job with every default filled in', async () => {
    const answer = await h.call('POST', '/v1/jobs', { body: cronJob() });
    assert.equal(answer.status, 201);
    const job = answer.json;
    assert.match(job.job_id, /^j_[0-9a-f]+$/);
    assert.equal(job.team, 'default');
    assert.equal(job.state, 'active');
    assert.deepEqual(job.schedule, { cron: '0 2 * * *', tz: 'Europe/Berlin' });
    assert.equal(job.key, null);
    assert.equal(job.lane, 'P1');
    assert.equal(job.tolerance_s, 300);
    assert.deepEqual(job.retry, { max_attempts: 5, base_s: 30, max_s: 3600 });
    assert.equal(job.overlap, 'forbid');
    assert.equal(job.catch_up, 'latest');
    assert.equal(job.catch_up_window_s, 86400);
    assert.deepEqual(job.dst, { gap: 'shift', repeat: 'first' });
    assert.equal(job.idempotency, 'keyed');
    assert.equal(job.lease_s, 60);
    assert.equal(job.max_silence_s, null);
    assert.deepEqual(job.resources, []);
    assert.deepEqual(job.labels, {});
    assert.deepEqual(job.payload, { n: 1 });
    // 02:00 in Berlin in winter is 01:00Z; the first occurrence is strictly after creation.
    assert.equal(job.next_scheduled_at, '2026-03-01T01:00:00.000Z');
    const fireAtMs = Date.parse(job.next_fire_at);
    assert.ok(fireAtMs >= startMs + hourMs && fireAtMs <= startMs + hourMs + 300_000, job.next_fire_at);
    assert.equal(job.created_at, iso(startMs));
    assert.equal(job.updated_at, iso(startMs));

    const read = await h.call('GET', `/v1/jobs/${job.job_id}`);
    assert.equal(read.status, 200);
    assert.deepEqual(read.json, job);
  });

  it('turns delay_s into at and fires one-shots without tolerance', async () => {
    const answer = await h.call('POST', '/v1/jobs', { body: delayJob() });
    assert.equal(answer.status, 201);
    const atIso = iso(h.clock.nowMs() + 900_000);
    assert.deepEqual(answer.json.schedule, { at: atIso, delay_s: 900 });
    assert.equal(answer.json.tolerance_s, 0);
    assert.equal(answer.json.next_fire_at, atIso);
    assert.equal(answer.json.next_scheduled_at, atIso);
  });

  it('accepts an at in the past (one-shots always fire) and normalises it to UTC; the create dispatches it', async () => {
    const answer = await h.call('POST', '/v1/jobs', { body: { schedule: { at: '2026-02-01T10:00:00+01:00' }, pool: 'p' } });
    assert.equal(answer.status, 201);
    assert.deepEqual(answer.json.schedule, { at: '2026-02-01T09:00:00.000Z' });
    assert.equal(answer.json.payload, null);
    // Due already: its run was written by the create's own transaction, so the job is done
    // and the run is in the ledger before the answer (docs/API.md, "Jobs due when created").
    assert.equal(answer.json.state, 'done');
    assert.equal(answer.json.next_fire_at, null);
    const runs = await h.call('GET', `/v1/jobs/${answer.json.job_id}/runs`);
    assert.equal(runs.status, 200);
    assert.equal(runs.json.items.length, 1);
    const run = runs.json.items[0];
    assert.equal(run.status, 'ready');
    assert.equal(run.scheduled_at, '2026-02-01T09:00:00.000Z');
    assert.equal(run.fire_at, '2026-02-01T09:00:00.000Z');
    assert.equal(run.dispatched_at, iso(h.clock.nowMs()));
    const detail = await h.call('GET', `/v1/runs/${run.run_id}`);
    assert.deepEqual(detail.json.events.map((event: { type: string; detail: unknown }) => [event.type, event.detail]),
      [['dispatched', { at_create: true }]]);
  });

  it('a one-shot due at its create counts as dispatched: tickler_dispatches_total and the fire lag', async () => {
    const before = await h.call('GET', '/metrics');
    const countOf = (text: string): number => Number(/^tickler_dispatches_total\{status="ready"\} (\d+)/m.exec(text)?.[1] ?? 0);
    const lagCountOf = (text: string): number => Number(/^tickler_fire_lag_seconds_count\{lane="P0"\} (\d+)/m.exec(text)?.[1] ?? 0);
    const answer = await h.call('POST', '/v1/jobs:batch', { body: { jobs: [
      { schedule: { delay_s: 0 }, pool: 'p', lane: 'P0' },
      { schedule: { delay_s: 0 }, pool: 'p', lane: 'P0' },
      { schedule: { delay_s: 60 }, pool: 'p', lane: 'P0' },
    ] } });
    assert.deepEqual(answer.json.results.map((item: { job: { state: string } }) => item.job.state), ['done', 'done', 'active']);
    const after = await h.call('GET', '/metrics');
    assert.equal(countOf(after.text) - countOf(before.text), 2);
    assert.equal(lagCountOf(after.text) - lagCountOf(before.text), 2);
  });

  it('answers the existing job for a repeated key and body, 409 for another body', async () => {
    const text = JSON.stringify(cronJob({ key: 'invoice-export' }));
    const first = await h.call('POST', '/v1/jobs', { raw: text });
    assert.equal(first.status, 201);
    const again = await h.call('POST', '/v1/jobs', { raw: text });
    assert.equal(again.status, 200);
    assert.equal(again.json.job_id, first.json.job_id);
    // The same JSON value spelt differently (whitespace, key order) is the same request.
    const respelt = await h.call('POST', '/v1/jobs', { raw: ` ${JSON.stringify(cronJob({ key: 'invoice-export' }), null, 2)}` });
    assert.equal(respelt.status, 200);
    assert.equal(respelt.json.job_id, first.json.job_id);
    const reordered = Object.fromEntries(Object.entries(JSON.parse(text) as Record<string, unknown>).reverse());
    const schedule = reordered['schedule'] as Record<string, unknown>;
    reordered['schedule'] = Object.fromEntries(Object.entries(schedule).reverse());
    const again2 = await h.call('POST', '/v1/jobs', { raw: JSON.stringify(reordered) });
    assert.equal(again2.status, 200, 'fields in another order, nested ones too');
    assert.equal(again2.json.job_id, first.json.job_id);
    const batch = await h.call('POST', '/v1/jobs:batch', { raw: `{"jobs":[${JSON.stringify(reordered)}]}` });
    assert.equal(batch.status, 200, batch.text);
    assert.equal(batch.json.results[0].status, 200, 'a batch item compares the same way');
    // Values matter: a payload that differs only in a nested value is another request.
    const otherValue = await h.call('POST', '/v1/jobs', { body: cronJob({ key: 'invoice-export', payload: { n: 2 } }) });
    assert.equal(otherValue.status, 409);
    assert.equal(otherValue.json.error.code, 'key_conflict');
    const other = await h.call('POST', '/v1/jobs', { body: cronJob({ key: 'invoice-export', pool: 'other' }) });
    assert.equal(other.status, 409);
    assert.equal(other.json.error.code, 'key_conflict');
    assert.equal(other.json.error.field, 'key');
  });
});

describe('jobs API: by key', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('finds a job by its key, and jobs by a key prefix', async () => {
    const created = [];
    for (const key of ['cron/host-a/1', 'cron/host-a/2', 'cron/host-b/1', 'cron%host']) {
      created.push((await h.call('POST', '/v1/jobs', { body: cronJob({ key }) })).json);
    }
    const byKey = await h.call('GET', '/v1/jobs?key=cron%2Fhost-a%2F2');
    assert.equal(byKey.status, 200);
    assert.deepEqual(byKey.json.items.map((job: { job_id: string }) => job.job_id), [created[1].job_id]);
    assert.deepEqual((await h.call('GET', '/v1/jobs?key=nope')).json.items, []);
    const byPrefix = await h.call('GET', '/v1/jobs?key_prefix=cron%2Fhost-a%2F');
    assert.deepEqual(byPrefix.json.items.map((job: { key: string }) => job.key).sort(), ['cron/host-a/1', 'cron/host-a/2']);
    const literal = await h.call('GET', '/v1/jobs?key_prefix=cron%25');
    assert.deepEqual(literal.json.items.map((job: { key: string }) => job.key), ['cron%host'], '% is no wildcard');
    const empty = await h.call('GET', '/v1/jobs?key=');
    assert.equal(empty.status, 400);
    assert.equal(empty.json.error.field, 'key');
  });
});

describe('jobs API: list, change, cancel', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('lists newest first, filters and pages', async () => {
    const ids: string[] = [];
    for (let index = 0; index < 3; index++) {
      const answer = await h.call('POST', '/v1/jobs', {
        body: cronJob({ pool: index === 2 ? 'reports' : 'billing', labels: { tier: index === 0 ? 'gold' : 'silver' } }),
      });
      ids.push(answer.json.job_id);
      await h.clock.advance(1000);
    }
    const all = await h.call('GET', '/v1/jobs');
    assert.equal(all.status, 200);
    assert.deepEqual(all.json.items.map((job: { job_id: string }) => job.job_id), [...ids].reverse());
    assert.equal(all.json.next_cursor, null);

    const byPool = await h.call('GET', '/v1/jobs?pool=reports');
    assert.deepEqual(byPool.json.items.map((job: { job_id: string }) => job.job_id), [ids[2]]);
    const byLabel = await h.call('GET', '/v1/jobs?label=tier%3Dgold');
    assert.deepEqual(byLabel.json.items.map((job: { job_id: string }) => job.job_id), [ids[0]]);

    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { json: { items: { job_id: string }[]; next_cursor: string | null } } =
        await h.call('GET', `/v1/jobs?limit=1${cursor === null ? '' : `&cursor=${cursor}`}`);
      assert.ok(page.json.items.length <= 1);
      seen.push(...page.json.items.map((job) => job.job_id));
      cursor = page.json.next_cursor;
    } while (cursor !== null);
    assert.deepEqual(seen, [...ids].reverse());

    await h.call('DELETE', `/v1/jobs/${ids[1]}`);
    const cancelled = await h.call('GET', '/v1/jobs?state=cancelled');
    assert.deepEqual(cancelled.json.items.map((job: { job_id: string }) => job.job_id), [ids[1]]);
  });

  it('patches the schedule and replaces the pending timer; merges retry field by field', async () => {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob({ tolerance_s: 0 }) });
    const jobId = created.json.job_id;
    const patched = await h.call('PATCH', `/v1/jobs/${jobId}`, {
      body: { schedule: { cron: '15 * * * *', tz: 'UTC' }, retry: { max_attempts: 2 }, payload: { n: 2 } },
    });
    assert.equal(patched.status, 200);
    const nextMs = Date.parse(patched.json.next_scheduled_at);
    assert.equal(new Date(nextMs).getUTCMinutes(), 15);
    assert.ok(nextMs > h.clock.nowMs() && nextMs <= h.clock.nowMs() + hourMs);
    assert.equal(patched.json.next_fire_at, patched.json.next_scheduled_at);
    assert.deepEqual(patched.json.retry, { max_attempts: 2, base_s: 30, max_s: 3600 });
    assert.deepEqual(patched.json.payload, { n: 2 });
    assert.equal(patched.json.job_id, jobId);

    const payloadOnly = await h.call('PATCH', `/v1/jobs/${jobId}`, { body: { payload: [1, 2] } });
    assert.equal(payloadOnly.json.next_fire_at, patched.json.next_fire_at);

    const keyChange = await h.call('PATCH', `/v1/jobs/${jobId}`, { body: { key: 'new' } });
    assert.equal(keyChange.status, 400);
    assert.equal(keyChange.json.error.field, 'key');
    const unknown = await h.call('PATCH', '/v1/jobs/j_0000000000000000000000000000', { body: { payload: 1 } });
    assert.equal(unknown.status, 404);
  });

  it('applies concurrent PATCHes one after another, none lost to a version race', async () => {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob({ labels: {} }) });
    const jobId = created.json.job_id;
    const answers = await Promise.all([1, 2, 3, 4].map((n) =>
      h.call('PATCH', `/v1/jobs/${jobId}`, { body: n % 2 === 0 ? { payload: { n } } : { lane: 'P0', tolerance_s: n } })));
    assert.deepEqual(answers.map((answer) => answer.status), [200, 200, 200, 200]);
    const final = await h.call('GET', `/v1/jobs/${jobId}`);
    assert.equal(final.json.lane, 'P0');
    assert.ok([1, 3].includes(final.json.tolerance_s));
    assert.ok([2, 4].includes(final.json.payload.n));
  });

  it('cancels idempotently and refuses to change a cancelled job', async () => {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob() });
    const jobId = created.json.job_id;
    const first = await h.call('DELETE', `/v1/jobs/${jobId}`);
    assert.equal(first.status, 200);
    assert.equal(first.json.state, 'cancelled');
    assert.equal(first.json.next_fire_at, null);
    const second = await h.call('DELETE', `/v1/jobs/${jobId}`);
    assert.equal(second.status, 200);
    assert.equal(second.json.state, 'cancelled');
    const patch = await h.call('PATCH', `/v1/jobs/${jobId}`, { body: { payload: 1 } });
    assert.equal(patch.status, 409);
    assert.equal(patch.json.error.code, 'invalid_state');
    const trigger = await h.call('POST', `/v1/jobs/${jobId}/trigger`);
    assert.equal(trigger.status, 409);
    assert.equal(trigger.json.error.code, 'invalid_state');
  });

  it('cancels by key prefix, prefixes with LIKE wildcards taken literally', async () => {
    for (const key of ['exp-1', 'exp-2', 'exp_3', 'other']) {
      assert.equal((await h.call('POST', '/v1/jobs', { body: delayJob({ key }) })).status, 201);
    }
    const underscore = await h.call('DELETE', '/v1/jobs?key_prefix=exp_');
    assert.deepEqual(underscore.json, { cancelled: 1 });
    const answer = await h.call('DELETE', '/v1/jobs?key_prefix=exp-');
    assert.equal(answer.status, 200);
    assert.deepEqual(answer.json, { cancelled: 2 });
    const again = await h.call('DELETE', '/v1/jobs?key_prefix=exp-');
    assert.deepEqual(again.json, { cancelled: 0 });
    const missing = await h.call('DELETE', '/v1/jobs');
    assert.equal(missing.status, 400);
    assert.equal(missing.json.error.field, 'key_prefix');
  });
});

describe('jobs API: pause, resume, trigger', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('pauses only active recurring jobs and resumes at the first occurrence after now', async () => {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob({ schedule: { cron: '0 * * * *' }, tolerance_s: 0 }) });
    const jobId = created.json.job_id;
    const paused = await h.call('POST', `/v1/jobs/${jobId}/pause`);
    assert.equal(paused.status, 200);
    assert.equal(paused.json.state, 'paused');
    assert.equal(paused.json.next_fire_at, null);
    const pausedAgain = await h.call('POST', `/v1/jobs/${jobId}/pause`, { body: {} });
    assert.equal(pausedAgain.status, 409);
    assert.equal(pausedAgain.json.error.code, 'invalid_state');

    await h.clock.advance(5.5 * hourMs);
    const resumed = await h.call('POST', `/v1/jobs/${jobId}/resume`, { body: {} });
    assert.equal(resumed.status, 200);
    assert.equal(resumed.json.state, 'active');
    assert.equal(resumed.json.next_scheduled_at, iso(startMs + 6 * hourMs));
    const resumedAgain = await h.call('POST', `/v1/jobs/${jobId}/resume`);
    assert.equal(resumedAgain.status, 409);

    const oneShot = await h.call('POST', '/v1/jobs', { body: delayJob() });
    const pauseOneShot = await h.call('POST', `/v1/jobs/${oneShot.json.job_id}/pause`);
    assert.equal(pauseOneShot.status, 409);
    assert.equal(pauseOneShot.json.error.code, 'invalid_state');
    const withBody = await h.call('POST', `/v1/jobs/${jobId}/pause`, { body: { now: true } });
    assert.equal(withBody.status, 400);
    assert.equal(withBody.json.error.code, 'invalid_request');
  });

  it('resumes a catch_up "all" job from the moment it was paused', async () => {
    const created = await h.call('POST', '/v1/jobs', {
      body: cronJob({ schedule: { cron: '0 * * * *' }, tolerance_s: 0, catch_up: 'all' }),
    });
    const jobId = created.json.job_id;
    const pausedAtMs = h.clock.nowMs();
    await h.call('POST', `/v1/jobs/${jobId}/pause`);
    await h.clock.advance(3 * hourMs);
    const resumed = await h.call('POST', `/v1/jobs/${jobId}/resume`);
    assert.equal(resumed.status, 200);
    const expectedMs = Math.floor(pausedAtMs / hourMs) * hourMs + hourMs;
    assert.equal(resumed.json.next_scheduled_at, iso(expectedMs));
    assert.ok(expectedMs < h.clock.nowMs(), 'the timer is overdue so the backlog drains in order');
  });

  it('triggers a run now and lists it among the job\'s runs', async () => {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob() });
    const jobId = created.json.job_id;
    const trigger = await h.call('POST', `/v1/jobs/${jobId}/trigger`);
    assert.equal(trigger.status, 201);
    assert.equal(trigger.json.job_id, jobId);
    assert.equal(trigger.json.status, 'ready');
    assert.equal(trigger.json.scheduled_at, iso(h.clock.nowMs()));
    const runs = await h.call('GET', `/v1/jobs/${jobId}/runs`);
    assert.equal(runs.status, 200);
    assert.deepEqual(runs.json.items.map((run: { run_id: string }) => run.run_id), [trigger.json.run_id]);
    const none = await h.call('GET', `/v1/jobs/${jobId}/runs?status=succeeded`);
    assert.deepEqual(none.json.items, []);
    const unknownJob = await h.call('GET', '/v1/jobs/j_0000000000000000000000000000/runs');
    assert.equal(unknownJob.status, 404);
  });
});

describe('jobs API: batch and preview', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('creates a batch in order, one bad item failing only itself', async () => {
    const answer = await h.call('POST', '/v1/jobs:batch', {
      body: {
        jobs: [
          delayJob({ key: 'a' }),
          cronJob({ schedule: { cron: '0 2 * *' } }),
          delayJob({ retry: { max_attempts: 0 } }),
          cronJob({ key: 'b' }),
          delayJob({ payload: 'x'.repeat(70_000) }),
        ],
      },
    });
    assert.equal(answer.status, 200);
    const statuses = answer.json.results.map((result: { status: number }) => result.status);
    assert.deepEqual(statuses, [201, 400, 400, 201, 413]);
    assert.equal(answer.json.results[0].job.key, 'a');
    assert.equal(answer.json.results[1].error.code, 'invalid_schedule');
    assert.equal(answer.json.results[1].error.field, 'schedule.cron');
    assert.equal(answer.json.results[2].error.code, 'invalid_request');
    assert.equal(answer.json.results[2].error.field, 'retry.max_attempts');
    assert.equal(answer.json.results[3].job.key, 'b');
    assert.equal(answer.json.results[4].error.code, 'payload_too_large');
    const list = await h.call('GET', '/v1/jobs');
    assert.equal(list.json.items.length, 2);
  });

  it('hashes each batch item as given, so a single create of the same text is the same job', async () => {
    const itemText = '{"key":"same","schedule":{"delay_s":60},"pool":"p"}';
    const batch = await h.call('POST', '/v1/jobs:batch', { raw: `{"jobs":[ ${itemText} ,\n${itemText}]}` });
    assert.deepEqual(batch.json.results.map((result: { status: number }) => result.status), [201, 200]);
    const single = await h.call('POST', '/v1/jobs', { raw: itemText });
    assert.equal(single.status, 200);
    assert.equal(single.json.job_id, batch.json.results[0].job.job_id);
    const different = await h.call('POST', '/v1/jobs', { raw: itemText.replace('60', '61') });
    assert.equal(different.status, 409);
  });

  it('answers ids alone with answer "id", errors as before; another answer value is refused whole', async () => {
    const answer = await h.call('POST', '/v1/jobs:batch', {
      body: { answer: 'id', jobs: [delayJob({ key: 'brief' }), cronJob({ schedule: { cron: '0 2 * *' } }), delayJob({ key: 'brief' })] },
    });
    assert.equal(answer.status, 200);
    const [created, bad, again] = answer.json.results;
    assert.equal(created.status, 201);
    assert.deepEqual(Object.keys(created).sort(), ['job_id', 'status'], 'no job in an accepted item');
    assert.equal(bad.status, 400);
    assert.equal(bad.error.field, 'schedule.cron');
    assert.deepEqual(again, { status: 200, job_id: created.job_id }, 'the same key answers the job already created');
    const job = await h.call('GET', `/v1/jobs/${created.job_id}`);
    assert.equal(job.json.key, 'brief');

    const before = (await h.call('GET', '/v1/jobs?limit=1000')).json.items.length;
    const refused = await h.call('POST', '/v1/jobs:batch', { body: { answer: 'run', jobs: [delayJob()] } });
    assert.equal(refused.status, 400);
    assert.equal(refused.json.error.code, 'invalid_request');
    assert.equal(refused.json.error.field, 'answer');
    assert.equal((await h.call('GET', '/v1/jobs?limit=1000')).json.items.length, before, 'nothing created');
  });

  it('cancels many jobs by id in one request: each item answers for itself, in order', async () => {
    const created = await h.call('POST', '/v1/jobs:batch', { body: { answer: 'id', jobs: [delayJob(), delayJob(), cronJob()] } });
    const [first, second, cron] = created.json.results.map((result: { job_id: string }) => result.job_id);
    const answer = await h.call('POST', '/v1/jobs:cancel', {
      body: { job_ids: [first, 'j_000000000000nosuch00000000000', cron, 'not an id!', first] },
    });
    assert.equal(answer.status, 200);
    const [one, unknown, recurring, malformed, again] = answer.json.results;
    assert.equal(one.status, 200);
    assert.equal(one.job.job_id, first);
    assert.equal(one.job.state, 'cancelled');
    assert.equal(one.job.next_fire_at, null);
    assert.deepEqual([unknown.status, unknown.error.code], [404, 'not_found']);
    assert.deepEqual([recurring.status, recurring.job.state], [200, 'cancelled']);
    assert.deepEqual([malformed.status, malformed.error.code], [404, 'not_found'], 'as DELETE /v1/jobs/{id} answers it');
    assert.deepEqual(again, one, 'cancel is idempotent, within a request too');
    const single = await h.call('DELETE', `/v1/jobs/${first}`);
    assert.deepEqual(single.json, one.job, 'the same job text as the single route');
    assert.equal((await h.call('GET', `/v1/jobs/${second}`)).json.state, 'active', 'a job not named is untouched');

    const brief = await h.call('POST', '/v1/jobs:cancel', { body: { answer: 'status', job_ids: [second, 'j_000000000000nosuch00000000000'] } });
    assert.deepEqual(brief.json.results[0], { status: 200 });
    assert.equal(brief.json.results[1].status, 404);
    assert.equal((await h.call('GET', `/v1/jobs/${second}`)).json.state, 'cancelled');
  });

  it('refuses a malformed batch cancel whole, cancelling nothing', async () => {
    const job = (await h.call('POST', '/v1/jobs', { body: delayJob() })).json;
    const bodies: [unknown, string][] = [
      [{ job_ids: [] }, 'job_ids'],
      [{ job_ids: Array.from({ length: 1001 }, () => job.job_id) }, 'job_ids'],
      [{ job_ids: [job.job_id, 7] }, 'job_ids'],
      [{ job_ids: job.job_id }, 'job_ids'],
      [{ job_ids: [job.job_id], answer: 'run' }, 'answer'],
      [{ job_ids: [job.job_id], extra: true }, 'extra'],
      [{}, 'job_ids'],
    ];
    for (const [body, field] of bodies) {
      const answer = await h.call('POST', '/v1/jobs:cancel', { body });
      assert.equal(answer.status, 400, JSON.stringify(body).slice(0, 80));
      assert.equal(answer.json.error.code, 'invalid_request');
      assert.match(answer.json.error.field ?? '', new RegExp(`^${field}`), JSON.stringify(answer.json.error));
    }
    assert.equal((await h.call('GET', `/v1/jobs/${job.job_id}`)).json.state, 'active');
  });

  it('refuses an empty or oversized batch', async () => {
    const empty = await h.call('POST', '/v1/jobs:batch', { body: { jobs: [] } });
    assert.equal(empty.status, 400);
    const tooMany = await h.call('POST', '/v1/jobs:batch', { body: { jobs: Array.from({ length: 1001 }, () => delayJob()) } });
    assert.equal(tooMany.status, 400);
    assert.equal(tooMany.json.error.field, 'jobs');
  });

  it('previews a schedule with local times, leaving skipped DST days out', async () => {
    const from = '2026-03-07T00:00:00.000Z';
    const shift = await h.call('GET', `/v1/schedules/preview?cron=30+2+*+*+*&tz=America/New_York&from=${from}&count=3`);
    assert.equal(shift.status, 200);
    assert.deepEqual(shift.json.items, [
      { scheduled_at: '2026-03-07T07:30:00.000Z', local: '2026-03-07T02:30:00.000-05:00' },
      { scheduled_at: '2026-03-08T07:30:00.000Z', local: '2026-03-08T03:30:00.000-04:00' },
      { scheduled_at: '2026-03-09T06:30:00.000Z', local: '2026-03-09T02:30:00.000-04:00' },
    ]);
    const skip = await h.call('GET', `/v1/schedules/preview?cron=30+2+*+*+*&tz=America/New_York&from=${from}&count=3&gap=skip`);
    assert.deepEqual(skip.json.items.map((item: { scheduled_at: string }) => item.scheduled_at),
      ['2026-03-07T07:30:00.000Z', '2026-03-09T06:30:00.000Z', '2026-03-10T06:30:00.000Z']);
    const fromNow = await h.call('GET', '/v1/schedules/preview?cron=0+*+*+*+*');
    assert.equal(fromNow.json.items.length, 10);
    assert.ok(Date.parse(fromNow.json.items[0].scheduled_at) > h.clock.nowMs());

    const badTz = await h.call('GET', '/v1/schedules/preview?cron=0+*+*+*+*&tz=Mars/Olympus');
    assert.equal(badTz.status, 400);
    assert.equal(badTz.json.error.code, 'invalid_timezone');
    assert.equal(badTz.json.error.field, 'tz');
    const tooMany = await h.call('GET', '/v1/schedules/preview?cron=0+*+*+*+*&count=1001');
    assert.equal(tooMany.status, 400);
    assert.equal(tooMany.json.error.field, 'count');
    const stringCount = await h.call('GET', '/v1/schedules/preview?cron=0+*+*+*+*&count=ten');
    assert.equal(stringCount.status, 400);
  });
});

describe('jobs API with dispatching at create turned off (TICKLER_DISPATCH_AT_CREATE=0)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ config: { dispatchAtCreate: false } });
  });
  after(async () => {
    await h.close();
  });

  it('writes the timer of a job due at its create, for the scheduler to fire, as before', async () => {
    const answer = await h.call('POST', '/v1/jobs', { body: { schedule: { at: '2026-02-01T10:00:00+01:00' }, pool: 'p' } });
    assert.equal(answer.status, 201);
    assert.equal(answer.json.state, 'active');
    assert.equal(answer.json.next_fire_at, '2026-02-01T09:00:00.000Z');
    const runs = await h.call('GET', `/v1/jobs/${answer.json.job_id}/runs`);
    assert.deepEqual(runs.json.items, []);
    const timers = await h.store.loadTimers({ shards: [shardOf(answer.json.job_id)], untilMs: Number.MAX_SAFE_INTEGER, limit: 100 });
    assert.deepEqual(timers.filter((timer) => timer.jobId === answer.json.job_id).map((timer) => timer.fireAtMs),
      [Date.parse('2026-02-01T09:00:00.000Z')]);
  });
});

describe('jobs API: owner, pager and the labels that require max_silence_s', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ config: { silenceRequiredLabel: { name: 'compliance', value: 'sox' } } });
  });
  after(async () => {
    await h.close();
  });

  it('keeps owner and pager, and changes them with a PATCH', async () => {
    const created = await h.call('POST', '/v1/jobs', { body: cronJob({ owner: 'team-billing', pager: 'pd:billing' }) });
    assert.equal(created.status, 201);
    assert.deepEqual([created.json.owner, created.json.pager], ['team-billing', 'pd:billing']);
    const patched = await h.call('PATCH', `/v1/jobs/${created.json.job_id}`, { body: { pager: null } });
    assert.deepEqual([patched.json.owner, patched.json.pager], ['team-billing', null]);
    const plain = await h.call('POST', '/v1/jobs', { body: cronJob() });
    assert.deepEqual([plain.json.owner, plain.json.pager], [null, null]);
    const bad = await h.call('POST', '/v1/jobs', { body: cronJob({ owner: 'x'.repeat(257) }) });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.field, 'owner');
  });

  it('refuses a job with the required label and no max_silence_s, on create and on PATCH, and writes nothing', async () => {
    const before = (await h.call('GET', '/v1/jobs?limit=100')).json.items.length;
    const refused = await h.call('POST', '/v1/jobs', { body: cronJob({ labels: { compliance: 'sox' } }) });
    assert.equal(refused.status, 400);
    assert.equal(refused.json.error.code, 'invalid_request');
    assert.equal(refused.json.error.field, 'max_silence_s');
    assert.match(refused.json.error.message, /compliance=sox/);
    assert.equal((await h.call('GET', '/v1/jobs?limit=100')).json.items.length, before, 'nothing written');
    const otherValue = await h.call('POST', '/v1/jobs', { body: cronJob({ labels: { compliance: 'none' } }) });
    assert.equal(otherValue.status, 201);
    const watched = await h.call('POST', '/v1/jobs', { body: cronJob({ labels: { compliance: 'sox' }, max_silence_s: 90_000 }) });
    assert.equal(watched.status, 201);
    const unwatch = await h.call('PATCH', `/v1/jobs/${watched.json.job_id}`, { body: { max_silence_s: null } });
    assert.equal(unwatch.status, 400);
    assert.equal(unwatch.json.error.field, 'max_silence_s');
    const relabel = await h.call('PATCH', `/v1/jobs/${otherValue.json.job_id}`, { body: { labels: { compliance: 'sox' } } });
    assert.equal(relabel.status, 400);
    assert.equal((await h.call('GET', `/v1/jobs/${watched.json.job_id}`)).json.max_silence_s, 90_000, 'unchanged');
  });
});
