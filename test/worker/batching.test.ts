// The worker SDK's batched completions and heartbeats, against the real HTTP fake: one batch
// in flight, the next one carrying whatever queued meanwhile, each item answered alone, and
// the per-run routes for a server without the batch routes.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { VirtualClock, type Clock } from '../../src/clock.js';
import { TicklerClient } from '../../src/worker/client.js';
import { TicklerApiError } from '../../src/worker/errors.js';
import { RequestBatcher, type BatchItemResult } from '../../src/worker/request-batcher.js';
import type { RunHandler } from '../../src/worker/run-attempt.js';
import { workerUnacknowledgedCompletionsPerSlotCount } from '../../src/limits.js';
import { createWorker, type Worker } from '../../src/worker/worker.js';
import { FakeTicklerServer, leasedRun } from './fake-server.js';
import { RecordingLogger, SameTurnClock, controlledHandler, deferred, inTurn } from './helpers.js';

const startMs = Date.parse('2026-11-29T02:00:00.000Z');

describe('createWorker batching', () => {
  let server: FakeTicklerServer;
  let clock: VirtualClock;
  let logger: RecordingLogger;
  let worker: Worker | undefined;

  beforeEach(async () => {
    server = new FakeTicklerServer();
    await server.listen();
    clock = new VirtualClock(startMs);
    logger = new RecordingLogger();
    server.heartbeatAnswer = () => ({ status: 200, body: { lease_expires_at: new Date(clock.nowMs() + 3_000).toISOString() } });
  });

  afterEach(async () => {
    await worker?.stop({ timeoutMs: 0 });
    worker = undefined;
    await server.close();
  });

  // One long-poll: the runs a test offers together arrive in one answer and end together.
  function start(handler: RunHandler, concurrency: number, workerClock: Clock = clock, prefetch = 0): Worker {
    worker = createWorker({
      client: new TicklerClient({ baseUrl: server.url }), pool: 'billing', concurrency, prefetch, handler, leaseS: 3,
      waitS: 20, workerId: 'w-batch', logger, clock: workerClock, random: () => 0.5, longPolls: 1,
    });
    worker.start();
    return worker;
  }

  test('handlers that finish together share one completion request', async () => {
    start(() => 'ok', 5);
    const all = server.next('complete', () => server.completions.length === 5);
    const runs = Array.from({ length: 5 }, () => leasedRun(startMs));
    server.offer(...runs);
    await all;
    assert.deepEqual(server.completeBatchSizes, [5]);
    assert.deepEqual(server.completions.map(({ runId }) => runId).sort(), runs.map((run) => run.run_id).sort());
    assert.ok(server.requests.every((request) => !request.path.endsWith('/complete')), 'no per-run completion');
  });

  test('one batch in flight at a time; the next carries everything that queued meanwhile', async () => {
    const gate = deferred();
    server.completeGate = gate.promise;
    const handlers = [controlledHandler(), controlledHandler(), controlledHandler()];
    start(inTurn(handlers), 3);
    server.offer(leasedRun(startMs), leasedRun(startMs), leasedRun(startMs));
    await Promise.all(handlers.map((handler) => handler.started));
    const firstBatch = server.next('completeBatch');
    handlers[0]!.finish('a');
    await firstBatch;
    handlers[1]!.finish('b');
    handlers[2]!.finish('c');
    await clock.advance(0);
    assert.deepEqual(server.completeBatchSizes, [1], 'nothing else is sent while the first batch is in flight');
    const secondBatch = server.next('completeBatch');
    server.completeGate = undefined;
    gate.resolve();
    await secondBatch;
    assert.deepEqual(server.completeBatchSizes, [1, 2]);
  });

  test('each item answers alone: a 409 item is logged and not retried, its neighbour is accepted', async () => {
    const refused = leasedRun(startMs);
    const accepted = leasedRun(startMs);
    server.completeAnswer = (runId) => (runId === refused.run_id
      ? { status: 409, body: { error: { code: 'stale_token', message: 'late' } } }
      : { status: 200, body: { run_id: runId, status: 'succeeded' } });
    start(() => 'done', 2);
    const both = server.next('complete', () => server.completions.length === 2);
    server.offer(refused, accepted);
    await both;
    await worker?.stop();
    assert.deepEqual(server.completeBatchSizes, [2]);
    const notAccepted = logger.lines.filter((line) => line.message.startsWith('completion not accepted'));
    assert.deepEqual(notAccepted.map((line) => [line.level, (line.details as { runId: string }).runId]), [['warn', refused.run_id]]);
  });

  test('a batch that gets no answer is retried whole, its retries coalescing again', async () => {
    const sameTurn = new SameTurnClock(startMs);
    server.completeAnswer = () => (server.completeBatchSizes.length === 1 ? 'destroy' : { status: 200, body: {} });
    start(() => 'done', 2, sameTurn);
    server.offer(leasedRun(startMs), leasedRun(startMs));
    await logger.count('completion failed; retrying', 2);
    const resent = server.next('complete', () => server.completions.length === 4);
    assert.equal(sameTurn.fireDue(1_000), 2, 'both items wait to retry');
    await resent;
    assert.deepEqual(server.completeBatchSizes, [2, 2]);
  });

  test('a slot frees when its handler settles, before its completion is acknowledged; unacknowledged ones are bounded', async () => {
    const gate = deferred();
    server.completeGate = gate.promise;
    start(() => 'done', 1);
    await server.next('lease', () => server.leases.length === 1);
    // At concurrency 1, each run's handler ends at once and its completion waits at the gate;
    // the slot frees for the next lease until the unacknowledged completions pass the bound.
    const bound = workerUnacknowledgedCompletionsPerSlotCount;
    for (let run = 1; run <= bound; run++) {
      const nextLease = server.next('lease', () => server.leases.length === run + 1);
      server.offer(leasedRun(startMs));
      await nextLease;
    }
    assert.equal(server.completeBatchSizes.length, 1, 'the first completion is still in flight; the rest queue behind it');
    server.offer(leasedRun(startMs));
    await clock.advance(0);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(server.leases.length, bound + 1, `${bound + 1} unacknowledged completions at concurrency 1 hold the slot`);
    const afterAck = server.next('lease', () => server.leases.length === bound + 2);
    server.completeGate = undefined;
    gate.resolve();
    await afterAck;
    assert.equal(server.completeBatchSizes.reduce((sum, size) => sum + size, 0), bound + 1);
  });

  test('after a lease of quick runs, the next lease asks for every slot they freed', async () => {
    start(() => 'done', 2, clock, 2);
    await server.next('lease', () => server.leases.length === 1);
    assert.equal(server.leases[0]?.max, 4, 'two slots and two prefetched');
    const secondLease = server.next('lease', () => server.leases.length === 2);
    server.offer(...Array.from({ length: 4 }, () => leasedRun(startMs)));
    await secondLease;
    // Counted as the first two handlers settled, the two prefetched runs had just started
    // and the next lease asked for two.
    assert.equal(server.leases[1]?.max, 4, 'all four handlers settled before the slots were counted');
  });

  test('stop() waits for queued completions to be acknowledged', async () => {
    const gate = deferred();
    server.completeGate = gate.promise;
    start(() => 'done', 1);
    const sent = server.next('completeBatch');
    server.offer(leasedRun(startMs));
    await sent;
    let stopped = false;
    const stopping = worker!.stop().then(() => {
      stopped = true;
    });
    await clock.advance(0);
    assert.equal(stopped, false);
    gate.resolve();
    await stopping;
    assert.equal(server.completions.length, 1);
  });

  test('heartbeats due at the same instant share one request', async () => {
    const sameTurn = new SameTurnClock(startMs);
    const handlers = [controlledHandler(), controlledHandler(), controlledHandler()];
    start(inTurn(handlers), 3, sameTurn);
    server.offer(leasedRun(startMs), leasedRun(startMs), leasedRun(startMs));
    await Promise.all(handlers.map((handler) => handler.started));
    const beats = server.next('heartbeat', () => server.heartbeats.length === 3);
    assert.equal(sameTurn.fireDue(1_000), 1, 'one clock timer for the instant (grouped-timers.ts)');
    await beats;
    assert.deepEqual(server.heartbeatBatchSizes, [3]);
    for (const handler of handlers) handler.finish('ok');
  });

  test('completions ask for brief answers, and ask for whole runs from a server that refuses the answer field', async () => {
    start(() => 'ok', 1);
    server.offer(leasedRun(startMs));
    await server.next('complete');
    server.briefAnswers = false;
    const second = server.next('complete');
    server.offer(leasedRun(startMs));
    await second;
    const third = server.next('complete');
    server.offer(leasedRun(startMs));
    await third;
    const answers = server.requests.filter((request) => request.path === '/v1/runs:complete')
      .map((request) => (request.body as { answer?: string }).answer ?? 'run');
    assert.deepEqual(answers, ['status', 'status', 'run', 'run'], 'the refused batch is sent again, and so are the next ones');
    assert.equal(server.completions.length, 3);
  });

  test('a server without the batch routes is served run by run, with one warning per route', async () => {
    server.batchRoutes = false;
    const control = controlledHandler();
    let calls = 0;
    start((run, context) => (calls++ === 0 ? control.handler(run, context) : 'quick'), 2);
    server.offer(leasedRun(startMs), leasedRun(startMs));
    await control.started;
    await server.next('complete');
    const beat = server.next('heartbeat');
    await clock.advance(1_000);
    await beat;
    const done = server.next('complete');
    control.finish('slow');
    await done;
    const perRun = server.requests.filter((request) => /^\/v1\/runs\/[^/]+\/(complete|heartbeat)$/.test(request.path));
    assert.equal(perRun.length, 3);
    const warnings = logger.lines.filter((line) => line.message.startsWith('the server has no batch route'));
    assert.deepEqual(warnings.map((line) => (line.details as { route: string }).route).sort(),
      ['POST /v1/runs:complete', 'POST /v1/runs:heartbeat']);
  });
});

