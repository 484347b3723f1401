/**
 * Concurrent leases of one pool on one node share a statement. Each lease claims runs from
 * the head of the pool's queue with `FOR UPDATE SKIP LOCKED`; two claimers at once both walk
 * that head, and the second locks-and-skips every run the first holds, and then every index
 * entry the first left dead, before it finds its own. Measured through the Store alone
 * (`bench/probes/pg-store-cost.ts`, 20,000 runs, leases of 50): 40-54 us of PostgreSQL CPU per run
 * leased with one claimer, 62 with two, 71-94 with four and 118 with eight; two claimers lease
 * a little faster than one on an idle database, four and more no faster (docs/benchmarks.md,
 * "Figures behind the defaults").
 *
 * So a pool has one lease statement in flight per node: a lease that finds the pool idle
 * runs at once, exactly as before; leases arriving while one runs wait for it, and then go
 * together as one statement (`leaseTogether`) for the sum of their `max`, each still written
 * with its own worker id, and each answered its share in claim order. A lease that cannot
 * share a statement (another team scope, lease length or look-ahead than the leases beside
 * it, or one taken in two passes, `readyMax`) goes on its own in its turn. Leases of other
 * pools never wait for this one. Across nodes the claimers still meet in the database, one
 * per node and pool at most.
 */
import { leasePasses, noLowerBoundMs } from '../../domain/run-lifecycle.js';
import type { LeasedRun, LeaseRunsRequest } from '../store.js';

interface PendingLease {
  request: LeaseRunsRequest;
  resolve(runs: LeasedRun[]): void;
  reject(error: unknown): void;
}

interface PoolLeases {
  running: boolean;
  queue: PendingLease[];
}

/**
 * A lease as one statement: how many runs, how far ahead. Null for one taken in two passes,
 * or in one pass with a lower bound (only runs leased ahead), as `leasePasses` plans it.
 */
export function oneStatementOf(request: LeaseRunsRequest): { max: number; aheadMs: number } | null {
  const passes = leasePasses(request);
  const pass = passes[0];
  if (pass === undefined) return { max: 0, aheadMs: 0 };
  if (passes.length > 1 || pass.afterMs !== noLowerBoundMs) return null;
  return { max: pass.upToCount, aheadMs: pass.untilMs - request.nowMs };
}

/** What leases must have in common to share a statement; null for one that goes alone. */
function shareKeyOf(request: LeaseRunsRequest): string | null {
  // Capacity hook: a planned lease (lease-policy.ts) is its own sequence of statements.
  if (request.plan !== undefined) return null;
  const statement = oneStatementOf(request);
  if (statement === null || statement.max === 0) return null;
  return JSON.stringify([request.team, request.leaseMs, statement.aheadMs]);
}

export class LeaseSharing {
  private readonly pools = new Map<string, PoolLeases>();

  /**
   * @param leaseAlone one lease, as it would run without sharing
   * @param leaseTogether leases with one share key, in one statement: one answer per lease, in order
   * @param runsMax a shared statement claims at most this many runs (the largest lease `max`)
   */
  constructor(
    private readonly leaseAlone: (request: LeaseRunsRequest) => Promise<LeasedRun[]>,
    private readonly leaseTogether: (requests: LeaseRunsRequest[]) => Promise<LeasedRun[][]>,
    private readonly runsMax: number,
  ) {}

  lease(request: LeaseRunsRequest): Promise<LeasedRun[]> {
    let pool = this.pools.get(request.pool);
    if (pool === undefined) {
      pool = { running: false, queue: [] };
      this.pools.set(request.pool, pool);
    }
    const answer = new Promise<LeasedRun[]>((resolve, reject) => pool.queue.push({ request, resolve, reject }));
    this.runNext(request.pool, pool);
    return answer;
  }

  private runNext(poolName: string, pool: PoolLeases): void {
    if (pool.running) return;
    if (pool.queue.length === 0) {
      this.pools.delete(poolName);
      return;
    }
    const group = this.takeGroup(pool.queue);
    pool.running = true;
    const answers = group.length === 1
      ? this.leaseAlone(group[0]!.request).then((runs) => [runs])
      : this.leaseTogether(group.map((pending) => pending.request));
    void answers.then(
      (runsPerLease) => group.forEach((pending, index) => pending.resolve(runsPerLease[index]!)),
      (error: unknown) => group.forEach((pending) => pending.reject(error)),
    ).finally(() => {
      pool.running = false;
      this.runNext(poolName, pool);
    });
  }

  /** The queue's first lease, and every later one that can share its statement, within `runsMax`. */
  private takeGroup(queue: PendingLease[]): PendingLease[] {
    const first = queue.shift()!;
    const key = shareKeyOf(first.request);
    if (key === null) return [first];
    const group = [first];
    let runs = oneStatementOf(first.request)!.max;
    for (let index = 0; index < queue.length;) {
      const pending = queue[index]!;
      const max = oneStatementOf(pending.request)?.max ?? 0;
      if (shareKeyOf(pending.request) === key && runs + max <= this.runsMax) {
        group.push(pending);
        runs += max;
        queue.splice(index, 1);
      } else {
        index += 1;
      }
    }
    return group;
  }
}
