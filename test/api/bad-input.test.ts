/**
 * TESTING.md "Bad input": each case answers a specific 4xx and leaves no partial state.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { cronJob, delayJob, startHarness, type Harness } from './harness.js';
import { listen, rawRequest, connect, readAnswer } from './raw-http.js';
import { TicklerError } from '../../src/errors.js';
import type { Store } from '../../src/store/store.js';
import { openTestStore, postgresSkipReason } from '../store/postgres-harness.js';

interface Case {
  name: string;
  body?: unknown;
  raw?: string;
  headers?: Record<string, string>;
  status: number;
  code: string;
  field?: string;
}

function nested(depth: number): unknown {
  let value: unknown = 1;
  for (let level = 0; level < depth; level++) value = { a: value };
  return value;
}

const rejectedCreates: Case[] = [
  { name: 'payload one byte over the limit', body: delayJob({ payload: 'x'.repeat(65_535) }), status: 413, code: 'payload_too_large', field: 'payload' },
  { name: 'payload far over the limit', body: delayJob({ payload: 'x'.repeat(900_000) }), status: 413, code: 'payload_too_large', field: 'payload' },
  { name: 'body over 1 MiB', body: delayJob({ payload: 'x'.repeat(1_100_000) }), status: 413, code: 'payload_too_large' },
  { name: 'deep nesting', body: delayJob({ payload: nested(200) }), status: 400, code: 'invalid_request' },
  // PostgreSQL's JSON functions cannot read a document holding \u0000: refused on every store.
  { name: 'NUL in a payload string', body: delayJob({ payload: { note: 'a\u0000b' } }), status: 400, code: 'invalid_request', field: 'payload' },
  { name: 'NUL in a payload key', body: delayJob({ payload: [{ 'k\u0000': 1 }] }), status: 400, code: 'invalid_request', field: 'payload' },
  { name: 'lone surrogate in a payload string', body: delayJob({ payload: { note: 'a\ud800b' } }), status: 400, code: 'invalid_request', field: 'payload' },
  { name: 'lone low surrogate in a payload key', body: delayJob({ payload: { ['\udc00']: 1 } }), status: 400, code: 'invalid_request', field: 'payload' },
  { name: 'lone surrogate in the key', body: delayJob({ key: 'k-\ud83d' }), status: 400, code: 'invalid_request', field: 'key' },
  { name: 'lone surrogate in a label', body: delayJob({ labels: { tier: '\udfff' } }), status: 400, code: 'invalid_request', field: 'labels' },
  { name: 'lone surrogate in a resource', body: delayJob({ resources: ['db-\ud800'] }), status: 400, code: 'invalid_request', field: 'resources' },
  { name: 'very deep nesting', raw: `${'['.repeat(100_000)}${']'.repeat(100_000)}`, status: 400, code: 'invalid_request' },
  { name: '__proto__ key at the top', raw: '{"__proto__": {"polluted": true}, "schedule": {"delay_s": 1}, "pool": "p"}', status: 400, code: 'invalid_request' },
  { name: '__proto__ key in the payload', raw: '{"schedule": {"delay_s": 1}, "pool": "p", "payload": {"x": {"__proto__": {"polluted": true}}}}', status: 400, code: 'invalid_request' },
  { name: 'escaped __proto__ key', raw: '{"schedule": {"delay_s": 1}, "pool": "p", "payload": {"\\u005f_proto__": {"polluted": true}}}', status: 400, code: 'invalid_request' },
  { name: 'constructor.prototype', raw: '{"schedule": {"delay_s": 1}, "pool": "p", "payload": {"constructor": {"prototype": {"polluted": true}}}}', status: 400, code: 'invalid_request' },
  { name: 'not JSON', raw: '{"schedule": ', status: 400, code: 'invalid_json' },
  { name: 'empty JSON body', raw: '', status: 400, code: 'invalid_request' },
  { name: 'a JSON array', raw: '[]', status: 400, code: 'invalid_request' },
  { name: 'wrong content type', raw: 'schedule=1', headers: { 'content-type': 'text/plain' }, status: 415, code: 'unsupported_media_type' },
  { name: 'form content type', raw: 'a=1', headers: { 'content-type': 'application/x-www-form-urlencoded' }, status: 415, code: 'unsupported_media_type' },
  { name: 'unknown field', body: delayJob({ colour: 'red' }), status: 400, code: 'invalid_request', field: 'colour' },
  { name: 'unknown nested field', body: delayJob({ retry: { max_attempts: 3, jitter: 1 } }), status: 400, code: 'invalid_request', field: 'retry.jitter' },
  { name: 'a string for a number', body: delayJob({ lease_s: '60' }), status: 400, code: 'invalid_request', field: 'lease_s' },
  { name: 'a string for delay_s', body: { schedule: { delay_s: '5' }, pool: 'p' }, status: 400, code: 'invalid_request', field: 'schedule.delay_s' },
  { name: 'missing pool', body: { schedule: { delay_s: 5 } }, status: 400, code: 'invalid_request', field: 'pool' },
  { name: 'missing schedule', body: { pool: 'p' }, status: 400, code: 'invalid_request', field: 'schedule' },
  { name: 'two kinds of schedule', body: { schedule: { delay_s: 5, cron: '* * * * *' }, pool: 'p' }, status: 400, code: 'invalid_request', field: 'schedule' },
  { name: 'tz without cron', body: { schedule: { delay_s: 5, tz: 'UTC' }, pool: 'p' }, status: 400, code: 'invalid_request', field: 'schedule.tz' },
  { name: 'unknown lane', body: delayJob({ lane: 'P9' }), status: 400, code: 'invalid_request', field: 'lane' },
  { name: 'cron that never fires', body: cronJob({ schedule: { cron: '0 0 30 2 *' } }), status: 400, code: 'invalid_schedule', field: 'schedule.cron' },
  { name: 'cron field out of range', body: cronJob({ schedule: { cron: '0 25 * * *' } }), status: 400, code: 'invalid_schedule', field: 'schedule.cron' },
  { name: 'cron step of zero', body: cronJob({ schedule: { cron: '*/0 * * * *' } }), status: 400, code: 'invalid_schedule', field: 'schedule.cron' },
  { name: 'cron with four fields', body: cronJob({ schedule: { cron: '0 2 * *' } }), status: 400, code: 'invalid_schedule', field: 'schedule.cron' },
  { name: 'empty cron', body: cronJob({ schedule: { cron: '' } }), status: 400, code: 'invalid_schedule', field: 'schedule.cron' },
  {
    name: 'cron with a 10 kB list',
    body: cronJob({ schedule: { cron: `${Array.from({ length: 2500 }, (_, index) => index % 60).join(',')} * * * *` } }),
    status: 400, code: 'invalid_schedule', field: 'schedule.cron',
  },
  { name: 'unknown time zone', body: cronJob({ schedule: { cron: '0 2 * * *', tz: 'Mars/Olympus' } }), status: 400, code: 'invalid_timezone', field: 'schedule.tz' },
  { name: 'at beyond the year 9999', body: { schedule: { at: '10000-01-01T00:00:00.000Z' }, pool: 'p' }, status: 400, code: 'invalid_schedule', field: 'schedule.at' },
  { name: 'at with an expanded year', body: { schedule: { at: '+275760-09-13T00:00:00.000Z' }, pool: 'p' }, status: 400, code: 'invalid_schedule', field: 'schedule.at' },
  { name: 'at that is NaN', body: { schedule: { at: 'NaN' }, pool: 'p' }, status: 400, code: 'invalid_schedule', field: 'schedule.at' },
  { name: 'at that is not a date', body: { schedule: { at: '2026-02-30T00:00:00Z' }, pool: 'p' }, status: 400, code: 'invalid_schedule', field: 'schedule.at' },
  { name: 'delay_s that is infinite', raw: '{"schedule": {"delay_s": 1e400}, "pool": "p"}', status: 400, code: 'invalid_request', field: 'schedule.delay_s' },
  { name: 'negative delay_s', body: { schedule: { delay_s: -1 }, pool: 'p' }, status: 400, code: 'invalid_request', field: 'schedule.delay_s' },
  { name: 'retry attempts zero', body: delayJob({ retry: { max_attempts: 0 } }), status: 400, code: 'invalid_request', field: 'retry.max_attempts' },
  { name: 'retry attempts negative', body: delayJob({ retry: { max_attempts: -3 } }), status: 400, code: 'invalid_request', field: 'retry.max_attempts' },
  { name: 'retry attempts huge', body: delayJob({ retry: { max_attempts: 1e12 } }), status: 400, code: 'invalid_request', field: 'retry.max_attempts' },
  { name: 'retry base zero', body: delayJob({ retry: { base_s: 0 } }), status: 400, code: 'invalid_request', field: 'retry.base_s' },
  { name: 'retry base huge', body: delayJob({ retry: { base_s: 1e9 } }), status: 400, code: 'invalid_request', field: 'retry.base_s' },
  { name: 'retry cap below base', body: delayJob({ retry: { base_s: 60, max_s: 30 } }), status: 400, code: 'invalid_request', field: 'retry.max_s' },
  { name: 'lease_s below 5', body: delayJob({ lease_s: 4 }), status: 400, code: 'invalid_request', field: 'lease_s' },
  { name: 'lease_s above 900', body: delayJob({ lease_s: 901 }), status: 400, code: 'invalid_request', field: 'lease_s' },
  { name: 'negative tolerance', body: delayJob({ tolerance_s: -1 }), status: 400, code: 'invalid_request', field: 'tolerance_s' },
  { name: 'key with NUL', body: delayJob({ key: 'a\u0000b' }), status: 400, code: 'invalid_request', field: 'key' },
  { name: 'key with a newline', body: delayJob({ key: 'a\nb' }), status: 400, code: 'invalid_request', field: 'key' },
  { name: 'very long key', body: delayJob({ key: 'k'.repeat(10_000) }), status: 400, code: 'invalid_request', field: 'key' },
  { name: 'pool with a quote', body: delayJob({ pool: 'bill\'ing' }), status: 400, code: 'invalid_request', field: 'pool' },
  { name: 'label value not a string', body: delayJob({ labels: { tier: 1 } }), status: 400, code: 'invalid_request', field: 'labels.tier' },
  { name: 'label name with =', body: delayJob({ labels: { 'a=b': 'c' } }), status: 400, code: 'invalid_request', field: 'labels' },
  // Names are held to the 256 characters of a value: a long name would get around the payload limit.
  { name: 'label name of 257 characters', body: delayJob({ labels: { ['n'.repeat(257)]: 'v' } }), status: 400, code: 'invalid_request', field: 'labels' },
  { name: 'label name of 1 MB', body: delayJob({ labels: { ['n'.repeat(1_000_000)]: 'v' } }), status: 400, code: 'invalid_request', field: 'labels' },
];

