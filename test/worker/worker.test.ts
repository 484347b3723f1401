// The worker SDK against a real HTTP server that speaks the worker routes. Heartbeats and
// backoff run on a VirtualClock, so "a third of the lease later" is a clock advance, not a sleep.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import { TicklerClient } from '../../src/worker/client.js';
import { PermanentError } from '../../src/worker/errors.js';
import { LeaseLostError, type RunHandler, type WorkerRun } from '../../src/worker/run-attempt.js';
import { createWorker, leaseErrorBackoffMs, type Worker } from '../../src/worker/worker.js';
import { FakeTicklerServer, leasedRun } from './fake-server.js';
import { RecordingLogger, controlledHandler, inTurn } from './helpers.js';

const startMs = Date.parse('2026-11-29T02:00:00.000Z');

describe('createWorker', () => {
  let server: FakeTicklerServer;
  let clock: VirtualClock;
  let logger: RecordingLogger;
  let worker: Worker | undefined;

  beforeEach(async () => {
    server = new FakeTicklerServer();
    await server.listen();
    clock = new VirtualClock(startMs);
    logger = new RecordingLogger();
    server.nowMs = () => clock.nowMs();
    server.heartbeatAnswer = () => ({
      status: 200,
      body: { lease_expires_at: new Date(clock.nowMs() + 3_000).toISOString() },
    });
  });

  afterEach(async () => {
    await worker?.stop({ timeoutMs: 0 });
    worker = undefined;
    await server.close();
  });

  function start(handler: RunHandler, extra: {
    concurrency?: number; leaseS?: number; stopTimeoutMs?: number; leaseLingerMs?: number; prefetch?: number;
    longPolls?: number; leaseAheadMs?: number; holdAheadMax?: number;
  } = {}): Worker {
    worker = createWorker({
      client: new TicklerClient({ baseUrl: server.url, apiKey: 'k-1' }),
      pool: 'billing',
      concurrency: extra.concurrency ?? 1,
      handler,
      leaseS: extra.leaseS ?? 3,
      waitS: 20,
      workerId: 'w-test',
      logger,
      clock,
      random: () => 0.5,
      ...(extra.stopTimeoutMs === undefined ? {} : { stopTimeoutMs: extra.stopTimeoutMs }),
      ...(extra.leaseLingerMs === undefined ? {} : { leaseLingerMs: extra.leaseLingerMs }),
      ...(extra.prefetch === undefined ? {} : { prefetch: extra.prefetch }),
      ...(extra.longPolls === undefined ? {} : { longPolls: extra.longPolls }),
      ...(extra.leaseAheadMs === undefined ? {} : { leaseAheadMs: extra.leaseAheadMs }),
      ...(extra.holdAheadMax === undefined ? {} : { holdAheadMax: extra.holdAheadMax }),
    });
    worker.start();
    return worker;
  }

  test('a resolved handler completes succeeded with its return value as result', async () => {
    const seen: WorkerRun[] = [];
    start((run) => {
      seen.push(run);
      return { rows: 42 };
    });
    const completed = server.next('complete');
    const run = leasedRun(startMs, { payload: { invoice: 7 }, attempt: 2 });
    server.offer(run);
    await completed;
    assert.deepEqual(server.completions, [{
      runId: run.run_id,
      body: { fencing_token: run.fencing_token, status: 'succeeded', result: { rows: 42 } },
    }]);
    assert.deepEqual(seen, [{
      run_id: run.run_id, job_id: run.job_id, attempt: 2, scheduled_at: run.scheduled_at,
      fire_at: run.fire_at, payload: { invoice: 7 },
    }]);
    assert.deepEqual(server.leases[0], { pool: 'billing', max: 1, wait_s: 20, worker_id: 'w-test', lease_s: 3 });
    const lease = server.requests.find((request) => request.path === '/v1/workers/lease');
    assert.equal(lease?.headers.authorization, 'Bearer k-1');
  });

  test('a thrown error completes failed with its message; PermanentError completes failed_permanent', async () => {
    let calls = 0;
    start(() => {
      calls += 1;
      if (calls === 1) throw new Error('disk full');
      throw new PermanentError('payload names no invoice');
    });
    const two = server.next('complete', () => server.completions.length === 2);
    server.offer(leasedRun(startMs), leasedRun(startMs));
    await two;
    assert.deepEqual(server.completions.map(({ body }) => [body.status, body.error, 'result' in body]), [
      ['failed', 'disk full', false],
      ['failed_permanent', 'payload names no invoice', false],
    ]);
  });

  test('heartbeats every third of the lease, with the fencing token, until the handler ends', async () => {
    const control = controlledHandler();
    start(control.handler, { leaseS: 3 });
    const run = leasedRun(startMs);
    server.offer(run);
    await control.started;
    await clock.advance(999);
    assert.equal(server.heartbeats.length, 0);
    await clock.advance(1);
    assert.equal(server.heartbeats.length, 1);
    await clock.advance(1_000);
    await clock.advance(1_000);
    assert.deepEqual(server.heartbeats, [1, 2, 3].map(() => ({ runId: run.run_id, fencingToken: run.fencing_token })));
    const completed = server.next('complete');
    control.finish('ok');
    await completed;
    await clock.advance(10_000);
    assert.equal(server.heartbeats.length, 3, 'no heartbeat after the handler ended');
    assert.equal(clock.pendingTimerCount(), 0);
  });

  test('without leaseS the cadence follows lease_expires_at', async () => {
    const control = controlledHandler();
    worker = createWorker({ client: new TicklerClient({ baseUrl: server.url }), pool: 'p', concurrency: 1,
      handler: control.handler, logger, clock });
    worker.start();
    server.offer(leasedRun(startMs, {}, 60));
    await control.started;
    await clock.advance(19_999);
    assert.equal(server.heartbeats.length, 0);
    await clock.advance(1);
    assert.equal(server.heartbeats.length, 1);
    control.finish(undefined);
  });

  test('two consecutive failed heartbeats abort the handler and send no completion', async () => {
    const control = controlledHandler();
    start(control.handler, { leaseS: 3 });
    server.heartbeatAnswer = () => 'destroy';
    server.offer(leasedRun(startMs));
    const { signal } = await control.started;
    await clock.advance(1_000);
    assert.equal(server.heartbeats.length, 1);
    assert.equal(signal.aborted, false, 'one failed heartbeat is tolerated');
    await clock.advance(1_000);
    assert.equal(signal.aborted, true);
    assert.ok(signal.reason instanceof LeaseLostError);
    assert.equal(signal.reason.reason, 'heartbeat_failed');
    await worker?.stop();
    assert.equal(server.completions.length, 0);
    assert.ok(logger.lines.some((line) => line.message.startsWith('lease lost')));
  });

  test('a handler that reads its signal only after the lease is lost finds it aborted, with the reason', async () => {
    // The signal is made on first read (most handlers never read it): one read late must still see the loss.
    let readLate!: () => AbortSignal;
    const reading = new Promise<void>((resolve) => {
      start((_run, context) => new Promise<void>((finish) => {
        readLate = () => {
          // Spread first, as a handler passing its context on might: the signal must survive it.
          const { signal } = { ...context };
          finish();
          return signal;
        };
        resolve();
      }), { leaseS: 3 });
    });
    server.heartbeatAnswer = () => ({ status: 409, body: { error: { code: 'cancelled', message: 'cancelled' } } });
    server.offer(leasedRun(startMs));
    await reading;
    await clock.advance(1_000);
    const signal = readLate();
    assert.equal(signal.aborted, true);
    assert.equal((signal.reason as LeaseLostError).reason, 'cancelled');
    await worker?.stop();
    assert.equal(server.completions.length, 0, 'a run taken away sends no completion');
  });

  test('a good heartbeat between two failures resets the count', async () => {
    const control = controlledHandler();
    start(control.handler, { leaseS: 3 });
    const answers = ['destroy', 'ok', 'destroy'] as const;
    server.heartbeatAnswer = () => (answers[server.heartbeats.length - 1] === 'destroy'
      ? 'destroy'
      : { status: 200, body: { lease_expires_at: new Date(clock.nowMs() + 3_000).toISOString() } });
    server.offer(leasedRun(startMs));
    const { signal } = await control.started;
    await clock.advance(3_000);
    assert.equal(server.heartbeats.length, 3);
    assert.equal(signal.aborted, false);
    const completed = server.next('complete');
    control.finish(1);
    await completed;
  });

  for (const code of ['stale_token', 'cancelled']) {
    test(`a heartbeat answered 409 ${code} aborts at once and sends no completion`, async () => {
      const control = controlledHandler();
      start(control.handler, { leaseS: 3 });
      server.heartbeatAnswer = () => ({ status: 409, body: { error: { code, message: 'not yours' } } });
      server.offer(leasedRun(startMs));
      const { signal } = await control.started;
      await clock.advance(1_000);
      assert.equal(signal.aborted, true);
      assert.equal((signal.reason as LeaseLostError).reason, code);
      await clock.advance(5_000);
      assert.equal(server.heartbeats.length, 1, 'no heartbeat after the lease is lost');
      await worker?.stop();
      assert.equal(server.completions.length, 0);
    });
  }

  test('a completion answered 409 is logged, not retried', async () => {
    server.completeAnswer = () => ({ status: 409, body: { error: { code: 'stale_token', message: 'late' } } });
    start(() => 'done');
    const completed = server.next('complete');
    server.offer(leasedRun(startMs));
    await completed;
    await worker?.stop();
    assert.equal(server.completions.length, 1);
    assert.ok(logger.lines.some((line) => line.level === 'warn' && line.message.startsWith('completion not accepted')));
  });

  test('a completion that gets no answer is retried', async () => {
    let answered = 0;
    server.completeAnswer = () => (answered++ === 0 ? 'destroy' : { status: 200, body: {} });
    start(() => 'done');
    const retrying = logger.next('completion failed; retrying');
    server.offer(leasedRun(startMs));
    await retrying;
    const second = server.next('complete');
    await clock.advance(1_000);
    await second;
    assert.equal(server.completions.length, 2);
  });

  test('a completion that gets no answer is retried beyond three tries while its lease lasts', async () => {
    let answered = 0;
    server.completeAnswer = () => (answered++ < 5 ? 'destroy' : { status: 200, body: {} });
    start(() => 'done', { leaseS: 30 });
    server.offer(leasedRun(startMs, {}, 30));
    for (let failures = 1; failures <= 4; failures++) {
      await logger.count('completion failed; retrying', failures);
      await clock.advance(2_000);
    }
    await logger.count('completion failed; retrying', 5);
    const sixth = server.next('complete', () => server.completions.length === 6);
    await clock.advance(2_000);
    await sixth;
    assert.equal(logger.lines.filter((line) => line.message.startsWith('completion not accepted')).length, 0);
  });

  test('a completion that gets no answer is given up after three tries once its lease is over', async () => {
    server.completeAnswer = () => 'destroy';
    start(() => 'done');
    server.offer(leasedRun(startMs));
    for (let failures = 1; failures <= 2; failures++) {
      await logger.count('completion failed; retrying', failures);
      await clock.advance(2_000);
    }
    await logger.count('completion not accepted', 1);
    assert.equal(server.completions.length, 3, 'a 3 s lease: three tries, the next would come after it');
  });

  test('stop() stops leasing and waits for in-flight handlers to finish', async () => {
    const control = controlledHandler();
    start(control.handler);
    server.offer(leasedRun(startMs));
    await control.started;
    let stopped = false;
    const stopping = worker!.stop().then(() => {
      stopped = true;
    });
    await clock.advance(0);
    assert.equal(stopped, false, 'stop waits for the handler');
    const leasesAtStop = server.leases.length;
    control.finish('late but fine');
    await stopping;
    assert.equal(server.completions.length, 1, 'the handler completed before stop resolved');
    assert.equal(server.completions[0]?.body.status, 'succeeded');
    assert.equal(server.leases.length, leasesAtStop, 'no lease after stop');
  });

  test('stop() with a timeout aborts handlers that outlive it, and reports them failed', async () => {
    const control = controlledHandler();
    start(control.handler, { stopTimeoutMs: 5_000 });
    server.offer(leasedRun(startMs));
    const { signal } = await control.started;
    const stopping = worker!.stop();
    await clock.advance(4_999);
    assert.equal(signal.aborted, false);
    await clock.advance(1);
    assert.equal(signal.aborted, true);
    assert.equal((signal.reason as LeaseLostError).reason, 'stopping');
    await stopping;
    assert.equal(server.completions[0]?.body.status, 'failed');
  });

  /** Until the worker has taken the run offered (its answer crossed real HTTP), on the same virtual instant. */
  async function heldOne(): Promise<void> {
    while (worker?.inFlightCount !== 1) await new Promise((resolve) => setImmediate(resolve));
  }

  /**
   * Starts a worker that notes when its handler starts, and offers it one run ready at
   * `readyAtMs` once its first lease is parked; answers the start, and the completion to await.
   */
  async function offerReadyAt(readyAtMs: number, extra: { leaseAheadMs?: number } = {}) {
    let startedAtMs: number | null = null;
    start(() => {
      startedAtMs = clock.nowMs();
    }, extra);
    await server.next('lease');
    const completed = server.next('complete');
    server.offer(leasedRun(startMs, { ready_at: new Date(readyAtMs).toISOString() }));
    return { startedAt: () => startedAtMs, completed };
  }

  test('with leaseAheadMs, asks for ahead_ms and starts a run leased ahead at its ready time, not before', async () => {
    const { startedAt, completed } = await offerReadyAt(startMs + 150, { leaseAheadMs: 200 });
    assert.equal(server.leases[0]?.ahead_ms, 200);
    await heldOne();
    await clock.advance(149);
    assert.equal(startedAt(), null, 'held until its ready time');
    await clock.advance(1);
    await completed;
    assert.equal(startedAt(), startMs + 150);
    assert.equal(server.heartbeats.length, 0, 'a hold shorter than the heartbeat interval sends none');
  });

  test('a ready time further off than leaseAheadMs (a clock behind the server\'s) holds the run only leaseAheadMs', async () => {
    const { startedAt, completed } = await offerReadyAt(startMs + 5_000, { leaseAheadMs: 200 });
    await heldOne();
    await clock.advance(200);
    await completed;
    assert.equal(startedAt(), startMs + 200);
  });

  test('a stop that runs out of patience lets go of runs still held: their handlers never start', async () => {
    const { startedAt } = await offerReadyAt(startMs + 150, { leaseAheadMs: 200 });
    await heldOne();
    await worker!.stop({ timeoutMs: 0 });
    assert.equal(startedAt(), null);
    assert.equal(server.completions.length, 0, 'not completed: the server offers it again when its lease expires');
    assert.ok(logger.lines.some((line) => line.message.includes('lease lost before the handler started')));
  });

  test('without leaseAheadMs, a ready time ahead of this clock (skew) does not hold the run', async () => {
    server.nowMs = () => clock.nowMs() + 150; // the server's clock 150 ms ahead: the run is ready by it
    const { startedAt, completed } = await offerReadyAt(startMs + 150);
    assert.equal(server.leases[0]?.ahead_ms, undefined);
    await completed;
    assert.equal(startedAt(), startMs);
  });

  test('run() resolves once stop() has drained', async () => {
    worker = createWorker({ baseUrl: server.url, pool: 'p', concurrency: 1, handler: () => 1, logger, clock });
    const leased = server.next('lease');
    const running = worker.run();
    await leased;
    await worker.stop();
    await running;
  });

  test('with longPolls 1, leases only as many runs as there are free slots, one long-poll at a time', async () => {
    const first = controlledHandler();
    const second = controlledHandler();
    const handlers = [first, second];
    start(inTurn(handlers), { concurrency: 2, longPolls: 1 });
    await server.next('lease');
    assert.equal(server.leases[0]?.max, 2);
    const secondLease = server.next('lease');
    server.offer(leasedRun(startMs));
    await first.started;
    await secondLease;
    assert.equal(server.leases[1]?.max, 1);
    server.offer(leasedRun(startMs));
    await second.started;
    await clock.advance(0);
    assert.equal(server.leases.length, 2, 'no lease while every slot is busy');
    const thirdLease = server.next('lease');
    first.finish('a');
    await thirdLease;
    assert.equal(server.leases[2]?.max, 1);
    second.finish('b');
  });

  test('an idle worker keeps two long-polls parked, each asking for half its free slots', async () => {
    const handlers = Array.from({ length: 4 }, () => controlledHandler());
    start(inTurn(handlers), { concurrency: 4 });
    await server.next('lease');
    await server.next('lease');
    assert.deepEqual(server.leases.map((lease) => lease.max), [2, 2]);
    await clock.advance(0);
    assert.equal(server.leases.length, 2, 'every free slot is asked for: no third request');
    // The first request is answered short; the second is still parked, and takes the next
    // run at once, before any new request reaches the server.
    const replacement = server.next('lease');
    server.offer(leasedRun(startMs));
    await handlers[0]!.started;
    server.offer(leasedRun(startMs));
    await handlers[1]!.started;
    assert.equal(server.leases.length, 2, 'the second run went to the poll already parked');
    await replacement;
    assert.equal(server.leases[2]?.max, 1, 'the first answer\'s unused slot is asked for again');
    for (const handler of handlers) handler.finish('x');
  });

  test('while leases come back full, one request at a time asks for every free slot', async () => {
    const handlers = Array.from({ length: 8 }, () => controlledHandler());
    start(inTurn(handlers), { concurrency: 4 });
    await server.next('lease');
    await server.next('lease');
    server.offer(...Array.from({ length: 4 }, () => leasedRun(startMs)));
    await Promise.all(handlers.slice(0, 4).map((handler) => handler.started));
    await clock.advance(0);
    assert.equal(server.leases.length, 2, 'no lease while every slot is busy');
    const refill = server.next('lease');
    for (const handler of handlers.slice(0, 4)) handler.finish('x');
    await refill;
    assert.equal(server.leases[2]?.max, 4, 'one request for every free slot, not two halves');
    server.offer(...Array.from({ length: 4 }, () => leasedRun(startMs)));
    await Promise.all(handlers.slice(4).map((handler) => handler.started));
    for (const handler of handlers.slice(4)) handler.finish('y');
  });

  test('leaseAheadMs must be an integer from 0 to 10,000', () => {
    for (const leaseAheadMs of [-1, 10_001, 2.5]) {
      assert.throws(() => createWorker({ baseUrl: server.url, pool: 'p', concurrency: 1, handler: () => undefined, leaseAheadMs }),
        RangeError);
    }
  });

  test('holdAheadMax must be an integer from 0 to 100,000, and needs leaseAheadMs', () => {
    const base = { baseUrl: server.url, pool: 'p', concurrency: 1, handler: () => undefined, leaseAheadMs: 100 };
    for (const holdAheadMax of [-1, 100_001, 2.5]) assert.throws(() => createWorker({ ...base, holdAheadMax }), RangeError);
    assert.throws(() => createWorker({ ...base, leaseAheadMs: 0, holdAheadMax: 10 }), /needs leaseAheadMs/);
  });

  test('with holdAheadMax, slot leases ask only for ready runs and hold leases for runs ahead; held runs take no slot',
    async () => {
      const started: [string, number][] = [];
      start((run) => {
        started.push([run.run_id, clock.nowMs()]);
      }, { concurrency: 1, leaseAheadMs: 200, holdAheadMax: 3, longPolls: 1 });
      await server.next('lease', () => server.leases.length === 2);
      const [hold, slot] = server.leases;
      assert.deepEqual([hold?.max, hold?.max_ready, hold?.ahead_ms], [4, 1, 200], 'three hold places and at most one ready run');
      assert.deepEqual([slot?.max, slot?.max_ready, slot?.ahead_ms], [1, undefined, undefined], 'the free slot, ready runs only');
      const held = Array.from({ length: 3 }, () => leasedRun(startMs, { ready_at: new Date(startMs + 150).toISOString() }));
      server.offer(...held);
      while (worker?.inFlightCount !== 3) await new Promise((resolve) => setImmediate(resolve));
      await clock.advance(149);
      assert.equal(server.leases.length, 2, 'every hold place taken: no hold lease; the slot lease still parked');
      assert.equal(started.length, 0, 'held until their ready time');
      const completed = server.next('complete', () => server.completions.length === 3);
      await clock.advance(1);
      await completed;
      assert.deepEqual(started.map(([runId]) => runId), held.map((run) => run.run_id), 'in lease order, one slot');
      assert.ok(started.every(([, atMs]) => atMs === startMs + 150), 'all at their ready time');
    });

  test('a held herd of handlers that return at once starts in lease order, each beside the last, not inside it',
    async () => {
      // A handler that returns (not a promise) frees its slot within its own start; the start
      // loop takes that slot, rather than the settling starting the next run one frame deeper.
      const previousLimit = Error.stackTraceLimit;
      Error.stackTraceLimit = Infinity;
      try {
        const started: { runId: string; depth: number }[] = [];
        start((run) => {
          started.push({ runId: run.run_id, depth: new Error('depth').stack!.split('\n').length });
        }, { concurrency: 1, leaseAheadMs: 1_000, holdAheadMax: 600, longPolls: 1 });
        await server.next('lease', () => server.leases.some((lease) => lease.ahead_ms !== undefined));
        const herd = Array.from({ length: 600 }, () => leasedRun(startMs, { ready_at: new Date(startMs + 500).toISOString() }));
        server.offer(...herd);
        while (worker?.inFlightCount !== 600) await new Promise((resolve) => setImmediate(resolve));
        const completed = server.next('complete', () => server.completions.length === 600);
        await clock.advance(500);
        await completed;
        assert.deepEqual(started.map(({ runId }) => runId), herd.map((run) => run.run_id), 'each once, in lease order');
        // The first 500 start as their holds are released; the last 100 wait for the next turn,
        // where one loop starts them all: there, each handler is called from the same depth.
        const lastHundred = new Set(started.slice(500).map(({ depth }) => depth));
        assert.equal(lastHundred.size, 1, `one depth for the starts of the next turn, got ${[...lastHundred].join(', ')}`);
      } finally {
        Error.stackTraceLimit = previousLimit;
      }
    });

  test('after a hold lease that found fewer runs than it had places for, the next waits 100 ms', async () => {
    start(() => undefined, { concurrency: 1, leaseAheadMs: 1_000, holdAheadMax: 10, longPolls: 2 });
    const holdLeases = (): number => server.leases.filter((lease) => lease.ahead_ms !== undefined).length;
    await server.next('lease', () => holdLeases() === 1);
    const answered = server.next('lease', () => server.leases.length === 3);
    server.offer(leasedRun(startMs, { ready_at: new Date(startMs + 900).toISOString() }));
    while (worker?.inFlightCount !== 1) await new Promise((resolve) => setImmediate(resolve));
    await clock.advance(99);
    assert.equal(holdLeases(), 1, 'a short answer: no second hold lease within 100 ms');
    await clock.advance(1);
    await answered;
    assert.equal(holdLeases(), 2);
    assert.equal(server.leases.at(-1)?.max, 10, 'asks for the nine places left and one ready run');
  });

  test('while hold leases come back full, two are in flight (longPolls), so the server leases a herd while one is read',
    async () => {
      start(() => undefined, { concurrency: 1, leaseAheadMs: 1_000, holdAheadMax: 5_000, longPolls: 2 });
      const holdLeases = () => server.leases.filter((lease) => lease.ahead_ms !== undefined);
      await server.next('lease', () => holdLeases().length === 1);
      assert.equal(holdLeases()[0]?.max, 1_000, 'one hold lease, as large as a lease goes, until one comes back full');
      const herd = Array.from({ length: 999 }, () => leasedRun(startMs, { ready_at: new Date(startMs + 500).toISOString() }));
      server.offer(...herd);
      await server.next('lease', () => holdLeases().length === 3);
      assert.deepEqual(holdLeases().slice(1).map((lease) => lease.max), [501, 1_000],
        'two parked at once, the first taking half of what is left to ask for');
    });

  test('without holdAheadMax, runs held for their ready time take slot places: no max_ready', async () => {
    start(() => undefined, { concurrency: 2, leaseAheadMs: 200, longPolls: 1 });
    await server.next('lease');
    assert.equal(server.leases[0]?.max, 2);
    assert.equal(server.leases[0]?.max_ready, undefined);
  });

  test('leaseLingerMs and completionLingerMs must be from 0 to 1,000', () => {
    const base = { baseUrl: server.url, pool: 'p', concurrency: 1, handler: () => undefined };
    for (const value of [-1, 1_001, Number.NaN]) {
      assert.throws(() => createWorker({ ...base, leaseLingerMs: value }), /leaseLingerMs must be within/);
      assert.throws(() => createWorker({ ...base, completionLingerMs: value }), /completionLingerMs must be within/);
    }
    for (const value of [0, 1_000]) createWorker({ ...base, completionLingerMs: value, leaseLingerMs: value });
  });

  test('longPolls must be an integer from 1 to 8', () => {
    for (const longPolls of [0, 9, 1.5]) {
      assert.throws(() => createWorker({ baseUrl: server.url, pool: 'p', concurrency: 1, handler: () => undefined, longPolls }),
        RangeError);
    }
  });

  test('with under a quarter of the slots free, the next lease waits for more to free', async () => {
    const handlers = Array.from({ length: 8 }, () => controlledHandler());
    start(inTurn(handlers),
      { concurrency: 8, leaseLingerMs: 1_000, longPolls: 1 });
    await server.next('lease');
    server.offer(...handlers.map(() => leasedRun(startMs)));
    await Promise.all(handlers.map((handler) => handler.started));
    handlers[0]!.finish('a');
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(server.leases.length, 1, 'one slot of eight free: the worker waits for a second');
    const refill = server.next('lease');
    handlers[1]!.finish('b');
    await refill;
    assert.equal(server.leases[1]?.max, 2, 'one request for both free slots');
    for (const handler of handlers.slice(2)) handler.finish('c');
  });

  test('runs held for their ready time count as work in hand: a lone freed slot waits for more', async () => {
    const started: string[] = [];
    start((run) => {
      started.push(run.run_id);
    }, { concurrency: 8, leaseAheadMs: 200, leaseLingerMs: 1_000, longPolls: 1 });
    await server.next('lease');
    const readyNow = leasedRun(startMs);
    const held = Array.from({ length: 7 }, () => leasedRun(startMs, { ready_at: new Date(startMs + 100).toISOString() }));
    const completed = server.next('complete');
    server.offer(readyNow, ...held);
    await completed;
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual(started, [readyNow.run_id]);
    assert.equal(server.leases.length, 1, 'one slot of eight free while seven runs are held: no lease for one run');
    const refill = server.next('lease');
    await clock.advance(100);
    await refill;
    assert.equal(started.length, 8, 'the held runs started at their ready time');
    assert.ok(server.leases[1]!.max >= 2, `one request for a quarter of the slots at least, got ${server.leases[1]!.max}`);
  });

  test('the wait for more free slots ends after leaseLingerMs', async () => {
    const handlers = Array.from({ length: 8 }, () => controlledHandler());
    start(inTurn(handlers), { concurrency: 8, leaseLingerMs: 20, longPolls: 1 });
    await server.next('lease');
    server.offer(...handlers.map(() => leasedRun(startMs)));
    await Promise.all(handlers.map((handler) => handler.started));
    const refill = server.next('lease');
    handlers[0]!.finish('a');
    await refill;
    assert.equal(server.leases[1]?.max, 1);
    for (const handler of handlers.slice(1)) handler.finish('c');
  });

  test('with prefetch, leases ahead of free slots and starts a held run the moment a slot frees', async () => {
    const handlers = Array.from({ length: 3 }, () => controlledHandler());
    let calls = 0;
    start((run, context) => handlers[calls++]!.handler(run, context), { concurrency: 1, prefetch: 2, longPolls: 1 });
    await server.next('lease');
    assert.equal(server.leases[0]?.max, 3, 'one slot and two prefetch places');
    const runs = [leasedRun(startMs), leasedRun(startMs), leasedRun(startMs)];
    server.offer(...runs);
    const first = await handlers[0]!.started;
    assert.equal(first.run.run_id, runs[0]!.run_id);
    await clock.advance(0);
    assert.equal(calls, 1, 'one handler at a time: the others wait for the slot');
    assert.equal(server.leases.length, 1, 'no lease while every slot and prefetch place is taken');
    handlers[0]!.finish('a');
    const second = await handlers[1]!.started;
    assert.equal(second.run.run_id, runs[1]!.run_id, 'oldest first, from the local queue');
    assert.equal(server.leases.length, 1, 'the freed slot took a held run, not a round trip');
    const refill = server.next('lease');
    handlers[1]!.finish('b');
    handlers[2]!.finish('c');
    await refill;
    assert.ok(server.leases[1]!.max >= 1);
  });

  test('a prefetched run heartbeats while it waits; one whose lease is lost meanwhile never reaches the handler', async () => {
    const handler = controlledHandler();
    const handled: string[] = [];
    // One long-poll, so both runs arrive in one answer, before the clock moves.
    start((run, context) => {
      handled.push(run.run_id);
      return handler.handler(run, context);
    }, { concurrency: 1, prefetch: 1, leaseS: 3, longPolls: 1 });
    await server.next('lease');
    const [running, held] = [leasedRun(startMs), leasedRun(startMs)];
    server.heartbeatAnswer = (runId) => runId === held.run_id
      ? { status: 409, body: { error: { code: 'stale_token', message: 'leased to another worker' } } }
      : { status: 200, body: { lease_expires_at: new Date(clock.nowMs() + 3_000).toISOString() } };
    server.offer(running, held);
    await handler.started;
    const heldBeat = server.next('heartbeat', (runId: string) => runId === held.run_id);
    await clock.advance(1_000);
    await heldBeat;
    handler.finish('a');
    await logger.next('lease lost before the handler started');
    assert.deepEqual(handled, [running.run_id], 'the lost run was not handed to the handler');
    await clock.advance(0);
    assert.ok(!server.completions.some((completion) => completion.runId === held.run_id), 'and no completion was sent for it');
  });

  test('a server that refuses connections (restarting) is retried every ~0.2 s, not every 2 s', async () => {
    const gone = createServer();
    gone.listen(0, '127.0.0.1');
    await once(gone, 'listening');
    const { port } = gone.address() as AddressInfo;
    await new Promise((resolve) => gone.close(resolve));
    const backoffs: number[] = [];
    logger.on('line', (message: string) => {
      if (message.startsWith('lease request failed')) backoffs.push((logger.lines.at(-1)!.details as { delayMs: number }).delayMs);
    });
    worker = createWorker({
      baseUrl: `http://127.0.0.1:${port}`, pool: 'p', concurrency: 1, handler: () => undefined, logger, clock, random: () => 0.5,
    });
    worker.start();
    for (let failures = 1; failures <= 7; failures++) {
      while (backoffs.length < failures) await new Promise((resolve) => setImmediate(resolve));
      await clock.advance(backoffs.at(-1)!);
    }
    assert.deepEqual(backoffs.slice(0, 7), [100, 200, 200, 200, 200, 200, 200]);
    const failure = logger.lines.find((line) => line.message.startsWith('lease request failed'))!;
    assert.match(String((failure.details as { error?: unknown }).error), /ECONNREFUSED/);
  });

  test('a failing lease request backs off on the clock, then resumes', async () => {
    server.leaseAnswers.push({ status: 503, body: { error: { code: 'unavailable', message: 'store down' } } });
    start(() => 'x');
    await server.next('lease');
    await clock.advance(0);
    assert.equal(server.leases.length, 1, 'no immediate re-issue after an error');
    const retried = server.next('lease');
    await clock.advance(leaseErrorBackoffMs(1, () => 0.5));
    await retried;
    assert.equal(server.leases.length, 2);
  });
});

