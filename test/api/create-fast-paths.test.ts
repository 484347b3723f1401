// The create path's fast paths must answer exactly what the general ones do: a canonical
// `at` kept as given, a batch's rows written by multi-row INSERTs (with keyed items and
// near-horizon timers between them), and a batch answer encoded item by item.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { joinedUtf8, jobToWire, jobWireJson } from '../../src/api/wire.js';
import type { JobRecord } from '../../src/domain/types.js';
import { jobInput, jobSpec } from '../fixtures/jobs.js';
import { canonicalInstantMs } from '../../src/domain/instant.js';
import { iso, parseInstant } from '../../src/service/job-spec.js';
import { shardCount } from '../../src/limits.js';
import type { LoadedTimer } from '../../src/store/store.js';
import { delayJob, startHarness, type Harness } from './harness.js';

/** 9999-12-31T23:59:59.999Z */
const lastInstantMs = 253_402_300_799_999;
const allShards = Array.from({ length: shardCount }, (_, shard) => shard);

void describe('canonicalInstantMs', () => {
  void it('reads any instant toISOString writes as parseInstant does', () => {
    fc.assert(fc.property(fc.integer({ min: 0, max: lastInstantMs }), (instantMs) => {
      const text = iso(instantMs);
      assert.equal(canonicalInstantMs(text), instantMs);
      assert.equal(parseInstant(text, 'at'), instantMs);
    }), { numRuns: 5_000 });
  });

  void it('leaves every other text to the general path', () => {
    const others = [
      '2026-02-29T00:00:00.000Z', // no such day
      '2026-04-31T00:00:00.000Z',
      '2026-13-01T00:00:00.000Z',
      '2026-00-01T00:00:00.000Z',
      '2026-03-00T00:00:00.000Z',
      '2026-03-01T24:00:00.000Z',
      '2026-03-01T23:60:00.000Z',
      '2026-03-01T23:59:60.000Z',
      '1969-12-31T23:59:59.999Z', // before 1970
      '2026-03-01t10:00:00.000z', // lower case: valid RFC 3339, not the normal form
      '2026-03-01T10:00:00Z',
      '2026-03-01T10:00:00.0000Z',
      '2026-03-01T10:00:00.000+00:00',
      '+02026-03-01T10:00:00.000Z',
      '2026-03-01T10:00:0a.000Z',
      '2026-03-01T10:00:00.00-Z',
      '２０２６-03-01T10:00:00.000Z',
      '',
    ];
    for (const text of others) assert.equal(canonicalInstantMs(text), null, text);
    assert.equal(canonicalInstantMs('2024-02-29T12:00:00.000Z'), Date.UTC(2024, 1, 29, 12));
    assert.equal(canonicalInstantMs('2000-02-29T00:00:00.000Z'), Date.UTC(2000, 1, 29));
    assert.equal(canonicalInstantMs('2100-02-29T00:00:00.000Z'), null);
  });
});

void describe('joinedUtf8', () => {
  void it('is the UTF-8 of the joined text, whatever the items hold', () => {
    fc.assert(fc.property(fc.string(), fc.array(fc.string({ unit: 'binary', maxLength: 10_000 }), { maxLength: 30 }), fc.string(),
      (head, items, tail) => {
        assert.deepEqual(joinedUtf8(head, items, (item) => item, tail), Buffer.from(head + items.join(',') + tail));
      }), { numRuns: 100 });
  });

  void it('grows past its first 64 KiB, also where an item needs more bytes than code units', () => {
    const items = Array.from({ length: 50 }, (_, index) => (index % 2 === 0 ? '\u2603' : '\ud83d\ude00 x').repeat(1_000));
    assert.deepEqual(joinedUtf8('[', items, (item) => item, ']'), Buffer.from(`[${items.join(',')}]`));
    const huge = ['x', '\u00e9'.repeat(200_000)];
    assert.deepEqual(joinedUtf8('[', huge, (item) => item, ']'), Buffer.from(`[${huge.join(',')}]`));
  });
});