describe('bad input to POST /v1/jobs', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  for (const badCase of rejectedCreates) {
    it(`answers ${badCase.status} ${badCase.code} for ${badCase.name}, creating nothing`, async () => {
      const answer = await h.call('POST', '/v1/jobs', {
        ...(badCase.raw === undefined ? { body: badCase.body } : { raw: badCase.raw }),
        ...(badCase.headers === undefined ? {} : { headers: badCase.headers }),
      });
      assert.equal(answer.status, badCase.status, answer.text.slice(0, 300));
      assert.equal(answer.json.error.code, badCase.code);
      assert.equal(typeof answer.json.error.message, 'string');
      if (badCase.field !== undefined) assert.equal(answer.json.error.field, badCase.field, answer.json.error.message);
      assert.deepEqual((await h.call('GET', '/v1/jobs')).json.items, []);
      assert.equal(({} as Record<string, unknown>)['polluted'], undefined);
      assert.equal(Object.prototype.hasOwnProperty.call(Object.prototype, 'polluted'), false);
    });
  }
});

describe('input at the limits is accepted', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('takes a payload of exactly 65,536 bytes of JSON', async () => {
    const payload = 'x'.repeat(65_534); // plus two quotes
    assert.equal(Buffer.byteLength(JSON.stringify(payload)), 65_536);
    const answer = await h.call('POST', '/v1/jobs', { body: delayJob({ payload }) });
    assert.equal(answer.status, 201);
    assert.equal(answer.json.payload, payload);
  });

  it('takes a batch body over 1 MiB (up to 16 MiB)', async () => {
    const jobs = Array.from({ length: 40 }, () => delayJob({ payload: 'y'.repeat(40_000) }));
    const answer = await h.call('POST', '/v1/jobs:batch', { body: { jobs } });
    assert.equal(answer.status, 200);
    assert.equal(answer.json.results.length, 40);
  });

  it('takes a payload with a backslash before "u0000" (not a NUL) and other control characters', async () => {
    const payload = { text: '\\u0000 \\\\u0000 \\ud800', controls: '\u0001\n\t', paired: '\ud83d\ude00' };
    const created = await h.call('POST', '/v1/jobs', { body: delayJob({ payload }) });
    assert.equal(created.status, 201);
    assert.deepEqual(created.json.payload, payload);
  });

  it('takes hostile but printable keys literally', async () => {
    for (const key of ['\'; DROP TABLE jobs;--', '../../etc/passwd', 'a/b', '%_%']) {
      const answer = await h.call('POST', '/v1/jobs', { body: delayJob({ key }) });
      assert.equal(answer.status, 201, key);
      assert.equal(answer.json.key, key);
    }
  });

  it('takes a label name of exactly 256 characters', async () => {
    const name = 'n'.repeat(256);
    const answer = await h.call('POST', '/v1/jobs', { body: delayJob({ labels: { [name]: 'v' } }) });
    assert.equal(answer.status, 201);
    assert.deepEqual(answer.json.labels, { [name]: 'v' });
    const longer = await h.call('PATCH', `/v1/jobs/${answer.json.job_id}`, { body: { labels: { [`${name}x`]: 'v' } } });
    assert.equal(longer.status, 400, 'and a PATCH is held to it too');
    assert.equal(longer.json.error.field, 'labels');
  });

  it('takes a cron that fires every second', async () => {
    const answer = await h.call('POST', '/v1/jobs', { body: cronJob({ schedule: { cron: '* * * * * *' } }) });
    assert.equal(answer.status, 201);
    assert.equal(answer.json.next_scheduled_at, new Date(h.clock.nowMs() + 1000).toISOString());
  });
});

