/**
 * The worker loop: long-poll `POST /v1/workers/lease` requests for as many runs as there are
 * free slots, re-issued the moment one answers, so a run that becomes ready is handed over
 * within one round trip rather than a polling interval. While the pool is drained (the last
 * lease answered with fewer runs than it asked for) up to `longPolls` requests stay parked
 * at once, splitting the free slots, so a run made ready while one answer travels back finds
 * another request waiting; while leases come back full, one request at a time asks for every
 * free slot, as one batch. The loop sleeps only after an error (exponential backoff with
 * jitter), while every slot is busy or asked for (until one frees), and while fewer than a
 * quarter of the slots are free and some handler is still running or some run is held for
 * its ready time (leased ahead, so the next lease has time in hand): then it lingers up to
 * `leaseLingerMs` for more to free, so a worker whose handlers end one at a time leases a
 * batch per request, not one run per request (each a round trip and a store transaction).
 * An idle worker has every slot free and never lingers. Each leased run becomes a
 * `RunAttempt` (heartbeats, handler, completion).
 *
 * With `prefetch`, the worker also leases runs ahead of free slots and holds them (with
 * heartbeats) until a slot frees. With `leaseAheadMs` it leases runs that become ready within
 * that window and holds each until its ready time; `holdAheadMax` gives such runs places of
 * their own, so a herd written ahead (50,000 jobs due at one instant) is in the worker's hands
 * before its instant and starts from local timers, not from lease round trips after it.
 *
 * Completions and heartbeats of all attempts are batched (batched-calls.ts). A slot frees when
 * its handler settles, not when the completion is acknowledged, so the next lease overlaps
 * the completion's round trip; up to `unacknowledgedCompletionsPerSlot` × `concurrency`
 * completions may wait unacknowledged beyond that before they hold slots again, which bounds
 * the runs a worker holds when the server is slow to accept completions.
 *
 * A lease refused in a way that waiting cannot heal (the API key refused, the request itself
 * invalid: `unhealableLeaseError`) stops the worker: in-flight runs finish, and `run()`
 * rejects with a `FatalError` saying what to do. Everything else (no answer, a refused
 * connection, 404, 429, 5xx) is retried with backoff, logged once when it starts, at most
 * every 5 s while it lasts (failure-streak.ts) and once when leases succeed again.
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { SystemClock, type Clock, type TimerHandle } from '../clock.js';
import { FatalError } from '../fatal-error.js';
import { leaseAheadMsMax, leaseBatchMax, leaseWaitSecondsMax } from '../limits.js';
import { createLogger } from '../obs/log.js';
import { TicklerClient, describe } from './client.js';
import { TicklerApiError } from './errors.js';
import { completionBatcher, heartbeatBatcher, type CompletionBatcher, type HeartbeatBatcher } from './batched-calls.js';
import { FailureStreak } from './failure-streak.js';
import { GroupedTimers } from './grouped-timers.js';
import { InstantQueue } from './instant-queue.js';
import { LeaseLostError, RunAttempt, type AttemptDependencies, type RunHandler, type WorkerLogger } from './run-attempt.js';
import type { LeasedRun } from './wire.js';
import type { WorkerApi } from './worker-api.js';

export interface WorkerOptions {
  /**
   * What the worker calls: a `TicklerClient` (HTTP), a `PostgresWorkerApi` (straight to the
   * PostgreSQL store, src/direct-worker/postgres-direct.ts), or `baseUrl` (and `apiKey`) to build a client.
   */
  client?: WorkerApi;
  baseUrl?: string;
  apiKey?: string;
  pool: string;
  /** Handlers running at once. */
  concurrency: number;
  /**
   * Runs leased ahead of free slots and held locally until one frees, so a busy worker's
   * next handler starts without a lease round trip (graphile-worker's local queue). They
   * heartbeat while they wait. Default 0: the worker leases only as many runs as it has
   * free slots, which spreads runs evenly over the workers of a pool; raise it for short
   * handlers and high throughput. At most `leaseBatchMax`.
   */
  prefetch?: number;
  handler: RunHandler;
  /** Overrides the job's `lease_s` for runs this worker leases. */
  leaseS?: number;
  /** Long-poll wait per lease request; default 20. */
  waitS?: number;
  /**
   * Lease requests kept parked at the server at once while the pool is drained (the last
   * lease answered short), splitting the free slots between them: a run that becomes ready
   * while one request's answer is on its way back finds the other still parked, instead of
   * waiting for the next request to arrive. Once leases come back full, one request at a
   * time asks for every free slot. Default 2; 1 keeps one long-poll, as before.
   */
  longPolls?: number;
  workerId?: string;
  logger?: WorkerLogger;
  /** After `stop()` waited this long for in-flight handlers, their signals abort. Default: wait. */
  stopTimeoutMs?: number;
  /**
   * With fewer than a quarter of the slots free (and a handler running or a run held), how
   * long to wait for more before leasing (real time, like `waitS`). Default 5. Leasing ahead
   * without it asked for one or two runs per request (bench/probes/lag-stages.ts at 2,000 runs/s:
   * 9,100 lease requests for 20,000 runs; lingering, 1,370 and ~35 % less server CPU per run).
   */
  leaseLingerMs?: number;
  /**
   * With fewer completions waiting than a quarter of the slots and prefetch places, how long
   * after the previous completion request the next waits for more (real time). Default 10;
   * 0 sends each batch the moment the previous one is answered. A worker whose runs end
   * further apart than this sends each completion at once. Without it a stream of runs (bench/probes/
   * lag-stages.ts, 2,000 a second on PostgreSQL) was completed 5.6 runs a request, and the
   * requests were half the server's CPU per run.
   */
  completionLingerMs?: number;
  /**
   * Lease runs this many ms before they become ready and start each at its ready time from a
   * local timer, so the lease's round trip is off the fire's path (Quartz's
   * `batchTriggerAcquisitionFireAheadTimeWindow`). Only runs already in the ledger can be
   * leased so: a one-shot herd or a dense stream the scheduler writes ahead, a retry waiting
   * out its delay. A run leased ahead is this worker's: a cancel or change that lands after
   * the lease does not take it back (API.md, "Leasing ahead"). Held runs count against the
   * free slots and prefetch places, unless `holdAheadMax` gives them places of their own.
   * Default 0 (lease only what is ready); at most 10,000.
   */
  leaseAheadMs?: number;
  /**
   * Runs leased ahead (`leaseAheadMs`) that the worker may hold for their ready time beyond its
   * slots and prefetch places. Leases for slots then ask only for runs ready now, and leases
   * of their own ask for the free hold places as runs ready within `leaseAheadMs` (`max_ready`
   * 1: one ready run at most, so holding never takes a backlog of ready runs from other
   * workers). After a hold lease that found fewer runs than it had places for, the next waits
   * `holdLingerMs` (100 ms), so a stream entering the window is leased a tenth of a second at
   * a time, not a run or two per round trip. Default 0: held runs take slot and prefetch
   * places. At most 100,000.
   */
  holdAheadMax?: number;
  /** Drives heartbeats and backoff; tests pass a VirtualClock. */
  clock?: Clock;
  random?: () => number;
}

