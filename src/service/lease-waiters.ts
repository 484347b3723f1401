/**
 * Long-poll leasing (`POST /v1/workers/lease` with `wait_s`). A worker that finds nothing
 * waits here instead of polling; it is answered as soon as runs of its pool become
 * leasable. Two things wake a pool's waiters:
 *
 * - the store's `onRunsReady(pool)` (dispatch, re-offer, replay, trigger), and
 * - the earliest `ready_at` of a retry in the pool (`store.nextReadyAtMs`), armed on the
 *   injected clock, so retries come due under the virtual clock too; less the longest
 *   `aheadMs` of the pool's waiters, who lease runs that much before they are ready.
 *
 * Before either, a store that can (`Store.setParkedWaiters`; both stores do) leases the
 * runs a dispatch (or the finish of runs written ahead) makes ready to parked waiters inside
 * its own transaction: a waiter it serves is answered when that commits, with no transaction
 * of its own.
 *
 * Wake-ups are coalesced: a pool is drained by one loop at a time, which serves waiters in
 * arrival order and passes over a team's waiters once one comes back short (the pool is empty
 * for that team, as far ahead as that waiter asked: one asking further ahead is still served);
 * wake-ups arriving meanwhile only mark the loop to go round once more.
 *
 * A request that finds no one parked for its pool leases straight from the store and parks
 * only if that comes back empty: a busy pool's requests never wait behind one another in
 * the drain loop, which on PostgreSQL (a round trip per lease) serialised every worker of a
 * pool on a node. `wait_s` itself is
 * a transport timeout and runs in real time even in virtual-clock mode: a client's HTTP
 * request must end whatever simulated time does.
 */
import type { Clock, TimerHandle } from '../clock.js';
import type { Logger } from '../obs/log.js';
import { leaseCameBackShort, type ParkedWaiterClaim, type LeasedRun, type LeaseRunsRequest, type Store, type TeamScope } from '../store/store.js';
import { leaseWaiterReadyNowPassesCountMax, leaseWaiterReadyRecheckDelayMs } from '../limits.js';

export interface LeaseWaitRequest {
  scope: TeamScope;
  pool: string;
  max: number;
  leaseMs: number | null;
  workerId: string | null;
  /** Lease runs that become ready within this many ms too (`ahead_ms`); 0 takes only runs ready now. */
  aheadMs: number;
  /** At most this many of `max` may be ready now (`max_ready`); the rest only runs leased ahead. */
  readyMax?: number;
  /** Real milliseconds to wait for work; 0 answers at once. */
  waitMs: number;
  /** Aborted when the client went away: stop waiting. */
  signal?: AbortSignal;
}

interface Waiter {
  request: LeaseWaitRequest;
  /** A lease for this waiter is in flight; a timeout must let it land first. */
  leasing: boolean;
  expired: boolean;
  settled: boolean;
  timeout: NodeJS.Timeout;
  /** Listening on the request's signal until settled: a worker straight to the store passes one signal for all its leases. */
  onAbort: (() => void) | null;
  resolve(runs: LeasedRun[]): void;
  reject(error: unknown): void;
}

interface PoolQueue {
  waiters: Waiter[];
  draining: boolean;
  /** A wake-up arrived while draining: go round again. */
  dirty: boolean;
  readyTimer: { atMs: number; handle: TimerHandle } | null;
}

export class LeaseWaiters {
  private readonly pools = new Map<string, PoolQueue>();
  private readonly unsubscribe: () => void;
  private closed = false;

  constructor(private readonly store: Store, private readonly clock: Clock, private readonly logger: Logger) {
    this.unsubscribe = store.onRunsReady((pool) => this.wake(pool));
    store.setParkedWaiters?.((pool, nowMs) => this.claim(pool, nowMs));
  }

  /** Leases at once, or waits up to `waitMs` for runs of the pool; answers [] on timeout. */
  async lease(request: LeaseWaitRequest): Promise<LeasedRun[]> {
    if (request.waitMs <= 0 || this.closed) return this.store.leaseRuns(this.storeRequest(request));
    // With waiters parked, runs go to them first, in arrival order.
    if (!this.hasParkedWaiters(request.pool)) {
      const runs = await this.store.leaseRuns(this.storeRequest(request));
      if (runs.length > 0 || this.closed || request.signal?.aborted === true) return runs;
    }
    return this.park(request);
  }

