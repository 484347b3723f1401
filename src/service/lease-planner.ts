/**
 * Shares each lease among lanes and teams (DESIGN.md "Many teams"): a Store wrapper (STYLE.md
 * §2) in front of the lease waiters. Before a lease it reads which teams have ready runs in each
 * lane of the pool (a few index seeks, read again 10 ms after runs became ready there, or 100 ms on),
 * takes tokens for the dispatch caps that apply (per lane, `PUT /v1/lanes/{lane}`; per team,
 * the team limits' `dispatch_per_s`) from buckets every node shares, and hands the store the
 * plan of `planLease` (src/domain/lease-policy.ts), whose state (the P2 credit, each lane's
 * deficit round robin) it keeps per pool. With one lane and one team ready and no cap, the
 * lease goes to the store as it came. Tokens a lease did not use go back.
 *
 * A dispatch leases the runs it makes ready to parked waiters in its own transaction; for a pool
 * whose leases are shaped (several lanes or teams ready, or a cap) it leaves them to the waiters'
 * own planned leases, woken by the same dispatch.
 *
 * It also counts each team's share of a lane's leases on this node (`tickler_dispatch_share`)
 * and names a team holding over half of a lane's leases for 10 minutes (the noisy neighbour):
 * logged once when it crosses, listed by `GET /v1/ops/noisy-neighbours`.
 */
import type { Clock } from '../clock.js';
import * as limits from '../limits.js';
import {
  laneBudgetKey, newPoolPolicyState, planLease, policyLanes, settlePlan, teamBudgetKey, type LeasePlan, type PoolPolicyState,
} from '../domain/lease-policy.js';
import type { Lane } from '../domain/types.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';
import type { ClaimParkedWaiter, LeasedRun, LeaseRunsRequest, Store, TeamScope } from '../store/store.js';
import { DispatchShares, type NoisyNeighbour } from './dispatch-shares.js';

/**
 * What the lease planner reads of a team's limits (`GET/PUT /v1/teams/{team}/limits`): its
 * `dispatch_per_s` (null: none) and `weight`, as the team limits' `teamLimits(team)` answers
 * them. Without a source every team has weight 1 and no dispatch cap.
 */
export interface TeamLimitsSource {
  teamLimits(team: string): { dispatchPerS: number | null; weight: number };
}

export const p2ShareDefault = limits.leaseP2ShareDefault;
const { leaseBacklogReadTtlMs: backlogReadTtlMs, leaseBacklogRereadMs: backlogRereadMs, leaseLaneCapsReadTtlMs: laneCapsReadTtlMs } = limits;

export interface LeasePlannerOptions {
  store: Store;
  clock: Clock;
  metrics: Metrics;
  logger: Pick<Logger, 'warn'>;
  /** P2's share of a pool's leases while P0 or P1 have ready runs (`--p2-share`). */
  p2Share?: number;
  teamLimits?: TeamLimitsSource | null;
  /** False: leases go lane by lane in ready order across teams (the fairness benchmark's baseline). */
  fairTeams?: boolean;
}

interface PoolEntry {
  state: PoolPolicyState;
  backlogs: Map<string, { atMs: number; backlog: Map<Lane, string[]> }>;
  /** Runs became ready here since the backlogs were read. */
  stale: boolean;
  shaped: boolean;
}

export class LeasePlanner {
  /** The store with planned leases: what the lease waiters and the capacity routes use. */
  readonly store: Store;
  readonly shares: DispatchShares;
  private readonly pools = new Map<string, PoolEntry>();
  private laneCaps: { atMs: number; caps: Map<Lane, number> } | null = null;
  private readonly p2Share: number;