export interface Worker {
  /** Starts leasing; returns at once. */
  start(): void;
  /** Stops leasing, lets in-flight handlers finish (aborting them after `timeoutMs`), resolves. */
  stop(options?: { timeoutMs?: number }): Promise<void>;
  /**
   * Starts and resolves once stopped; rejects (once stopped) with a `FatalError` when the
   * server refused the worker's leases in a way waiting cannot heal. A worker started with
   * `start()` logs that error instead.
   */
  run(): Promise<void>;
  readonly workerId: string;
  /** Runs leased and not yet done: a handler running, or a completion not yet acknowledged. */
  readonly inFlightCount: number;
}

type WorkerState = 'created' | 'running' | 'stopping' | 'stopped';

const waitSecondsDefault = 20;
/**
 * Completions per slot that may wait for their acknowledgement before they hold slots. A
 * completion batch waits for the server's fsync, so with short handlers the completions of a
 * whole lease are in flight while the next lease goes out: at 1 per slot the next lease asked
 * for half the slots (bench:peers W3, traced: lease max p50 50 of 100). 4 measured best
 * (W3 15,559-15,954 -> 18,126-18,231 runs/s; 2: 17,088-17,141; 8: 18,047-18,281).
 */
export const unacknowledgedCompletionsPerSlot = 4;
const leaseLingerMsDefault = 5;
const completionLingerMsDefault = 10;
/**
 * After a hold lease that found fewer runs ahead than it had places for, the next waits this
 * long (at most a quarter of `leaseAheadMs`). With none, a stream entering the window (bench:peers
 * W2: 2,000 runs a second) was leased as it entered: 4,762 leases of 4.2 runs for 20,000 runs,
 * ~400 µs of server CPU and ~200 µs of the worker's per run (bench/probes/lag-stages.ts).
 */