describe('hostile ids', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  const ids = ['\'', '%27%3B--', ';--', '..', '%2E%2E', '%2F', 'a%2Fb', '%00', 'a%00b', '%0A', 'x%0D%0Ay', 'k'.repeat(10_000), '%E2%80%AE', '%FF'];
  const dotSegments = new Set(['..', '%2E%2E']);
  for (const id of ids) {
    it(`answers 404 or 400, never 500, for the id ${JSON.stringify(id.slice(0, 24))}`, async () => {
      for (const [method, url, body] of [
        ['GET', `/v1/jobs/${id}`, undefined],
        ['PATCH', `/v1/jobs/${id}`, { payload: 1 }],
        ['DELETE', `/v1/jobs/${id}`, undefined],
        ['POST', `/v1/jobs/${id}/pause`, undefined],
        ['POST', `/v1/jobs/${id}/trigger`, undefined],
        ['GET', `/v1/jobs/${id}/runs`, undefined],
        ['GET', `/v1/runs/${id}`, undefined],
        ['POST', `/v1/runs/${id}/replay`, undefined],
        ['POST', `/v1/runs/${id}/heartbeat`, { fencing_token: '1' }],
        ['POST', `/v1/runs/${id}/complete`, { fencing_token: '1', status: 'succeeded' }],
      ] as const) {
        const answer = await h.call(method, url, { body });
        if (dotSegments.has(id) && answer.status === 200) continue; // `/v1/jobs/../runs` is `/v1/runs`: a URL, not an id
        assert.ok(answer.status === 404 || answer.status === 400, `${method} ${url.slice(0, 60)}: ${answer.status} ${answer.text.slice(0, 200)}`);
        assert.equal(typeof answer.json.error.code, 'string');
      }
    });
  }
});

