// The worker SDK against servers that refuse it: a refusal waiting cannot heal (a refused API
// key, an invalid request) stops the worker and rejects run() with one clear error; what may
// heal (no listener, 404, 429, 5xx) is retried, logged when it starts, at most every 5 s while
// it lasts, and once when leases succeed again. Backoff runs on a VirtualClock.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { FatalError } from '../../src/fatal-error.js';
import { TicklerClient } from '../../src/worker/client.js';
import { workerFailureLogIntervalMsDefault } from '../../src/limits.js';
import { createWorker, leaseErrorBackoffMs, type Worker } from '../../src/worker/worker.js';
import { leasedRun } from './fake-server.js';
import { workerTestBed } from './helpers.js';

const startMs = Date.parse('2026-11-29T02:00:00.000Z');

function refusal(status: number, code: string, message: string): { status: number; body: unknown } {
  return { status, body: { error: { code, message } } };
}

describe('a worker whose leases fail', () => {
  const bed = workerTestBed(startMs);

  /** One long-poll at a time: each failure is one request's, and the next leaves only after its backoff. */
  function create(baseUrl = bed.server.url): Worker {
    bed.worker = createWorker({
      client: new TicklerClient({ baseUrl, apiKey: 'k-refused' }), longPolls: 1, pool: 'billing', concurrency: 1,
      handler: () => undefined, waitS: 20, workerId: 'w-test', logger: bed.logger, clock: bed.clock, random: () => 0.5,
    });
    return bed.worker;
  }

  test('answered 401 stops: run() rejects with one line saying what, why and what to do; nothing is retried', async () => {
    await bed.server.listen();
    bed.server.leaseAnswers.push(refusal(401, 'unauthorized', 'unknown API key'));
    await assert.rejects(create().run(), (error: unknown) => {
      assert.ok(error instanceof FatalError);
      assert.equal(error.message, 'lease requests for pool "billing" are refused (401 unauthorized: unknown API key); ' +
        'repeating them cannot help, so the worker stops: give it an API key the server accepts ' +
        '(tickler worker: --api-key or TICKLER_API_KEY)');
      return true;
    });
    await bed.clock.advance(60_000);
    assert.equal(bed.server.leases.length, 1, 'no lease after the refusal');
    assert.deepEqual(bed.logger.lines.filter((line) => line.level === 'error' || line.level === 'warn'), [],
      'run()\'s caller hears of it; nothing else is logged');
  });

  test('answered 403 or 400 stops too; started with start(), it logs the error and stop() resolves', async () => {
    await bed.server.listen();
    bed.server.leaseAnswers.push(refusal(403, 'forbidden', 'this route needs an admin key'));
    await assert.rejects(create().run(), /403 forbidden: this route needs an admin key.*a key allowed to lease this pool/);
    await bed.worker!.stop();
    bed.server.leaseAnswers.push({ status: 400, body: { error: { code: 'invalid_request', message: 'too long', field: 'pool' } } });
    const stopping = bed.logger.next('worker stopping');
    create().start();
    await stopping;
    await bed.worker!.stop();
    const line = bed.logger.lines.find((candidate) => candidate.message === 'worker stopping')!;
    assert.equal(line.level, 'error');
    assert.match((line.details as { error: string }).error, /400 invalid_request: too long \(field pool\).*correct its options/);
    assert.equal(bed.server.leases.length, 2);
  });

  for (const [status, code] of [[404, 'not_found'], [429, 'rate_limited'], [500, 'internal'], [503, 'unavailable']] as const) {
    test(`answered ${status} is retried after its backoff`, async () => {
      await bed.server.listen();
      bed.server.leaseAnswers.push(refusal(status, code, 'not now'));
      const failed = bed.logger.next('lease request failed; backing off');
      create().start();
      await failed;
      const retried = bed.server.next('lease');
      await bed.clock.advance(leaseErrorBackoffMs(1, () => 0.5));
      await retried;
      assert.equal(bed.server.leases.length, 2);
    });
  }

  test('while nothing listens: a warning when it starts, at most one per 5 s, and a line once leases succeed again',
    async () => {
      const probe = createServer();
      probe.listen(0, '127.0.0.1');
      await once(probe, 'listening');
      const { port } = probe.address() as AddressInfo;
      await new Promise((resolve) => probe.close(resolve));
      create(`http://127.0.0.1:${port}`).start();
      const failureCount = 100;
      let failures = 0;
      let nextDelayMs = 0;
      bed.logger.on('line', (message: string) => {
        if (message !== 'lease request failed; backing off') return;
        failures += 1;
        nextDelayMs = (bed.logger.lines.at(-1)!.details as { delayMs: number }).delayMs;
      });
      // A failure may come back while the clock advances: each is answered by one advance of its backoff.
      let answered = 0;
      while (failures < failureCount) {
        if (failures === answered) {
          await new Promise((resolve) => setImmediate(resolve));
          continue;
        }
        answered = failures;
        await bed.clock.advance(nextDelayMs);
      }
      const failingForMs = bed.clock.nowMs() - startMs;
      const warnings = bed.logger.lines.filter((line) => line.level === 'warn');
      assert.equal(warnings[0]?.message, 'lease requests fail; retrying with backoff');
      assert.match(String((warnings[0]!.details as { error: string }).error), /ECONNREFUSED/);
      assert.ok(warnings.length >= 2 && warnings.length <= 1 + failingForMs / workerFailureLogIntervalMsDefault,
        `${warnings.length} warnings over ${failingForMs} ms of ${failureCount} failures`);
      assert.ok(warnings.slice(1).every((line) => line.message === 'lease requests still fail; retrying with backoff'));
      await bed.server.listen(port);
      const leased = bed.server.next('lease');
      const recovered = bed.logger.next('lease requests succeed again');
      await bed.clock.advance(nextDelayMs);
      await leased;
      bed.server.offer(leasedRun(bed.clock.nowMs()));
      await recovered;
      const line = bed.logger.lines.find((candidate) => candidate.message === 'lease requests succeed again')!;
      assert.equal(line.level, 'info');
      assert.equal((line.details as { failures: number }).failures, failureCount);
    });
});