const holdLingerMsMax = 100;
/** `holdAheadMax` at most. */
export const holdAheadMaxLimit = 100_000;
/**
 * Handlers started per event-loop turn at most: quick handlers free their slots in
 * microtasks, so a released herd would otherwise start in one cascade with no completion sent
 * until its end (bench/probes/worker-herd-cost.ts).
 */
const startsPerTurnMax = 500;
/**
 * Two parked long-polls: on bench:peers W2's shape (bench/probes/lag-stages.ts, 2,000 timers a
 * second) dispatch -> lease p99 went from 1-3 ms to 0-1 ms and fire -> handler p99 from 4-5
 * to 3-4 ms (docs/benchmarks.md, "Figures behind the defaults").
 */
const longPollsDefault = 2;
const longPollsMax = 8;
const errorBackoffMsBase = 100;
/**
 * 2 s, as ioredis reconnects (BullMQ's workers): a worker must find a restarted server within
 * seconds. With a 10 s cap, workers that had been failing through a 5 s outage slept up to
 * 7 s past the server's return (bench:peers W8: the first handler 6.8 s after a restart that
 * was ready in 0.9 s). Jitter spreads the reconnects; a server that wants fewer sends
 * Retry-After, which wins.
 */
const errorBackoffMsMax = 2_000;
/**
 * While the server's address refuses connections nothing listens there (a server restarting):
 * a refused connect costs it nothing, so workers try every ~0.2 s (100-300 ms jittered) and find
 * it soon after it listens. bench:peers W8 (restart → first handler, SQLite, restart ready in
 * ~0.5 s): with a 2 s cap 2.0-3.6 s; with 500 ms 694-1,236 ms (median 781) and with 200 ms 630-735
 * (median 658) in five alternated pairs, 2026-12-03. A server that answers slowly or not at all
 * (a timeout, a 503) still gets the 2 s cap.
 */
const refusedBackoffMsMax = 200;

/**
 * Lease answers that waiting cannot heal, because the worker would send the same request
 * again: the API key refused (401) or not allowed (403), the request itself refused (400, 405,
 * 413, 415, 422). No answer at all, 404 (a proxy with no server behind it yet answers it too),
 * 408, 429 and 5xx may heal, and are retried.
 */
const unhealableLeaseStatuses = new Set([400, 401, 403, 405, 413, 415, 422]);

/** The error that stops a worker whose lease got `error`, or undefined when it may heal. */
function unhealableLeaseError(error: unknown, pool: string): FatalError | undefined {
  if (!(error instanceof TicklerApiError) || !unhealableLeaseStatuses.has(error.status)) return undefined;
  const field = error.field === undefined ? '' : ` (field ${error.field})`;
  const advice = error.status === 401 ? 'give it an API key the server accepts (tickler worker: --api-key or TICKLER_API_KEY)'
    : error.status === 403 ? 'give it a key allowed to lease this pool'
      : 'correct its options or its server URL';
  return new FatalError(`lease requests for pool ${JSON.stringify(pool)} are refused (${error.status} ${error.code}: ` +
    `${error.message}${field}); repeating them cannot help, so the worker stops: ${advice}`, { cause: error });
}

/** Whether a request failed because the connection was refused (ECONNREFUSED anywhere in its causes). */
function connectionRefused(error: unknown): boolean {
  for (let cause = error, depth = 0; cause instanceof Error && depth < 5; cause = cause.cause, depth++) {
    if ((cause as NodeJS.ErrnoException).code === 'ECONNREFUSED') return true;
  }
  return false;
}

export function createWorker(options: WorkerOptions): Worker {
  return new PullWorker(options);
}

/**
 * Backoff after the n-th consecutive lease error: 100 ms doubling to 2 s (to 200 ms while the
 * connection is refused), ×0.5–1.5 jitter; Retry-After wins.
 */
export function leaseErrorBackoffMs(
  consecutiveErrors: number, random: () => number, retryAfterS?: number, refused = false,
): number {
  const capMs = refused ? refusedBackoffMsMax : errorBackoffMsMax;
  const exponentialMs = Math.min(errorBackoffMsBase * 2 ** Math.max(0, consecutiveErrors - 1), capMs);
  const jitteredMs = exponentialMs * (0.5 + random());
  return retryAfterS === undefined ? jitteredMs : Math.max(jitteredMs, retryAfterS * 1_000);
}