void describe('jobWireJson of a one-shot job', () => {
  void it('writes its times from its at where they are that instant, and formats them where not', () => {
    const atMs = Date.UTC(2026, 10, 29, 12, 0, 0, 7);
    const base = jobInput(jobSpec({ at: iso(atMs) }), atMs - 60_000).job;
    const variants: JobRecord[] = [
      base,
      { ...base, nextFireAtMs: atMs + 500 }, // jitter: the fire time is not the at
      { ...base, nextFireAtMs: null, nextScheduledAtMs: null, state: 'done' },
      // An at in another (valid) form is formatted, never copied.
      { ...base, spec: { ...base.spec, schedule: { at: '2026-11-29T13:00:00.007+01:00' } } },
    ];
    for (const job of variants) assert.equal(jobWireJson(job), JSON.stringify(jobToWire(job)));
  });
});

void describe('batch creates through multi-row inserts', () => {
  let h: Harness;
  const announced: LoadedTimer[] = [];
  before(async () => {
    h = await startHarness();
    h.store.onNearTimers((timers) => announced.push(...timers));
  });
  after(async () => {
    await h.close();
  });

  void it('creates every item in order, keyed and near ones among the rest, each with its own timer', async () => {
    // 250 items: full chunks of 100 rows and a rest, broken by keyed items, a repeated key,
    // near-horizon timers (announced with their ids) and a bad item.
    const jobs = Array.from({ length: 250 }, (_, index): Record<string, unknown> => {
      if (index === 7 || index === 130) return delayJob({ key: `k-${index}`, payload: { index } });
      if (index === 131) return delayJob({ key: 'k-130', payload: { index: 130 } });
      if (index === 140) return delayJob({ retry: { max_attempts: 0 } });
      if (index % 50 === 3) return delayJob({ schedule: { delay_s: 5 }, payload: { index } });
      return { schedule: { at: new Date(h.clock.nowMs() + 86_400_000 + index * 1_000).toISOString() }, pool: 'billing', payload: { index } };
    });
    const answer = await h.call('POST', '/v1/jobs:batch', { body: { jobs } });
    assert.equal(answer.status, 200);
    const results = answer.json.results as { status: number; job?: { job_id: string; payload: { index: number }; next_fire_at: string } }[];
    assert.equal(results.length, jobs.length);
    results.forEach((result, index) => {
      const expected = index === 140 ? 400 : index === 131 ? 200 : 201;
      assert.equal(result.status, expected, `item ${index}`);
      if (expected !== 400) assert.equal(result.job!.payload.index, index === 131 ? 130 : index);
    });
    assert.equal(results[131]!.job!.job_id, results[130]!.job!.job_id);

    const created = results.filter((result) => result.status === 201).map((result) => result.job!);
    const timers = await h.store.loadTimers({ shards: allShards, untilMs: h.clock.nowMs() + 2 * 86_400_000, limit: 1_000 });
    const timerOf = new Map(timers.map((timer) => [timer.jobId, timer]));
    assert.equal(timers.length, created.length);
    for (const job of created) {
      assert.equal(iso(timerOf.get(job.job_id)!.fireAtMs), job.next_fire_at);
      const read = await h.call('GET', `/v1/jobs/${job.job_id}`);
      assert.deepEqual(read.json, job);
    }
    // The near ones were announced with the ids their rows got.
    const near = created.filter((job) => job.payload.index % 50 === 3);
    assert.deepEqual(announced.map((timer) => timer.jobId).sort(), near.map((job) => job.job_id).sort());
    for (const timer of announced) assert.equal(timer.timerId, timerOf.get(timer.jobId)!.timerId);
  });

  void it('answers non-ASCII payloads as valid UTF-8 JSON', async () => {
    const payload = { text: 'snow \u2603, smile \ud83d\ude00, \u00e9t\u00e9, \u4e2d\u6587' };
    const answer = await h.call('POST', '/v1/jobs:batch', { body: { jobs: [delayJob({ payload }), delayJob({ payload })] } });
    assert.equal(answer.status, 200);
    for (const result of answer.json.results) assert.deepEqual(result.job.payload, payload);
  });
});