describe('other bad input', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h.close();
  });

  it('answers unknown routes and methods with not_found', async () => {
    for (const [method, url] of [['GET', '/v2/jobs'], ['PUT', '/v1/jobs'], ['GET', '/v1/jobs/a/b/c'], ['POST', '/v1/clock/rewind']]) {
      const answer = await h.call(method!, url!);
      assert.equal(answer.status, 404);
      assert.equal(answer.json.error.code, 'not_found');
    }
  });

  it('checks query parameters strictly', async () => {
    const cases: [string, string][] = [
      ['/v1/jobs?limit=0', 'limit'],
      ['/v1/jobs?limit=1001', 'limit'],
      ['/v1/jobs?limit=ten', 'limit'],
      ['/v1/jobs?state=sleeping', 'state'],
      ['/v1/jobs?colour=red', 'colour'],
      ['/v1/jobs?cursor=%00', 'cursor'],
      ['/v1/runs?status=exploded', 'status'],
      ['/v1/runs?until=2026-13-01T00:00:00Z', 'until'],
    ];
    for (const [url, field] of cases) {
      const answer = await h.call('GET', url);
      assert.equal(answer.status, 400, url);
      assert.equal(answer.json.error.code, 'invalid_request');
      assert.equal(answer.json.error.field, field, url);
    }
  });

  it('reads numbers in a query only in decimal digits, on every list route and the preview', async () => {
    const job = await h.call('POST', '/v1/jobs', { body: delayJob() });
    const routes = ['/v1/jobs', '/v1/jobs:silent', `/v1/jobs/${job.json.job_id}/runs`, '/v1/runs', '/v1/dlq'];
    // TypeBox's conversion alone reads each as a number: 1.9 as 1, 0x2 as 2, 1e2 as 100, and so on.
    for (const text of ['1.9', '0x2', '1e2', '+5', '%205', '5%20', '0b11', '2.0', 'Infinity']) {
      for (const route of routes) {
        const answer = await h.call('GET', `${route}?limit=${text}`);
        assert.equal(answer.status, 400, `${route}?limit=${text}: ${answer.text}`);
        assert.equal(answer.json.error.code, 'invalid_request');
        assert.equal(answer.json.error.field, 'limit');
      }
      const preview = await h.call('GET', `/v1/schedules/preview?cron=${encodeURIComponent('0 2 * * *')}&count=${text}`);
      assert.equal(preview.status, 400, `count=${text}`);
      assert.equal(preview.json.error.field, 'count');
    }
    for (const route of routes) assert.equal((await h.call('GET', `${route}?limit=2`)).status, 200, route);
  });

  it('refuses two Authorization headers, with keys and in open mode', async () => {
    const keyed = await startHarness({ apiKeys: new Map([['key-a', 'team-a'], ['key-b', 'team-b']]) });
    try {
      for (const harness of [keyed, h]) {
        for (const headers of [['Bearer key-a', 'Bearer key-b'], ['Bearer key-a', 'Bearer key-a']]) {
          // inject sends each value of an array as a header of its own, as on the wire (its types say string only).
          const answer = await harness.app.inject({ method: 'GET', url: '/v1/jobs', headers: { authorization: headers as unknown as string } });
          assert.equal(answer.statusCode, 400, answer.body);
          assert.equal(JSON.parse(answer.body).error.code, 'invalid_request');
        }
      }
      const one = await keyed.app.inject({ method: 'GET', url: '/v1/jobs', headers: { authorization: 'Bearer key-a' } });
      assert.equal(one.statusCode, 200);
    } finally {
      await keyed.close();
    }
  });

  it('checks worker bodies', async () => {
    const lease = await h.call('POST', '/v1/workers/lease', { body: { pool: 'p', max: 0 } });
    assert.equal(lease.status, 400);
    assert.equal(lease.json.error.field, 'max');
    const wait = await h.call('POST', '/v1/workers/lease', { body: { pool: 'p', wait_s: 61 } });
    assert.equal(wait.json.error.field, 'wait_s');
    for (const aheadMs of [-1, 1.5, 10_001, '50']) {
      const ahead = await h.call('POST', '/v1/workers/lease', { body: { pool: 'p', ahead_ms: aheadMs } });
      assert.equal(ahead.status, 400, String(aheadMs));
      assert.equal(ahead.json.error.field, 'ahead_ms');
    }
    for (const maxReady of [0, -1, 2.5, 1_001, '5']) {
      const ready = await h.call('POST', '/v1/workers/lease', { body: { pool: 'p', max: 10, ahead_ms: 50, max_ready: maxReady } });
      assert.equal(ready.status, 400, String(maxReady));
      assert.equal(ready.json.error.field, 'max_ready');
    }
    const status = await h.call('POST', '/v1/runs/00000000000000000000000000000000/complete', {
      body: { fencing_token: '1', status: 'done' },
    });
    assert.equal(status.status, 400);
    assert.equal(status.json.error.field, 'status');
  });

  it('never answers 500 to fuzzed create bodies, and answers quickly', async () => {
    await fc.assert(fc.asyncProperty(fc.jsonValue({ maxDepth: 6 }), async (value) => {
      const startedMs = performance.now();
      const answer = await h.call('POST', '/v1/jobs', { body: value });
      assert.ok(answer.status < 500, `${answer.status} for ${JSON.stringify(value).slice(0, 200)}`);
      assert.ok(performance.now() - startedMs < 2000);
    }), { numRuns: 150 });
    await fc.assert(fc.asyncProperty(fc.string({ maxLength: 80 }), fc.string({ maxLength: 40 }), async (cron, tz) => {
      const answer = await h.call('POST', '/v1/jobs', { body: { schedule: { cron, tz }, pool: 'fuzz' } });
      assert.ok(answer.status === 201 || answer.status === 400, `${answer.status} for ${JSON.stringify({ cron, tz })}: ${answer.text}`);
    }), { numRuns: 200 });
    await fc.assert(fc.asyncProperty(fc.string({ maxLength: 200 }), async (text) => {
      const answer = await h.call('POST', '/v1/jobs', { raw: text });
      assert.ok(answer.status >= 400 && answer.status < 500, `${answer.status} for ${JSON.stringify(text)}`);
    }), { numRuns: 150 });
  });
});