class PullWorker implements Worker {
  readonly workerId: string;
  private readonly options: WorkerOptions;
  private readonly client: WorkerApi;
  private readonly clock: Clock;
  private readonly logger: WorkerLogger;
  private readonly random: () => number;
  private readonly waitS: number;
  /** Leased runs from lease to acknowledged completion (held, waiting, running or completing). */
  private readonly inFlight = new Set<RunAttempt>();
  /** Settles a stop's wait once `inFlight` empties. */
  private drained: (() => void) | undefined;
  /** Handlers running now: the slots in use. */
  private runningCount = 0;
  /** Leased runs waiting for a slot (prefetched, or a herd's released holds), oldest first. */
  private readonly waiting = new FifoQueue<RunAttempt>();
  /** Runs leased ahead and held for their ready time, by the time they are released. */
  private readonly holds: InstantQueue<RunAttempt>;
  private heldCount = 0;
  /** Handlers started since the event loop last turned (`startWaiting`). */
  private startsThisTurn = 0;
  private startsDeferred = false;
  /** startWaiting() is on the stack (a handler returning at once re-enters it through its settling). */
  private startingWaiting = false;
  private readonly leaseAheadMs: number;
  private readonly holdAheadMax: number;
  /** Hold places asked for by lease requests in flight. */
  private holdsAsked = 0;
  /** Hold leases in flight (in `leases` too). */
  private holdLeaseCount = 0;
  /** After a hold lease came back short, no other before this (on the clock). */
  private holdsResumeAtMs = Number.NEGATIVE_INFINITY;
  private readonly holdLingerMs: number;
  private readonly prefetch: number;
  private readonly completions: CompletionBatcher;
  private readonly heartbeats: HeartbeatBatcher;
  private readonly attemptDependencies: AttemptDependencies;
  private readonly longPolls: number;
  /** Lease requests in flight, and the slots they asked for. */
  private readonly leases = new Set<Promise<void>>();
  private slotsAsked = 0;
  /** The last lease answered with fewer runs than it asked for (the pool had no more), or none has yet. */
  private poolDrained = true;
  /** The last hold lease filled every place it asked for: the window may hold more. */
  private takingHolds = false;
  private consecutiveErrors = 0;
  /** After a failed lease, no request before this (on the clock). */
  private backoffEndMs = Number.NEGATIVE_INFINITY;
  private state: WorkerState = 'created';
  private leaseController = new AbortController();
  /** Resolves whatever the loop is waiting on (a free slot, a backoff) so it looks at state again. */
  private wake: (() => void) | undefined;
  private loopDone: Promise<void> = Promise.resolve();
  private stopped: Promise<void> | undefined;
  private resolveRun: (() => void) | undefined;
  private rejectRun: ((error: FatalError) => void) | undefined;
  private readonly runDone: Promise<void>;
  private runCalled = false;
  /** Why the worker stopped by itself: a lease refused in a way waiting cannot heal. */
  private fatalError: FatalError | undefined;
  private readonly leaseFailures: FailureStreak;

