/**
 * One attempt of one leased run inside a worker: run the handler, keep the lease alive with
 * heartbeats every third of the lease, and report the outcome with the attempt's fencing
 * token.
 *
 * The lease is lost — the handler's signal aborts and no completion is sent — when the server
 * answers a heartbeat `409 stale_token` or `cancelled` (or 404), or when two heartbeats in a
 * row get no good answer. Two misses at a third of the lease each leave the worker about a
 * third of a lease to stop before the server re-offers the run to someone else; completing
 * after that point could only be rejected or, worse, race the next attempt.
 *
 * Heartbeats and completions go through the worker's batchers (batched-calls.ts), so the
 * attempts of one worker share requests. The worker is told when the handler has settled,
 * before its completion is acknowledged, so that it can lease the next run meanwhile.
 */
import type { Clock } from '../clock.js';
import type { GroupedTimers } from './grouped-timers.js';
import { errorTextLengthMax, leaseSecondsMax, leaseSecondsMin, workerCompleteRetryDelayMsBase, workerCompleteRetryDelayMsMax, workerCompleteTriesCountMin, workerHeartbeatFailuresCountMax } from '../limits.js';
import { describe } from './client.js';
import type { CompletionBatcher, HeartbeatBatcher } from './batched-calls.js';
import { PermanentError, TicklerApiError } from './errors.js';
import type { CompleteBatchItem, CompleteRequest, LeasedRun } from './wire.js';

/** A completion without its run and token. */
type Outcome = Omit<CompleteRequest, 'fencing_token'>;

/** What a handler sees of its run; `run_id` is the idempotency key for its side effects. */
export type WorkerRun = Readonly<Omit<LeasedRun, 'fencing_token' | 'lease_expires_at'>>;

export interface HandlerContext {
  /** Aborts when the lease is lost, the run is cancelled, or `stop()` ran out of patience. */
  signal: AbortSignal;
}

export type RunHandler = (run: WorkerRun, context: HandlerContext) => unknown;

/** Minimal structured logger; a pino logger fits. */
export interface WorkerLogger {
  debug(details: object, message: string): void;
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}

/** The reason a handler's signal carries when the worker takes the run away. */
export class LeaseLostError extends Error {
  /** `stale_token`, `cancelled`, `not_found`, `heartbeat_failed` or `stopping`. */
  readonly reason: string;

  constructor(reason: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LeaseLostError';
    this.reason = reason;
  }
}

export interface AttemptDependencies {
  completions: CompletionBatcher;
  heartbeats: HeartbeatBatcher;
  /** Called once the handler has returned or thrown, before the completion is sent. */
  onHandlerSettled(): void;
  /** Called once the attempt is over: its completion answered or given up, or the run taken away. */
  onAttemptDone(attempt: RunAttempt): void;
  clock: Clock;
  /** Every attempt's heartbeats, one clock timer per instant; `fire` calls `heartbeat()`. */
  heartbeatTimers: GroupedTimers<RunAttempt>;
  handler: RunHandler;
  logger: WorkerLogger;
  /** The lease the worker asked for, if any; otherwise the job's, read from `lease_expires_at`. */
  leaseS: number | undefined;
  /** The worker is stopping: completions stop retrying after the minimum, whatever the lease. */
  isStopping(): boolean;
  random: () => number;
}

/** Heartbeats every third of the lease duration (DESIGN.md flow 6). */
export function heartbeatIntervalMsOf(leaseS: number | undefined, leaseExpiresAtMs: number, nowMs: number): number {
  // Without an explicit lease_s the lease is the job's, known only through its expiry. A
  // server on a virtual clock can make that difference meaningless, hence the clamp.
  const leaseDurationMs = leaseS !== undefined
    ? leaseS * 1_000
    : Math.min(Math.max(leaseExpiresAtMs - nowMs, leaseSecondsMin * 1_000), leaseSecondsMax * 1_000);
  return Math.max(1, Math.floor(leaseDurationMs / 3));
}

export class RunAttempt {
  /**
   * What the handler is given, made (and frozen) when the run is taken: a run held for its
   * ready time then starts with nothing left to build, and a herd's starts cost only their
   * handlers and completions. The fencing token and lease expiry are the worker's business.
   */
  readonly run: WorkerRun;
  private readonly fencingToken: string;
  private readonly context: AttemptContext;
  private readonly dependencies: AttemptDependencies;
  /**
   * Made when the handler first reads its signal: most handlers never do, and an
   * AbortController with its signal costs ~2.8 us of the worker's CPU per run (Node 20,
   * measured over 200,000). Until then the reason is kept here.
   */
  private controller: AbortController | undefined;
  private abortReason: LeaseLostError | undefined;
  private readonly heartbeatIntervalMs: number;
  /** When the next heartbeat is due, once one was scheduled (kept after it fired, until the next). */
  private heartbeatDueMs: number | undefined;
  private heartbeatFailures = 0;
  /** The lease's expiry as last answered (the lease, then each heartbeat); on the server's clock. */
  private leaseExpiresAtMs: number;
  private settled = false;