  constructor(private readonly options: LeasePlannerOptions) {
    this.p2Share = options.p2Share ?? p2ShareDefault;
    this.shares = new DispatchShares(options.metrics, options.logger);
    const inner = options.store;
    inner.onRunsReady((pool) => {
      const entry = this.pools.get(pool);
      if (entry !== undefined) entry.stale = true;
    });
    options.metrics.resourceUsageSource = () => inner.resourceUsage();
    const overrides = new Map<PropertyKey, unknown>([
      ['leaseRuns', (request: LeaseRunsRequest) => this.lease(request)],
      ['setParkedWaiters', (claim: ClaimParkedWaiter | null) => inner.setParkedWaiters?.(claim === null ? null : this.claimParkedWaiter(claim))],
      ['setLaneDispatchCap', async (lane: Lane, perS: number | null) => {
        await inner.setLaneDispatchCap(lane, perS);
        this.laneCaps = null;
      }],
    ]);
    const bound = new Map<PropertyKey, unknown>();
    this.store = new Proxy(inner, {
      get(target, property, receiver) {
        const known = overrides.get(property) ?? bound.get(property);
        if (known !== undefined) return known;
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof value !== 'function') return value;
        const method = (value as (...args: unknown[]) => unknown).bind(target);
        bound.set(property, method);
        return method;
      },
    });
  }

  noisyNeighbours(): NoisyNeighbour[] {
    return this.shares.noisy(this.options.clock.nowMs());
  }

  private poolEntry(pool: string): PoolEntry {
    let entry = this.pools.get(pool);
    if (entry === undefined) {
      entry = { state: newPoolPolicyState(), backlogs: new Map(), stale: true, shaped: false };
      this.pools.set(pool, entry);
    }
    return entry;
  }

  private async backlogOf(entry: PoolEntry, team: TeamScope, pool: string, nowMs: number): Promise<Map<Lane, string[]>> {
    const key = team ?? '';
    const known = entry.backlogs.get(key);
    const ageMs = known === undefined ? Number.POSITIVE_INFINITY : nowMs - known.atMs;
    // Under a steady stream of dispatches runs become ready all the time: a busy pool is read
    // again at most every `backlogRereadMs` (under the virtual clock, whenever it changed).
    const rereadDue = entry.stale && (ageMs >= backlogRereadMs || this.options.clock.isVirtual);
    if (known !== undefined && !rereadDue && ageMs >= 0 && ageMs < backlogReadTtlMs) return known.backlog;
    if (rereadDue) {
      entry.backlogs.clear();
      entry.stale = false;
    }
    const backlog = await this.options.store.readyLaneTeams(team, pool, nowMs);
    entry.backlogs.set(key, { atMs: nowMs, backlog });
    return backlog;
  }

  private async laneCapsAt(nowMs: number): Promise<Map<Lane, number>> {
    if (this.laneCaps !== null && nowMs >= this.laneCaps.atMs && nowMs - this.laneCaps.atMs < laneCapsReadTtlMs) return this.laneCaps.caps;
    const caps = await this.options.store.listLaneDispatchCaps();
    this.laneCaps = { atMs: nowMs, caps };
    return caps;
  }

  private async lease(request: LeaseRunsRequest): Promise<LeasedRun[]> {
    const store = this.options.store;
    // A lease in two passes (ready now, then ahead) goes as it is; the gates still hold in the store.
    if (request.max <= 0 || (request.readyMax !== undefined && request.readyMax < request.max)) {
      return this.leased(request.pool, await store.leaseRuns(request), request.nowMs);
    }
    const entry = this.poolEntry(request.pool);
    const backlog = await this.backlogOf(entry, request.team, request.pool, request.nowMs);
    const caps = await this.takeTokens(backlog, request);
    const plan = planLease(entry.state, {
      max: request.max, team: request.team, backlog, p2Share: this.p2Share,
      weightOf: (team) => this.weightOf(team), fairTeams: this.options.fairTeams !== false,
      ...(caps.lanes === null ? {} : { laneBudgets: caps.lanes }),
      ...(caps.teams === null ? {} : { teamBudgets: caps.teams }),
    });
    entry.shaped = plan !== null;
    if (plan === null) return this.leased(request.pool, await store.leaseRuns(request), request.nowMs);
    let runs: LeasedRun[];
    try {
      runs = await store.leaseRuns({ ...request, plan });
    } finally {
      await this.returnTokens(plan, caps);
    }
    settlePlan(entry.state, plan);
    return this.leased(request.pool, runs, request.nowMs);
  }

  private weightOf(team: string): number {
    const weight = this.options.teamLimits?.teamLimits(team).weight;
    return typeof weight === 'number' && weight > 0 ? weight : 1;
  }

  /** Tokens for the lease from every cap that applies to a lane or team with ready runs. */
  private async takeTokens(backlog: Map<Lane, string[]>, request: LeaseRunsRequest):
    Promise<{ lanes: Partial<Record<Lane, number>> | null; teams: Record<string, number> | null; rates: Map<string, number> }> {
    const rates = new Map<string, number>();
    const laneCaps = await this.laneCapsAt(request.nowMs);
    for (const lane of policyLanes) {
      const rate = laneCaps.get(lane);
      if (rate !== undefined && backlog.has(lane)) rates.set(laneBudgetKey(lane), rate);
    }
    const teams = new Set([...backlog.values()].flat());
    for (const team of teams) {
      const rate = this.options.teamLimits?.teamLimits(team).dispatchPerS;
      if (typeof rate === 'number' && rate > 0) rates.set(teamBudgetKey(team), rate);
    }
    if (rates.size === 0) return { lanes: null, teams: null, rates };
    const lanes: Partial<Record<Lane, number>> = {};
    const teamTokens: Record<string, number> = {};
    for (const [key, rate] of rates) {
      const granted = await this.options.store.takeDispatchTokens(key, rate, request.max, request.nowMs);
      if (key.startsWith('lane:')) lanes[key.slice('lane:'.length) as Lane] = granted;
      else teamTokens[key.slice('team:'.length)] = granted;
    }
    return {
      lanes: Object.keys(lanes).length > 0 ? lanes : null,
      teams: Object.keys(teamTokens).length > 0 ? teamTokens : null,
      rates,
    };
  }

  /** What the plan's budgets kept (tokens granted and not leased) goes back to the buckets. */
  private async returnTokens(plan: LeasePlan, caps: { rates: Map<string, number> }): Promise<void> {
    for (const [key, rate] of caps.rates) {
      const left = Math.floor(plan.budgets[key] ?? 0);
      if (left > 0) await this.options.store.returnDispatchTokens(key, rate, left);
    }
  }

  private leased(pool: string, runs: LeasedRun[], nowMs: number): LeasedRun[] {
    if (runs.length > 0) this.shares.record(pool, runs, nowMs);
    return runs;
  }

  /** A firing serves parked waiters only of pools whose leases are not shaped; their own leases are. */
  private claimParkedWaiter(leaser: ClaimParkedWaiter): ClaimParkedWaiter {
    return (pool, nowMs) => {
      if (this.pools.get(pool)?.shaped === true || (this.laneCaps?.caps.size ?? 0) > 0) return null;
      const claim = leaser(pool, nowMs);
      if (claim === null) return null;
      return {
        request: claim.request,
        settle: (runs) => {
          this.leased(pool, runs, nowMs);
          claim.settle(runs);
        },
      };
    };
  }
}