  constructor(options: WorkerOptions) {
    if (!Number.isInteger(options.concurrency) || options.concurrency < 1) {
      throw new RangeError(`concurrency must be a positive integer, got ${options.concurrency}`);
    }
    const waitS = options.waitS ?? waitSecondsDefault;
    if (!(waitS >= 0 && waitS <= leaseWaitSecondsMax)) {
      throw new RangeError(`waitS must be within 0..${leaseWaitSecondsMax}, got ${waitS}`);
    }
    for (const name of ['leaseLingerMs', 'completionLingerMs'] as const) {
      const value = options[name];
      if (value !== undefined && !(value >= 0 && value <= 1_000)) throw new RangeError(`${name} must be within 0..1000, got ${value}`);
    }
    const prefetch = options.prefetch ?? 0;
    if (!Number.isInteger(prefetch) || prefetch < 0 || prefetch > leaseBatchMax) {
      throw new RangeError(`prefetch must be an integer within 0..${leaseBatchMax}, got ${options.prefetch}`);
    }
    this.prefetch = prefetch;
    const leaseAheadMs = options.leaseAheadMs ?? 0;
    if (!Number.isInteger(leaseAheadMs) || leaseAheadMs < 0 || leaseAheadMs > leaseAheadMsMax) {
      throw new RangeError(`leaseAheadMs must be an integer within 0..${leaseAheadMsMax}, got ${options.leaseAheadMs}`);
    }
    this.leaseAheadMs = leaseAheadMs;
    const holdAheadMax = options.holdAheadMax ?? 0;
    if (!Number.isInteger(holdAheadMax) || holdAheadMax < 0 || holdAheadMax > holdAheadMaxLimit) {
      throw new RangeError(`holdAheadMax must be an integer within 0..${holdAheadMaxLimit}, got ${options.holdAheadMax}`);
    }
    if (holdAheadMax > 0 && leaseAheadMs === 0) throw new RangeError('holdAheadMax needs leaseAheadMs');
    this.holdAheadMax = holdAheadMax;
    this.holdLingerMs = Math.min(holdLingerMsMax, leaseAheadMs / 4);
    const longPolls = options.longPolls ?? longPollsDefault;
    if (!Number.isInteger(longPolls) || longPolls < 1 || longPolls > longPollsMax) {
      throw new RangeError(`longPolls must be an integer within 1..${longPollsMax}, got ${options.longPolls}`);
    }
    this.longPolls = longPolls;
    if (options.client === undefined && options.baseUrl === undefined) {
      throw new TypeError('createWorker needs a client or a baseUrl');
    }
    this.options = options;
    this.waitS = waitS;
    this.client = options.client ?? new TicklerClient({
      baseUrl: options.baseUrl as string,
      ...(options.apiKey === undefined ? {} : { apiKey: options.apiKey }),
    });
    this.clock = options.clock ?? new SystemClock();
    this.logger = options.logger ?? createLogger({ name: 'tickler-worker' });
    this.random = options.random ?? Math.random;
    this.holds = new InstantQueue<RunAttempt>(this.clock, (attempt) => this.releaseHeld(attempt));
    this.workerId = options.workerId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
    const routeMissing = (route: string) => () => this.logger.warn({ workerId: this.workerId, route },
      'the server has no batch route; sending one request per run');
    const completionLingerMs = options.completionLingerMs ?? completionLingerMsDefault;
    this.completions = completionBatcher(this.client, routeMissing('POST /v1/runs:complete'), completionLingerMs === 0
      ? undefined
      : { ms: completionLingerMs, items: Math.ceil((options.concurrency + prefetch) / 4) });
    this.heartbeats = heartbeatBatcher(this.client, routeMissing('POST /v1/runs:heartbeat'));
    // One for every attempt: an object and a closure per run were garbage the worker's
    // scavenges paid for.
    this.attemptDependencies = {
      completions: this.completions,
      heartbeats: this.heartbeats,
      onHandlerSettled: () => {
        this.runningCount--;
        this.startWaiting();
        this.wakeLoop();
      },
      onAttemptDone: (attempt) => this.attemptDone(attempt),
      clock: this.clock,
      heartbeatTimers: new GroupedTimers<RunAttempt>(this.clock, (attempt) => attempt.heartbeat()),
      handler: options.handler,
      logger: this.logger,
      leaseS: options.leaseS,
      isStopping: () => this.state !== 'running',
      random: this.random,
    };
    this.leaseFailures = new FailureStreak('lease requests', { workerId: this.workerId, pool: options.pool }, this.logger, this.clock);
    this.runDone = new Promise((resolve, reject) => {
      this.resolveRun = resolve;
      this.rejectRun = reject;
    });
    // Only run()'s caller hears of a fatal error this way; without one it is logged (fail()).
    this.runDone.catch(() => undefined);
  }

  get inFlightCount(): number {
    return this.inFlight.size;
  }

  start(): void {
    if (this.state !== 'created') throw new Error(`worker ${this.workerId} cannot start: it is ${this.state}`);
    this.state = 'running';
    this.logger.info({ workerId: this.workerId, pool: this.options.pool }, 'worker started');
    this.loopDone = this.leaseLoop();
  }

  run(): Promise<void> {
    this.runCalled = true;
    this.start();
    return this.runDone;
  }

  stop(options: { timeoutMs?: number } = {}): Promise<void> {
    if (this.stopped !== undefined) return this.stopped;
    this.stopped = this.drain(options.timeoutMs ?? this.options.stopTimeoutMs);
    return this.stopped;
  }