  constructor(leased: LeasedRun, dependencies: AttemptDependencies) {
    const { fencing_token: fencingToken, lease_expires_at: leaseExpiresAt, ...visible } = leased;
    this.run = Object.freeze(visible);
    this.fencingToken = fencingToken;
    this.context = new AttemptContext(this);
    this.dependencies = dependencies;
    this.leaseExpiresAtMs = Date.parse(leaseExpiresAt);
    this.heartbeatIntervalMs = heartbeatIntervalMsOf(dependencies.leaseS, this.leaseExpiresAtMs, dependencies.clock.nowMs());
  }

  /** Takes the run away from its handler (lease lost, or a stop that ran out of time). */
  abort(reason: LeaseLostError): void {
    if (this.abortReason !== undefined) return;
    this.abortReason = reason;
    this.controller?.abort(reason);
  }

  /** The handler's signal, made on first use (already aborted if the run was taken away). */
  signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.abortReason !== undefined) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  /**
   * Starts the heartbeats of a run that waits for its handler: one leased ahead of a free slot
   * (the worker's `prefetch`) or of its ready time keeps its lease meanwhile. A run that has
   * started or finished needs no call (it does nothing then).
   */
  keepAlive(): void {
    if (this.heartbeatDueMs === undefined && !this.settled) this.scheduleHeartbeat();
  }

  /**
   * Runs the handler and reports its outcome, then tells the worker (`onAttemptDone`); never
   * throws. A handler that returns at once (not a promise) settles in the same call, with no
   * promise or microtask of its own: a herd of quick handlers starts for about half the
   * worker's CPU per run (bench/probes/worker-herd-cost.ts). What is left per run until the completion's answer is the
   * completion's promise chain, which holds the attempt and nothing else.
   */
  execute(): void {
    if (this.abortReason !== undefined) {
      // Lost while it waited for a slot (a heartbeat was refused): the handler never sees it.
      this.settled = true;
      this.cancelHeartbeat();
      this.dependencies.onHandlerSettled();
      this.dependencies.logger.warn({ runId: this.run.run_id, reason: describe(this.abortReason) },
        'lease lost before the handler started: the run is not handled here');
      this.dependencies.onAttemptDone(this);
      return;
    }
    // The first heartbeat is due a third of the lease from now, but armed only for a handler
    // that returns a promise: one that returns at once needs none, and arming it (a clock timer
    // for an instant of its own, then cancelling it) cost ~4 us per run (bench/probes/worker-herd-cost.ts
    // --ready). A handler busy for long before it returns still beats at once after.
    const heartbeatDueMs = this.dependencies.clock.nowMs() + this.heartbeatIntervalMs;
    let returned: unknown;
    try {
      returned = this.dependencies.handler(this.run, this.context);
    } catch (error) {
      this.settle(failureOf(error));
      return;
    }
    if (!isThenable(returned)) {
      this.settle(successOf(returned));
      return;
    }
    if (this.heartbeatDueMs === undefined && this.abortReason === undefined) this.scheduleHeartbeat(heartbeatDueMs);
    // successOf and failureOf turn every outcome into a value, and settle() does not throw.
    void Promise.resolve(returned).then(successOf, failureOf).then((outcome) => this.settle(outcome));
  }

  /** The handler has returned or thrown: its slot frees, and the outcome goes out unless the run was taken away. */
  private settle(outcome: Outcome): void {
    this.settled = true;
    this.cancelHeartbeat();
    this.dependencies.onHandlerSettled();
    const reason = this.abortReason;
    if (reason !== undefined && reason.reason !== 'stopping') {
      this.dependencies.logger.warn({ runId: this.run.run_id, reason: reason.reason, outcome: outcome.status },
        'lease lost: the outcome is not reported');
      this.dependencies.onAttemptDone(this);
      return;
    }
    const item: CompleteBatchItem = { run_id: this.run.run_id, fencing_token: this.fencingToken, ...outcome };
    this.submitCompletion(item, 1);
  }

  private scheduleHeartbeat(dueMs = this.dependencies.clock.nowMs() + this.heartbeatIntervalMs): void {
    this.heartbeatDueMs = dueMs;
    this.dependencies.heartbeatTimers.add(dueMs, this);
  }

  private cancelHeartbeat(): void {
    if (this.heartbeatDueMs !== undefined) this.dependencies.heartbeatTimers.delete(this.heartbeatDueMs, this);
  }

  /** Sends the heartbeat that came due and schedules the next; the worker's heartbeat timers call it. */
  async heartbeat(): Promise<void> {
    if (this.settled || this.abortReason !== undefined) return;
    const { heartbeats, logger } = this.dependencies;
    try {
      // A heartbeat that hangs for a whole interval counts as failed, like one refused.
      const extended = await heartbeats.submit({ run_id: this.run.run_id, fencing_token: this.fencingToken },
        this.heartbeatIntervalMs);
      const expiresAtMs = Date.parse(extended.lease_expires_at);
      if (expiresAtMs > this.leaseExpiresAtMs) this.leaseExpiresAtMs = expiresAtMs;
      this.heartbeatFailures = 0;
    } catch (error) {
      if (error instanceof TicklerApiError && leaseLostCodes.has(error.code)) {
        this.abort(new LeaseLostError(error.code, `heartbeat refused: ${error.message}`, { cause: error }));
        return;
      }
      this.heartbeatFailures += 1;
      logger.warn({ runId: this.run.run_id, failures: this.heartbeatFailures, error: describe(error) },
        'heartbeat failed');
      if (this.heartbeatFailures >= workerHeartbeatFailuresCountMax) {
        this.abort(new LeaseLostError('heartbeat_failed',
          `${this.heartbeatFailures} heartbeats in a row failed: ${describe(error)}`, { cause: error }));
        return;
      }
    }
    if (!this.settled) this.scheduleHeartbeat();
  }

  /** Sends the outcome, retrying what may succeed later; a promise chain, not a frame kept per run. */
  private submitCompletion(item: CompleteBatchItem, tryNumber: number): void {
    this.dependencies.completions.submit(item).then(
      () => {
        this.dependencies.logger.debug({ runId: item.run_id, status: item.status }, 'completed');
        this.dependencies.onAttemptDone(this);
      },
      (error: unknown) => this.completionFailed(item, tryNumber, error),
    );
  }

  /** A completion that got no good answer: retried while that may still help, else given up (and the attempt let go). */
  private completionFailed(item: CompleteBatchItem, tryNumber: number, error: unknown): void {
    const { clock, logger, random } = this.dependencies;
    const retryable = !(error instanceof TicklerApiError) || error.retryable;
    const delayMs = Math.min(workerCompleteRetryDelayMsBase * 2 ** (tryNumber - 1), workerCompleteRetryDelayMsMax) * (0.5 + random());
    const leaseOver = clock.nowMs() + delayMs > this.leaseExpiresAtMs || this.dependencies.isStopping();
    if (!retryable || (tryNumber >= workerCompleteTriesCountMin && leaseOver)) {
      // A 409 means another attempt owns the run now: ours changes nothing, by design.
      const level = error instanceof TicklerApiError && error.status === 409 ? 'warn' : 'error';
      logger[level]({ runId: item.run_id, status: item.status, error: describe(error) },
        'completion not accepted; the server re-offers the run when its lease expires');
      this.dependencies.onAttemptDone(this);
      return;
    }
    logger.warn({ runId: item.run_id, tryNumber, delayMs: Math.round(delayMs), error: describe(error) },
      'completion failed; retrying');
    clock.setTimer(clock.nowMs() + delayMs, () => this.submitCompletion(item, tryNumber + 1));
  }
}