describe('leaseErrorBackoffMs', () => {
  test('doubles from 100 ms to a 2 s cap, jittered ×0.5–1.5, and honours Retry-After', () => {
    assert.equal(leaseErrorBackoffMs(1, () => 0.5), 100);
    assert.equal(leaseErrorBackoffMs(3, () => 0.5), 400);
    assert.equal(leaseErrorBackoffMs(30, () => 0.5), 2_000);
    assert.equal(leaseErrorBackoffMs(5, () => 0.5), 1_600);
    assert.equal(leaseErrorBackoffMs(1, () => 0), 50);
    assert.equal(leaseErrorBackoffMs(1, () => 0.999_999) < 150, true);
    assert.equal(leaseErrorBackoffMs(1, () => 0.5, 2), 2_000);
  });

  test('while the connection is refused the cap is 200 ms; Retry-After still wins', () => {
    assert.equal(leaseErrorBackoffMs(1, () => 0.5, undefined, true), 100);
    assert.equal(leaseErrorBackoffMs(30, () => 0.5, undefined, true), 200);
    assert.equal(leaseErrorBackoffMs(30, () => 0.999_999, undefined, true) < 300, true);
    assert.equal(leaseErrorBackoffMs(30, () => 0.5, 2, true), 2_000);
  });
});