  private async drain(timeoutMs: number | undefined): Promise<void> {
    const wasRunning = this.state === 'running';
    this.state = 'stopping';
    this.leaseController.abort(new LeaseLostError('stopping', 'worker stopping'));
    this.wakeLoop();
    // The patience is counted from the stop() call, so it is armed before anything is awaited.
    let patience: TimerHandle | undefined;
    if (timeoutMs !== undefined) {
      patience = this.clock.setTimer(this.clock.nowMs() + timeoutMs, () => {
        for (const attempt of this.inFlight) {
          attempt.abort(new LeaseLostError('stopping', `worker stopping: handler still running after ${timeoutMs} ms`));
        }
        // Runs still held for their ready time are let go now: aborted, their handlers never start.
        void this.holds.fireAll();
      });
    }
    await this.loopDone;
    // Handlers that arrive from a lease answered during the stop are in inFlight too.
    while (this.inFlight.size > 0) {
      await new Promise<void>((resolve) => {
        this.drained = resolve;
      });
    }
    patience?.cancel();
    this.state = 'stopped';
    if (wasRunning) this.logger.info({ workerId: this.workerId }, 'worker stopped');
    if (this.fatalError === undefined) this.resolveRun?.();
    else this.rejectRun?.(this.fatalError);
  }

  private async leaseLoop(): Promise<void> {
    const refillSlots = Math.ceil((this.options.concurrency + this.prefetch) / 4);
    const lingerMs = this.options.leaseLingerMs ?? leaseLingerMsDefault;
    let lingerEndMs: number | undefined;
    while (this.state === 'running') {
      const backoffMs = this.backoffEndMs - this.clock.nowMs();
      if (backoffMs > 0) {
        await this.sleepUntilWoken(backoffMs);
        continue;
      }
      if (this.leaseHoldsIfDue()) continue;
      const freeSlots = Math.min(this.freeSlotCount() - this.slotsAsked, leaseBatchMax);
      // A second long-poll only while the pool is drained: in throughput mode one request asks
      // for every free slot, as one batch.
      const pollsAllowed = this.poolDrained ? this.longPolls : 1;
      if (freeSlots <= 0 || this.leases.size - this.holdLeaseCount >= pollsAllowed) {
        await this.sleepUntilWoken(this.holdLingerLeftMs());
        continue;
      }
      if (freeSlots < refillSlots && this.runningCount + this.heldCount > 0 && lingerMs > 0) {
        lingerEndMs ??= performance.now() + lingerMs;
        const remainingMs = lingerEndMs - performance.now();
        if (remainingMs > 0) {
          await this.sleepUntilWoken(remainingMs, 'real');
          continue;
        }
      }
      lingerEndMs = undefined;
      // The first of several parked polls takes its share, so the next has slots to ask for.
      const openPolls = pollsAllowed - (this.leases.size - this.holdLeaseCount);
      this.track(this.leaseOnce(Math.ceil(freeSlots / openPolls)));
    }
    // Runs answered to a request the stop cut short are still taken (leaseOnce).
    await Promise.all([...this.leases]);
  }

  private track(lease: Promise<void>): void {
    this.leases.add(lease);
    void lease.finally(() => {
      this.leases.delete(lease);
      this.wakeLoop();
    });
  }

  /**
   * Sends a hold lease (`holdAheadMax`) if one is due: places are free, the linger after a
   * short one is over, and fewer are in flight than allowed (one; `longPolls` while answers
   * come back full, so the server leases a herd while the worker reads the last answer).
   */
  private leaseHoldsIfDue(): boolean {
    if (this.holdAheadMax === 0 || this.clock.nowMs() < this.holdsResumeAtMs) return false;
    const holdsAllowed = this.takingHolds ? this.longPolls : 1;
    const places = Math.min(this.freeHoldCount(), leaseBatchMax - 1);
    if (places <= 0 || this.holdLeaseCount >= holdsAllowed) return false;
    this.track(this.leaseHoldsOnce(Math.ceil(places / (holdsAllowed - this.holdLeaseCount))));
    return true;
  }

  /** How long until a hold lease may go again, if one is wanted and only the linger holds it back. */
  private holdLingerLeftMs(): number | undefined {
    if (this.holdAheadMax === 0 || this.holdLeaseCount > 0 || this.freeHoldCount() <= 0) return undefined;
    const leftMs = this.holdsResumeAtMs - this.clock.nowMs();
    return leftMs > 0 ? leftMs : undefined;
  }