  /** Waits for a wake-up to serve the request, or for `waitMs` to pass (answering []). */
  private park(request: LeaseWaitRequest): Promise<LeasedRun[]> {
    return new Promise<LeasedRun[]>((resolve, reject) => {
      const waiter: Waiter = {
        request, leasing: false, expired: false, settled: false, resolve, reject, onAbort: null,
        timeout: setTimeout(() => this.expire(waiter), request.waitMs),
      };
      if (request.signal !== undefined) {
        waiter.onAbort = () => this.expire(waiter);
        request.signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this.queueOf(request.pool).waiters.push(waiter);
      void this.wake(request.pool);
    });
  }

  /** Answers every waiter with no runs and stops listening (server shutdown). */
  close(): void {
    this.closed = true;
    this.unsubscribe();
    this.store.setParkedWaiters?.(null);
    for (const [pool, queue] of this.pools) {
      for (const waiter of queue.waiters) this.settle(waiter, []);
      queue.readyTimer?.handle.cancel();
      this.pools.delete(pool);
    }
  }

  /** Waiters currently parked; for tests and metrics. */
  waitingCount(): number {
    let count = 0;
    for (const queue of this.pools.values()) count += queue.waiters.filter((waiter) => !waiter.settled).length;
    return count;
  }

  private hasParkedWaiters(pool: string): boolean {
    return this.pools.get(pool)?.waiters.some((waiter) => !waiter.settled) ?? false;
  }

  private queueOf(pool: string): PoolQueue {
    let queue = this.pools.get(pool);
    if (queue === undefined) {
      queue = { waiters: [], draining: false, dirty: false, readyTimer: null };
      this.pools.set(pool, queue);
    }
    return queue;
  }

  private wake(pool: string): Promise<void> {
    const queue = this.pools.get(pool);
    if (queue === undefined) return Promise.resolve();
    if (queue.draining) {
      queue.dirty = true;
      return Promise.resolve();
    }
    return this.drain(pool, queue);
  }

  private async drain(pool: string, queue: PoolQueue): Promise<void> {
    queue.draining = true;
    try {
      for (let pass = 1; !this.closed; pass++) {
        queue.dirty = false;
        await this.servePass(queue);
        if (queue.dirty) continue;
        const readyNow = await this.armReadyTimer(pool, queue, pass >= leaseWaiterReadyNowPassesCountMax);
        if (!readyNow) break;
      }
    } catch (error) {
      this.logger.error({ err: error, pool }, 'long-poll drain failed');
    } finally {
      queue.draining = false;
      this.forgetIfIdle(pool, queue);
    }
  }

  /**
   * Serves waiters in arrival order until each team scope comes back short. A short answer
   * leasing `ahead_ms` A says nothing is ready within A: waiters of that scope asking no further
   * ahead are skipped, and one asking further (a worker's hold lease behind its slot lease) is
   * still served.
   */
  private async servePass(queue: PoolQueue): Promise<void> {
    const drainedAheadMs = new Map<string, number>();
    let allDrainedAheadMs = Number.NEGATIVE_INFINITY;
    for (const waiter of [...queue.waiters]) {
      // A waiter a dispatch is leasing to (a claim) is answered by that dispatch.
      if (waiter.settled || waiter.leasing || this.closed) continue;
      const scope = waiter.request.scope;
      const aheadMs = waiter.request.aheadMs;
      if (aheadMs <= allDrainedAheadMs || (scope !== null && aheadMs <= (drainedAheadMs.get(scope) ?? Number.NEGATIVE_INFINITY))) {
        continue;
      }
      waiter.leasing = true;
      const request = this.storeRequest(waiter.request);
      let runs: LeasedRun[];
      try {
        runs = await this.store.leaseRuns(request);
      } catch (error) {
        waiter.leasing = false;
        this.fail(waiter, error);
        continue;
      }
      waiter.leasing = false;
      if (runs.length > 0 || waiter.expired) this.settle(waiter, runs);
      if (leaseCameBackShort(request, runs)) {
        if (scope === null) allDrainedAheadMs = Math.max(allDrainedAheadMs, aheadMs);
        else drainedAheadMs.set(scope, Math.max(drainedAheadMs.get(scope) ?? Number.NEGATIVE_INFINITY, aheadMs));
      }
    }
    queue.waiters = queue.waiters.filter((waiter) => !waiter.settled);
  }

  /**
   * Arms one clock timer per pool at the earliest retry coming due for its waiters, and
   * answers true when that instant has already passed (time moved while the pass ran), so
   * the caller serves the waiters again at once. After `leaseWaiterReadyNowPassesCountMax` such passes a
   * run the store calls ready but will not lease (a race with another node) gets a timer a
   * little later instead, so a disagreement can never spin.
   */
  private async armReadyTimer(pool: string, queue: PoolQueue, noMoreImmediatePasses: boolean): Promise<boolean> {
    if (queue.waiters.length === 0 || this.closed) return false;
    const scopes = new Set(queue.waiters.map((waiter) => waiter.request.scope));
    let earliestMs: number | null = null;
    for (const scope of scopes) {
      const readyAtMs = await this.store.nextReadyAtMs(scope, pool);
      if (readyAtMs !== null && (earliestMs === null || readyAtMs < earliestMs)) earliestMs = readyAtMs;
    }
    if (earliestMs === null || this.closed) return false;
    // A waiter leasing ahead is served that much before the run is ready.
    earliestMs -= Math.max(...queue.waiters.map((waiter) => waiter.request.aheadMs));
    const nowMs = this.clock.nowMs();
    if (earliestMs <= nowMs) {
      if (!noMoreImmediatePasses) return true;
      earliestMs = nowMs + leaseWaiterReadyRecheckDelayMs;
    }
    if (queue.readyTimer !== null && queue.readyTimer.atMs <= earliestMs) return false;
    queue.readyTimer?.handle.cancel();
    const handle = this.clock.setTimer(earliestMs, () => {
      queue.readyTimer = null;
      return this.wake(pool);
    });
    queue.readyTimer = { atMs: earliestMs, handle };
    return false;
  }

  /**
   * For the store's firings (`Store.setParkedWaiters`): the oldest waiter of the pool that
   * nothing is serving, marked as being served, with what to lease for it. Its `settle`
   * answers the waiter with the runs leased, or leaves it waiting when there were none.
   */
  private claim(pool: string, nowMs: number): ParkedWaiterClaim | null {
    if (this.closed) return null;
    const waiter = this.pools.get(pool)?.waiters.find((candidate) =>
      !candidate.settled && !candidate.leasing && !candidate.expired && candidate.request.signal?.aborted !== true);
    if (waiter === undefined) return null;
    waiter.leasing = true;
    return {
      request: { ...this.storeRequest(waiter.request), nowMs },
      settle: (runs) => {
        waiter.leasing = false;
        if (runs.length > 0 || waiter.expired) this.settle(waiter, runs);
      },
    };
  }

  private forgetIfIdle(pool: string, queue: PoolQueue): void {
    queue.waiters = queue.waiters.filter((waiter) => !waiter.settled);
    if (queue.waiters.length > 0 || queue.draining) return;
    queue.readyTimer?.handle.cancel();
    if (this.pools.get(pool) === queue) this.pools.delete(pool);
  }

  private expire(waiter: Waiter): void {
    if (waiter.settled) return;
    waiter.expired = true;
    // A lease in flight lands first, so that runs it took are handed over, not stranded.
    if (!waiter.leasing) this.settle(waiter, []);
  }

  private settle(waiter: Waiter, runs: LeasedRun[]): void {
    if (waiter.settled) return;
    waiter.settled = true;
    clearTimeout(waiter.timeout);
    this.stopListening(waiter);
    waiter.resolve(runs);
    const queue = this.pools.get(waiter.request.pool);
    if (queue !== undefined && !queue.draining) this.forgetIfIdle(waiter.request.pool, queue);
  }

  private fail(waiter: Waiter, error: unknown): void {
    if (waiter.settled) return;
    waiter.settled = true;
    clearTimeout(waiter.timeout);
    this.stopListening(waiter);
    waiter.reject(error);
  }

  private stopListening(waiter: Waiter): void {
    if (waiter.onAbort !== null) waiter.request.signal?.removeEventListener('abort', waiter.onAbort);
    waiter.onAbort = null;
  }

  private storeRequest(request: LeaseWaitRequest): LeaseRunsRequest {
    return {
      team: request.scope, pool: request.pool, max: request.max, leaseMs: request.leaseMs,
      workerId: request.workerId, nowMs: this.clock.nowMs(), aheadMs: request.aheadMs,
      ...(request.readyMax === undefined ? {} : { readyMax: request.readyMax }),
    };
  }
}
