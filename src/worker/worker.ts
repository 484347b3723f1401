/**
 * The worker (`createWorker`): leases runs of a pool and runs their handlers, `concurrency` at
 * a time. Its parts, each in a file of its own:
 *
 * - worker-options.ts: the options, checked, with their defaults;
 * - lease-policy.ts: how many runs to ask for, when, in how many parked long-polls (pure);
 * - lease-loop.ts: the lease requests themselves, their backoff and fatal refusals;
 * - run-slots.ts: the runs held, waiting, running and completing, and the slots they take;
 * - run-attempt.ts: one run's handler, heartbeats and completion;
 * - batched-calls.ts: the completions and heartbeats of all attempts, batched.
 *
 * With `prefetch`, the worker also leases runs ahead of free slots and holds them (with
 * heartbeats) until a slot frees. With `leaseAheadMs` it leases runs that become ready within
 * that window and holds each until its ready time; `holdAheadMax` gives such runs places of
 * their own, so a herd written ahead (50,000 jobs due at one instant) is in the worker's hands
 * before its instant and starts from local timers, not from lease round trips after it.
 *
 * A slot frees when its handler settles, not when the completion is acknowledged, so the next
 * lease overlaps the completion's round trip (lease-policy.ts bounds the completions that may
 * wait unacknowledged).
 *
 * A lease refused in a way that waiting cannot heal (the API key refused, the request itself
 * invalid) stops the worker: in-flight runs finish, and `run()` rejects with a `FatalError`
 * saying what to do.
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { SystemClock, type Clock, type TimerHandle } from '../clock.js';
import type { FatalError } from '../fatal-error.js';
import { createLogger } from '../obs/log.js';
import { TicklerClient } from './client.js';
import { completionBatcher, heartbeatBatcher } from './batched-calls.js';
import { GroupedTimers } from './grouped-timers.js';
import { LeaseLoop } from './lease-loop.js';
import { LeasePolicy } from './lease-policy.js';
import { LeaseLostError, type RunAttempt, type WorkerLogger } from './run-attempt.js';
import { RunSlots } from './run-slots.js';
import { workerSettingsOf, type WorkerOptions } from './worker-options.js';
import type { WorkerApi } from './worker-api.js';

export type { WorkerOptions } from './worker-options.js';
export { leaseErrorBackoffMs } from './lease-errors.js';

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

export function createWorker(options: WorkerOptions): Worker {
  return new PullWorker(options);
}

/** created → running → stopping → stopped; `stop()` before `start()` goes to stopped too. */
type WorkerState = 'created' | 'running' | 'stopping' | 'stopped';

class PullWorker implements Worker {
  readonly workerId: string;
  private readonly options: WorkerOptions;
  private readonly clock: Clock;
  private readonly logger: WorkerLogger;
  private readonly slots: RunSlots;
  private readonly leases: LeaseLoop;
  private state: WorkerState = 'created';
  private loopDone: Promise<void> = Promise.resolve();
  private stopped: Promise<void> | undefined;
  private resolveRun: (() => void) | undefined;
  private rejectRun: ((error: FatalError) => void) | undefined;
  private readonly runDone: Promise<void>;
  private runCalled = false;
  /** Why the worker stopped by itself: a lease refused in a way waiting cannot heal. */
  private fatalError: FatalError | undefined;

  constructor(options: WorkerOptions) {
    const settings = workerSettingsOf(options);
    this.options = options;
    const client: WorkerApi = options.client ?? new TicklerClient({
      baseUrl: options.baseUrl as string,
      ...(options.apiKey === undefined ? {} : { apiKey: options.apiKey }),
    });
    const clock = this.clock = options.clock ?? new SystemClock();
    const logger = this.logger = options.logger ?? createLogger({ name: 'tickler-worker' });
    const random = options.random ?? Math.random;
    const workerId = this.workerId = options.workerId ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
    const routeMissing = (route: string) => () => logger.warn({ workerId, route },
      'the server has no batch route; sending one request per run');
    const { concurrency, prefetch, completionLingerMs, leaseAheadMs, holdAheadMax } = settings;
    this.slots = new RunSlots({ concurrency, leaseAheadMs, clock, onChange: () => this.leases.wakeUp() }, {
      completions: completionBatcher(client, routeMissing('POST /v1/runs:complete'), completionLingerMs === 0
        ? undefined
        : { ms: completionLingerMs, items: Math.ceil((concurrency + prefetch) / 4) }),
      heartbeats: heartbeatBatcher(client, routeMissing('POST /v1/runs:heartbeat')),
      clock,
      heartbeatTimers: new GroupedTimers<RunAttempt>(clock, (attempt) => attempt.heartbeat()),
      handler: options.handler,
      logger,
      leaseS: options.leaseS,
      isStopping: () => this.state !== 'running',
      random,
    });
    this.leases = new LeaseLoop({
      client, pool: options.pool, workerId, waitS: settings.waitS, leaseS: options.leaseS, leaseAheadMs, holdAheadMax,
      clock, logger, random, policy: new LeasePolicy(settings), slots: this.slots, onFatal: (error) => this.fail(error),
    });
    this.runDone = new Promise((resolve, reject) => {
      this.resolveRun = resolve;
      this.rejectRun = reject;
    });
    // Only run()'s caller hears of a fatal error this way; without one it is logged (fail()).
    this.runDone.catch(() => undefined);
  }

  get inFlightCount(): number {
    return this.slots.inFlight;
  }

  start(): void {
    if (this.state !== 'created') throw new Error(`worker ${this.workerId} cannot start: it is ${this.state}`);
    this.state = 'running';
    this.logger.info({ workerId: this.workerId, pool: this.options.pool }, 'worker started');
    this.loopDone = this.leases.run();
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
    this.leases.stop();
    // The patience is counted from the stop() call, so it is armed before anything is awaited.
    let patience: TimerHandle | undefined;
    if (timeoutMs !== undefined) {
      patience = this.clock.setTimer(this.clock.nowMs() + timeoutMs, () => {
        this.slots.abortAll(new LeaseLostError('stopping', `worker stopping: handler still running after ${timeoutMs} ms`));
      });
    }
    await this.loopDone;
    // Handlers that arrive from a lease answered during the stop are in flight too.
    await this.slots.whenEmpty();
    patience?.cancel();
    this.state = 'stopped';
    if (wasRunning) this.logger.info({ workerId: this.workerId }, 'worker stopped');
    if (this.fatalError === undefined) this.resolveRun?.();
    else this.rejectRun?.(this.fatalError);
  }

  /** Stops the worker for an error waiting cannot heal; run() rejects with it once stopped. */
  private fail(error: FatalError): void {
    if (this.fatalError !== undefined) return;
    this.fatalError = error;
    if (!this.runCalled) this.logger.error({ workerId: this.workerId, error: error.message }, 'worker stopping');
    void this.stop();
  }
}