describe('store outage', () => {
  function failing(store: Store, error: () => Error): Store {
    return new Proxy(store, {
      get(target, property, receiver) {
        const value = Reflect.get(target, property, receiver) as unknown;
        if (typeof value !== 'function') return value;
        // Registrations touch no storage: they work through an outage.
        if (property === 'close' || property === 'onRunsReady' || property === 'onNearTimers' || property === 'setParkedWaiters') {
          return value.bind(target);
        }
        return () => Promise.reject(error());
      },
    });
  }

  for (const [name, error] of [
    ['a TicklerError unavailable', () => new TicklerError('unavailable', 'store unreachable')],
    ['a SQLite I/O error', () => Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR' })],
    ['a refused PostgreSQL connection', () => Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })],
  ] as const) {
    it(`answers 503 unavailable on ${name}`, async () => {
      const h = await startHarness({ wrapStore: (store) => failing(store, error) });
      try {
        for (const [method, url, body] of [
          ['POST', '/v1/jobs', delayJob()],
          ['GET', '/v1/jobs', undefined],
          ['GET', '/v1/jobs/j_0000000000000000000000000000', undefined],
          ['POST', '/v1/workers/lease', { pool: 'p' }],
          ['POST', '/v1/workers/lease', { pool: 'p', wait_s: 1 }],
        ] as const) {
          const answer = await h.call(method, url, { body });
          assert.equal(answer.status, 503, `${method} ${url}`);
          assert.equal(answer.json.error.code, 'unavailable');
          assert.equal(answer.headers['retry-after'], '1');
        }
      } finally {
        await h.close();
      }
    });
  }
});

