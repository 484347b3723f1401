/**
 * The worker's lease requests: `POST /v1/workers/lease` long-polls sent as the lease policy
 * decides (lease-policy.ts), each re-issued the moment one answers, so a run that becomes
 * ready is handed over within one round trip rather than a polling interval. Leased runs go
 * to the slots (run-slots.ts). The loop sleeps only when the policy says wait: after an
 * error, while every slot is busy or asked for, while it lingers for more slots to free.
 *
 * A lease refused in a way that waiting cannot heal (lease-errors.ts) is handed to `onFatal`;
 * everything else is retried with backoff, logged once when it starts, at most every 5 s
 * while it lasts (failure-streak.ts) and once when leases succeed again.
 */
import type { Clock } from '../clock.js';
import type { FatalError } from '../fatal-error.js';
import { describe } from './client.js';
import { TicklerApiError } from './errors.js';
import { FailureStreak } from './failure-streak.js';
import { connectionRefused, unhealableLeaseError } from './lease-errors.js';
import type { LeasePolicy } from './lease-policy.js';
import { LeaseLostError, type WorkerLogger } from './run-attempt.js';
import type { RunSlots } from './run-slots.js';
import type { LeasedRun } from './wire.js';
import type { WorkerApi } from './worker-api.js';

export interface LeaseLoopOptions {
  client: WorkerApi;
  pool: string;
  workerId: string;
  waitS: number;
  leaseS: number | undefined;
  leaseAheadMs: number;
  holdAheadMax: number;
  clock: Clock;
  logger: WorkerLogger;
  random: () => number;
  policy: LeasePolicy;
  slots: RunSlots;
  /** A lease was refused in a way waiting cannot heal. */
  onFatal(error: FatalError): void;
}

export class LeaseLoop {
  private stopping = false;
  private readonly controller = new AbortController();
  /** Lease requests in flight. */
  private readonly leases = new Set<Promise<void>>();
  /** Resolves whatever the loop is waiting on (a free slot, a backoff) so it looks at the policy again. */
  private wake: (() => void) | undefined;
  private readonly failures: FailureStreak;

  constructor(private readonly options: LeaseLoopOptions) {
    this.failures = new FailureStreak('lease requests', { workerId: options.workerId, pool: options.pool }, options.logger,
      options.clock);
  }

  /** Leases until `stop()`; settles once every request in flight settled (runs they bring are still taken). */
  async run(): Promise<void> {
    const { policy, slots, clock } = this.options;
    while (!this.stopping) {
      const step = policy.next(clock.nowMs(), performance.now(), slots);
      if (step.kind === 'wait') await this.sleepUntilWoken(step.forMs, step.time);
      else if (step.kind === 'lease') this.track(this.leaseOnce(step.max));
      else this.track(this.leaseHoldsOnce(step.places));
    }
    await Promise.all([...this.leases]);
  }

  /** Stops sending requests and cuts short the ones in flight. */
  stop(): void {
    this.stopping = true;
    this.controller.abort(new LeaseLostError('stopping', 'worker stopping'));
    this.wakeUp();
  }

  /** A slot or a place may have freed: the loop looks again. */
  wakeUp(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  private track(lease: Promise<void>): void {
    this.leases.add(lease);
    void lease.finally(() => {
      this.leases.delete(lease);
      this.wakeUp();
    });
  }

  /**
   * One lease request for up to `max` runs ready now (and, without `holdAheadMax`, ready
   * within `leaseAheadMs`); its slots count as asked for until it settles.
   */
  private async leaseOnce(max: number): Promise<void> {
    const { policy, slots, leaseAheadMs, holdAheadMax } = this.options;
    policy.slotLeaseSent(max);
    try {
      const answer = await this.requestLease({ max, ...(leaseAheadMs === 0 || holdAheadMax > 0 ? {} : { ahead_ms: leaseAheadMs }) });
      if (answer === undefined) return;
      policy.slotLeaseAnswered(max, answer.runs.length);
      // Runs leased are ours even if a stop began meanwhile: handle them rather than let them expire.
      for (const run of answer.runs) slots.accept(run);
      // One turn for the handlers just started: short ones settle in it, and the next lease
      // asks for the slots they freed too. Counted at once, a lease of 100 quick runs left
      // 50 "running" and the next asked for half (bench:peers W3 with prefetch 50: every
      // lease 50 runs, 18,142-18,271 runs/s; after the turn 100, 19,896-20,563).
      if (answer.runs.length > 0) await new Promise((resolve) => setImmediate(resolve));
    } finally {
      policy.slotLeaseSettled(max);
    }
  }

  /**
   * One hold lease: up to `places` runs ready within `leaseAheadMs`, and at most one ready
   * now (`max_ready` is at least 1; a ready one waits for a slot as a prefetched run would).
   */
  private async leaseHoldsOnce(places: number): Promise<void> {
    const { policy, slots, clock } = this.options;
    policy.holdLeaseSent(places);
    try {
      const answer = await this.requestLease({ max: places + 1, max_ready: 1, ahead_ms: this.options.leaseAheadMs });
      if (answer === undefined) return;
      let held = 0;
      for (const run of answer.runs) if (slots.accept(run)) held++;
      policy.holdLeaseAnswered(places, held, clock.nowMs());
      if (answer.runs.length > 0) await new Promise((resolve) => setImmediate(resolve));
    } finally {
      policy.holdLeaseSettled(places);
    }
  }

  /** A lease request; undefined when it failed (backing off) or the worker is stopping. */
  private async requestLease(ask: { max: number; max_ready?: number; ahead_ms?: number }): Promise<{ runs: LeasedRun[] } | undefined> {
    const { client, pool, workerId, waitS, leaseS, policy, clock, logger } = this.options;
    try {
      const answer = await client.leaseRuns({
        pool, ...ask, wait_s: waitS, worker_id: workerId, ...(leaseS === undefined ? {} : { lease_s: leaseS }),
      }, { signal: this.controller.signal });
      policy.leaseSucceeded();
      this.failures.succeeded();
      return answer;
    } catch (error) {
      if (this.stopping) return undefined;
      const fatal = unhealableLeaseError(error, pool);
      if (fatal !== undefined) {
        this.options.onFatal(fatal);
        return undefined;
      }
      const retryAfterS = error instanceof TicklerApiError ? error.retryAfterS : undefined;
      const { delayMs, consecutiveErrors } = policy.leaseFailed(clock.nowMs(), this.options.random, retryAfterS,
        connectionRefused(error));
      logger.debug({ workerId, consecutiveErrors, delayMs: Math.round(delayMs), error: describe(error) },
        'lease request failed; backing off');
      this.failures.failed(error);
      return undefined;
    }
  }

  /** Waits until woken, or `delayMs` passes (on the clock, or in real time). */
  private sleepUntilWoken(delayMs: number | undefined, time: 'clock' | 'real'): Promise<void> {
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
        const handle = this.options.clock.setTimer(this.options.clock.nowMs() + delayMs, elapsed);
        cancel = () => handle.cancel();
      }
      this.wake = () => {
        cancel?.();
        resolve();
      };
    });
  }
}