  /**
   * One lease request for up to `max` runs ready now (and, without `holdAheadMax`, ready
   * within `leaseAheadMs`); its slots count as asked for until it settles.
   */
  private async leaseOnce(max: number): Promise<void> {
    this.slotsAsked += max;
    try {
      const answer = await this.requestLease({
        max, ...(this.leaseAheadMs === 0 || this.holdAheadMax > 0 ? {} : { ahead_ms: this.leaseAheadMs }),
      });
      if (answer === undefined) return;
      this.poolDrained = answer.runs.length < max;
      // Runs leased are ours even if a stop began meanwhile: handle them rather than let them expire.
      for (const run of answer.runs) this.accept(run);
      // One turn for the handlers just started: short ones settle in it, and the next lease
      // asks for the slots they freed too. Counted at once, a lease of 100 quick runs left
      // 50 "running" and the next asked for half (bench:peers W3 with prefetch 50: every
      // lease 50 runs, 18,142-18,271 runs/s; after the turn 100, 19,896-20,563).
      if (answer.runs.length > 0) await new Promise((resolve) => setImmediate(resolve));
    } finally {
      this.slotsAsked -= max;
    }
  }

  /**
   * One hold lease: up to `places` runs ready within `leaseAheadMs`, and at most one ready
   * now (`max_ready` is at least 1; a ready one waits for a slot as a prefetched run would).
   */
  private async leaseHoldsOnce(places: number): Promise<void> {
    this.holdsAsked += places;
    this.holdLeaseCount++;
    try {
      const answer = await this.requestLease({ max: places + 1, max_ready: 1, ahead_ms: this.leaseAheadMs });
      if (answer === undefined) return;
      let held = 0;
      for (const run of answer.runs) if (this.accept(run)) held++;
      this.takingHolds = held >= places;
      if (!this.takingHolds) this.holdsResumeAtMs = this.clock.nowMs() + this.holdLingerMs;
      if (answer.runs.length > 0) await new Promise((resolve) => setImmediate(resolve));
    } finally {
      this.holdsAsked -= places;
      this.holdLeaseCount--;
    }
  }

  /** A lease request; undefined when it failed (backing off) or the worker is stopping. */
  private async requestLease(ask: { max: number; max_ready?: number; ahead_ms?: number }): Promise<{ runs: LeasedRun[] } | undefined> {
    try {
      const answer = await this.client.leaseRuns({
        pool: this.options.pool,
        ...ask,
        wait_s: this.waitS,
        worker_id: this.workerId,
        ...(this.options.leaseS === undefined ? {} : { lease_s: this.options.leaseS }),
      }, { signal: this.leaseController.signal });
      this.consecutiveErrors = 0;
      this.leaseFailures.succeeded();
      return answer;
    } catch (error) {
      if (this.state !== 'running') return undefined;
      const fatal = unhealableLeaseError(error, this.options.pool);
      if (fatal !== undefined) {
        this.fail(fatal);
        return undefined;
      }
      this.consecutiveErrors += 1;
      const retryAfterS = error instanceof TicklerApiError ? error.retryAfterS : undefined;
      const delayMs = leaseErrorBackoffMs(this.consecutiveErrors, this.random, retryAfterS, connectionRefused(error));
      this.backoffEndMs = Math.max(this.backoffEndMs, this.clock.nowMs() + delayMs);
      this.logger.debug({ workerId: this.workerId, consecutiveErrors: this.consecutiveErrors, delayMs: Math.round(delayMs),
        error: describe(error) }, 'lease request failed; backing off');
      this.leaseFailures.failed(error);
      return undefined;
    }
  }

  /** Stops the worker for an error waiting cannot heal; run() rejects with it once stopped. */
  private fail(error: FatalError): void {
    if (this.fatalError !== undefined) return;
    this.fatalError = error;
    if (!this.runCalled) this.logger.error({ workerId: this.workerId, error: error.message }, 'worker stopping');
    void this.stop();
  }

  /**
   * Runs the worker may lease now: slots and prefetch places not taken by a running, waiting
   * or held run, less any excess of unacknowledged completions.
   */
  private freeSlotCount(): number {
    const queuedCount = this.runningCount + this.waiting.length + Math.max(0, this.heldCount - this.holdAheadMax);
    const completingCount = this.inFlight.size - this.runningCount - this.waiting.length - this.heldCount;
    return this.options.concurrency + this.prefetch - queuedCount -
      Math.max(0, completingCount - unacknowledgedCompletionsPerSlot * this.options.concurrency);
  }