describe('what the HTTP parser refuses, on a real socket', () => {
  let h: Harness;
  let port: number;
  before(async () => {
    h = await startHarness({ apiKeys: new Map([['key-a', 'team-a'], ['key-b', 'team-b']]) });
    port = await listen(h.app);
  });
  after(async () => {
    await h.close();
  });

  for (const [name, request] of [
    ['a URL over 16 KiB', `GET /v1/jobs?pool=${'p'.repeat(17_000)} HTTP/1.1\r\nhost: x\r\n\r\n`],
    ['a header over 16 KiB', `GET /v1/jobs HTTP/1.1\r\nhost: x\r\nx-padding: ${'a'.repeat(17_000)}\r\n\r\n`],
    ['headers over 16 KiB together', `GET /v1/jobs HTTP/1.1\r\nhost: x\r\n${Array.from({ length: 200 }, (_, index) => `x-h${index}: ${'a'.repeat(100)}\r\n`).join('')}\r\n`],
  ] as const) {
    it(`answers 431 headers_too_large in the error shape for ${name}`, async () => {
      const answer = await rawRequest(port, request);
      assert.equal(answer.status, 431);
      assert.equal(answer.json.error.code, 'headers_too_large');
      assert.equal(typeof answer.json.error.message, 'string');
      assert.ok(answer.closed);
    });
  }

  it('answers 400 invalid_request in the error shape to bytes that are not HTTP', async () => {
    const answer = await rawRequest(port, 'HELLO\r\n\r\n');
    assert.equal(answer.status, 400);
    assert.equal(answer.json.error.code, 'invalid_request');
  });

  it('refuses two Authorization headers as sent on the wire', async () => {
    const socket = await connect(port);
    try {
      const answer = await readAnswer(socket, 'GET /v1/jobs HTTP/1.1\r\nhost: x\r\nauthorization: Bearer key-a\r\nAuthorization: Bearer key-b\r\n\r\n');
      assert.equal(answer.status, 400);
      assert.equal(answer.json.error.code, 'invalid_request');
    } finally {
      socket.destroy();
    }
  });
});