const leaseLostCodes = new Set(['stale_token', 'cancelled', 'not_found']);

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (typeof value === 'object' || typeof value === 'function') && value !== null
    && typeof (value as { then?: unknown }).then === 'function';
}

function successOf(result: unknown): Outcome {
  return result === undefined ? { status: 'succeeded' } : { status: 'succeeded', result };
}

function failureOf(error: unknown): Outcome {
  return {
    status: error instanceof PermanentError ? 'failed_permanent' : 'failed',
    error: describe(error).slice(0, errorTextLengthMax),
  };
}

/**
 * A handler's context. `signal` is an own, enumerable getter, so a handler that spreads or
 * destructures its context still gets the signal, and it is made only when read. The getter
 * is one function shared by every context: an object literal with a getter of its own cost
 * ~0.8 us per run to make (Node 20), a shared accessor defined on the instance ~0.1.
 */
class AttemptContext implements HandlerContext {
  declare readonly signal: AbortSignal;
  readonly #attempt: RunAttempt;

  static readonly #signalProperty: PropertyDescriptor = {
    enumerable: true,
    get(this: AttemptContext): AbortSignal {
      return this.#attempt.signal();
    },
  };

  constructor(attempt: RunAttempt) {
    this.#attempt = attempt;
    Object.defineProperty(this, 'signal', AttemptContext.#signalProperty);
  }
}