describe('RequestBatcher', () => {
  /** An in-process transport that records each batch and answers every item with its own value. */
  function echoTransport(sizes: number[], bytesOf: (item: number) => number = () => 1) {
    return {
      sendBatch: async (items: number[]): Promise<BatchItemResult<number>[]> => {
        sizes.push(items.length);
        return items.map((item) => (item < 0
          ? { ok: false, error: new TicklerApiError({ status: 409, code: 'stale_token', message: 'no' }) }
          : { ok: true, value: item * 10 }));
      },
      sendOne: async (item: number) => item,
      bytesOf,
    };
  }

  test('splits a queue by item count and by bytes, keeping an oversized item whole', async () => {
    const sizes: number[] = [];
    const byCount = new RequestBatcher(echoTransport(sizes), { itemsMax: 3, bytesMax: 1_000 });
    const answers = await Promise.all([1, 2, 3, 4, 5, 6, 7].map((item) => byCount.submit(item)));
    assert.deepEqual(answers, [10, 20, 30, 40, 50, 60, 70]);
    assert.deepEqual(sizes, [3, 3, 1]);

    const byteSizes: number[] = [];
    const byBytes = new RequestBatcher(echoTransport(byteSizes, (item) => item), { itemsMax: 100, bytesMax: 10 });
    await Promise.all([4, 4, 4, 50, 1].map((item) => byBytes.submit(item)));
    assert.deepEqual(byteSizes, [2, 1, 1, 1]);
  });

  test('rejects only the failed item, and every item of a batch answered with the wrong count', async () => {
    const batcher = new RequestBatcher(echoTransport([]), { itemsMax: 10, bytesMax: 100 });
    const outcomes = await Promise.allSettled([1, -1, 2].map((item) => batcher.submit(item)));
    assert.deepEqual(outcomes.map((outcome) => outcome.status), ['fulfilled', 'rejected', 'fulfilled']);

    const short = new RequestBatcher({ ...echoTransport([]), sendBatch: async () => [] }, { itemsMax: 10, bytesMax: 100 });
    await assert.rejects(short.submit(1), (error: unknown) => error instanceof TicklerApiError && error.code === 'invalid_answer');
  });

  test('with a linger, a small batch right after another waits for it, or until enough calls queue', async () => {
    const sizes: number[] = [];
    let nowMs = 0;
    const timers: { atMs: number; callback: () => void }[] = [];
    const batcher = new RequestBatcher(echoTransport(sizes), {
      itemsMax: 100, bytesMax: 1_000, linger: { ms: 10, items: 3 }, nowMs: () => nowMs,
      setTimer: (callback, delayMs) => {
        const timer = { atMs: nowMs + delayMs, callback };
        timers.push(timer);
        return () => timers.splice(timers.indexOf(timer), 1);
      },
    });
    const turns = async (): Promise<void> => {
      for (let turn = 0; turn < 3; turn++) await new Promise((resolve) => setImmediate(resolve));
    };

    await batcher.submit(1);
    assert.deepEqual(sizes, [1], 'the first call goes at once: nothing was sent before it');
    nowMs = 2;
    const lingering = [batcher.submit(2), batcher.submit(3)];
    await turns();
    assert.deepEqual(sizes, [1], 'two calls 2 ms after a request wait for company');
    assert.deepEqual(timers.map((timer) => timer.atMs), [10], 'until 10 ms after the previous request left');
    nowMs = 10;
    timers.shift()!.callback();
    assert.deepEqual(await Promise.all(lingering), [20, 30]);
    assert.deepEqual(sizes, [1, 2], 'then they go together');

    nowMs = 11;
    const filling = [batcher.submit(4), batcher.submit(5)];
    await turns();
    assert.equal(timers.length, 1, 'waiting again');
    filling.push(batcher.submit(6));
    await Promise.all(filling);
    assert.deepEqual(sizes, [1, 2, 3], 'the third call fills the batch: it goes without waiting out the linger');
    assert.equal(timers.length, 0, 'and the linger\'s timer is cancelled');

    nowMs = 100;
    await batcher.submit(7);
    assert.deepEqual(sizes, [1, 2, 3, 1], 'a call long after the last request goes at once');
    assert.equal(timers.length, 0);
  });

  test('counts queued and in-flight items as pending', async () => {
    const release = deferred();
    const batcher = new RequestBatcher({
      ...echoTransport([]),
      sendBatch: async (items: number[]) => {
        await release.promise;
        return items.map((item) => ({ ok: true as const, value: item }));
      },
    }, { itemsMax: 10, bytesMax: 100 });
    const pending = [batcher.submit(1), batcher.submit(2)];
    assert.equal(batcher.pendingCount, 2);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(batcher.pendingCount, 2, 'in flight');
    release.resolve();
    await Promise.all(pending);
    assert.equal(batcher.pendingCount, 0);
  });
});