const postgresSkip = await postgresSkipReason();

/**
 * PostgreSQL text cannot hold U+0000, yet a worker must be able to record a failure whatever
 * its error text: on both stores the NUL is kept escaped, and the run reads the same.
 */
for (const kind of ['sqlite', 'postgres'] as const) {
  describe(`a completion whose error holds NUL, on ${kind}`, { skip: kind === 'postgres' ? postgresSkip ?? false : false }, () => {
    it('is recorded, the NUL kept as the text \\u0000, single and batched', async () => {
      const handle = kind === 'postgres' ? await openTestStore() : null;
      const h = await startHarness(handle === null ? {} : { store: { store: handle.store, close: () => handle.cleanup() } });
      try {
        for (let index = 0; index < 2; index++) {
          const created = await h.call('POST', '/v1/jobs', { body: { schedule: { delay_s: 0 }, pool: 'nul', retry: { max_attempts: 1 } } });
          assert.equal(created.status, 201);
        }
        const leased = await h.call('POST', '/v1/workers/lease', { body: { pool: 'nul', max: 2 } });
        assert.equal(leased.json.runs.length, 2);
        const [single, batched] = leased.json.runs as { run_id: string; fencing_token: string }[];
        const error = 'bad byte \u0000 here, and \u0000 again';
        const one = await h.call('POST', `/v1/runs/${single!.run_id}/complete`,
          { body: { fencing_token: single!.fencing_token, status: 'failed', error } });
        assert.equal(one.status, 200, one.text);
        const many = await h.call('POST', '/v1/runs:complete',
          { body: { completions: [{ run_id: batched!.run_id, fencing_token: batched!.fencing_token, status: 'failed', error }] } });
        assert.equal(many.status, 200, many.text);
        assert.equal(many.json.results[0].status, 200, JSON.stringify(many.json.results[0]));
        for (const run of [single!, batched!]) {
          const read = await h.call('GET', `/v1/runs/${run.run_id}`);
          assert.equal(read.json.status, 'dead');
          assert.equal(read.json.last_error, 'bad byte \\u0000 here, and \\u0000 again');
        }
      } finally {
        await h.close();
      }
    });
  });
}