  /** Hold places (`holdAheadMax`) neither taken by a held run nor asked for. */
  private freeHoldCount(): number {
    return Math.max(0, this.holdAheadMax - Math.min(this.heldCount, this.holdAheadMax) - this.holdsAsked);
  }

  /**
   * Takes a leased run: its handler starts now if a slot is free, else when one frees; a run
   * leased ahead of its ready time waits for that time first (heartbeating meanwhile).
   */
  private accept(run: LeasedRun): boolean {
    const attempt = new RunAttempt(run, this.attemptDependencies);
    this.inFlight.add(attempt);
    // The ready time is the server's clock; the hold never exceeds leaseAheadMs, so a worker
    // whose clock lags the server's cannot sit on a run longer than it asked to.
    const nowMs = this.clock.nowMs();
    const readyAtMs = this.leaseAheadMs === 0 || run.ready_at === undefined ? Number.NaN : Date.parse(run.ready_at);
    if (readyAtMs > nowMs) {
      attempt.keepAlive();
      this.holds.add(Math.min(readyAtMs, nowMs + this.leaseAheadMs), attempt);
      this.heldCount++;
      return true;
    }
    this.waiting.push(attempt);
    this.startWaiting();
    // Still waiting for a slot: it heartbeats meanwhile (one that started arms its own).
    attempt.keepAlive();
    return false;
  }

  /** Hands a run held for its ready time to the slots (or, if aborted meanwhile, lets it go). */
  private releaseHeld(attempt: RunAttempt): void {
    this.heldCount--;
    this.waiting.push(attempt);
    this.startWaiting();
  }

  /** The attempt's completion was answered or given up, or its run was taken away. */
  private attemptDone(attempt: RunAttempt): void {
    this.inFlight.delete(attempt);
    if (this.inFlight.size === 0) this.drained?.();
    this.wakeLoop();
  }

  /**
   * Hands waiting runs to free slots, oldest first. Quick handlers free their slots at once
   * (or, if they return promises, in microtasks), so a long queue (a herd's released holds) would start run after run without the
   * event loop ever turning: no completion sent, none acknowledged, every finished attempt kept
   * alive until the last start. So at most `startsPerTurnMax` start per turn; the rest wait for
   * the next one.
   */
  private startWaiting(): void {
    // A handler that returns at once frees its slot within execute(), which re-enters here: the loop below takes the slot.
    if (this.startingWaiting) return;
    this.startingWaiting = true;
    try {
      while (this.runningCount < this.options.concurrency && this.waiting.length > 0) {
        if (this.startsThisTurn >= startsPerTurnMax) {
          this.startInNextTurn();
          return;
        }
        if (this.startsThisTurn++ === 0) setImmediate(this.endTurn);
        this.runningCount++;
        this.waiting.shift().execute();
      }
    } finally {
      this.startingWaiting = false;
    }
  }

  private startInNextTurn(): void {
    if (this.startsDeferred) return;
    this.startsDeferred = true;
    setImmediate(() => {
      this.startsDeferred = false;
      this.startWaiting();
    });
  }

  private readonly endTurn = (): void => {
    this.startsThisTurn = 0;
  };

  /** Waits until a slot frees, a stop begins, or `delayMs` passes (on the clock, or in real time). */
  private sleepUntilWoken(delayMs?: number, time: 'clock' | 'real' = 'clock'): Promise<void> {
    return new Promise((resolve) => {
      const elapsed = (): void => {
        this.wake = undefined;
        resolve();
      };
      let cancel: (() => void) | undefined;
      if (delayMs !== undefined && time === 'real') {
        const handle = setTimeout(elapsed, delayMs);
        cancel = () => clearTimeout(handle);
      } else if (delayMs !== undefined) {
        const handle = this.clock.setTimer(this.clock.nowMs() + delayMs, elapsed);
        cancel = () => handle.cancel();
      }
      this.wake = () => {
        cancel?.();
        resolve();
      };
    });
  }

  private wakeLoop(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }
}

/**
 * First in, first out, with O(1) `shift`: `Array.prototype.shift` moves every element, and a
 * herd's 50,000 released holds wait here at once (50,000 shifts measured ~100 ms on Node 20).
 */
class FifoQueue<T> {
  private items: T[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  /** The oldest item; call only when `length > 0`. */
  shift(): T {
    const item = this.items[this.head]!;
    this.head++;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (this.head >= 1_024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }
}
