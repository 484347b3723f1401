/**
 * Capacity on the embedded store (store.ts `CapacityStore`): what a lease may not take (runs
 * of a paused pool or team, runs over a resource cap), the lease plan's per-team statement,
 * and the tables behind the capacity routes.
 *
 * One writer holds the database, so a lease's gate is judged inside its own transaction from
 * the tables as they are: a pause or a cap written by the previous transaction holds for the
 * next lease. A resource slot is a row naming the run and the attempt's token; it counts
 * while that run is `running` under that token, so a completion, failure, expiry or cancel
 * frees it by changing the run, and the stale row is swept by the next lease that counts.
 */
import type Database from 'better-sqlite3';
import type { Lane } from '../../domain/types.js';
import { refillBucket } from '../../domain/lease-policy.js';
import { allTeamsPause, type LeasedRun, type LeaseRunsRequest, type PoolPause, type ResourceUsage, type TeamScope } from '../store.js';
import { boundLimit } from './tables.js';

/** The columns the lease reads (run-transitions.ts `LeasableRow`), in order. */
export const leasableColumns = `r.run_seq, r.run_id, r.job_id, r.team, r.status, r.attempt, r.scheduled_at, r.fire_at,
  r.dispatched_at, r.ready_at, j.spec ->> '$.lease_s' AS lease_s, j.spec -> '$.payload' AS payload_json`;

/** A candidate run: its id, job and team are what the gate judges. */
interface GatedRow { 1: string; 2: string; 3: string }

/** One lease's view of the gates, read at its start inside its transaction. */
export class LeaseGate {
  constructor(
    private readonly pausedTeams: ReadonlySet<string>,
    /** Capped resources: cap and slots held (running runs only); empty when no cap exists. */
    private readonly caps: Map<string, { max: number; inUse: number }>,
    private readonly resourcesOf: (jobId: string) => string[],
  ) {}

  /** Nothing to judge: every candidate run is taken as the lease finds it. */
  get open(): boolean {
    return this.pausedTeams.size === 0 && this.caps.size === 0;
  }

  teamPaused(team: string): boolean {
    return this.pausedTeams.has(team);
  }

  /**
   * Up to `wanted` of the rows `select(limit)` answers that pass the gate, in order. Rows held
   * back are still ready, so when some are, the read is repeated further (up to `scanMax`).
   */
  admit<R extends GatedRow>(wanted: number, select: (limit: number) => R[]): R[] {
    if (this.open) return select(wanted);
    let limit = wanted;
    for (;;) {
      const rows = select(limit);
      const admitted = this.filter(rows, wanted);
      if (admitted.length >= wanted || rows.length < limit || limit >= scanMax) return admitted;
      limit = Math.min(scanMax, limit * 4);
    }
  }

  /** The rows that fit, counting the slots each admitted one takes (not kept: see `took`). */
  private filter<R extends GatedRow>(rows: readonly R[], wanted: number): R[] {
    const taken = new Map<string, number>();
    const admitted: R[] = [];
    for (const row of rows) {
      if (admitted.length >= wanted) break;
      if (this.pausedTeams.has(row[3])) continue;
      const capped = this.caps.size === 0 ? [] : this.resourcesOf(row[2]).filter((name) => this.caps.has(name));
      const fits = capped.every((name) => this.caps.get(name)!.inUse + (taken.get(name) ?? 0) < this.caps.get(name)!.max);
      if (!fits) continue;
      for (const name of capped) taken.set(name, (taken.get(name) ?? 0) + 1);
      admitted.push(row);
    }
    return admitted;
  }

  /** The run was leased: the slots of its capped resources are taken, under its token. */
  cappedResourcesOf(jobId: string): string[] {
    if (this.caps.size === 0) return [];
    const capped = this.resourcesOf(jobId).filter((name) => this.caps.has(name));
    for (const name of capped) this.caps.get(name)!.inUse += 1;
    return capped;
  }
}

/** How far past the lease's size a gated read looks for runs that fit. */
const scanMax = 4_096;

export class SqliteLeaseGates {
  private readonly selectGateState: Database.Statement<[string], { caps: number; paused: string | null }>;
  private readonly selectResources: Database.Statement<[string], { resources: string | null }>;
  private readonly sweepSlots: Database.Statement<[]>;
  private readonly selectInUse: Database.Statement<[], { name: string; max_concurrency: number; in_use: number }>;
  private readonly insertSlot: Database.Statement<[string, string, number]>;
  private readonly selectOfTeam: Database.Statement<[string, string, string, number, number, number], unknown[]>;
  private readonly selectTeamsOfLane: Database.Statement<{ pool: string; lane: string; team: string | null; now: number }, { team: string }>;

  constructor(private readonly db: Database.Database) {
    this.selectGateState = db.prepare(`SELECT (SELECT count(*) FROM resource_caps) AS caps,
      (SELECT group_concat(team, char(31)) FROM pool_pauses WHERE pool = ?) AS paused`);
    this.selectResources = db.prepare(`SELECT spec -> '$.resources' AS resources FROM jobs WHERE job_id = ?`);
    this.sweepSlots = db.prepare(`DELETE FROM resource_slots WHERE NOT EXISTS (
      SELECT 1 FROM runs r WHERE r.run_id = resource_slots.run_id AND r.status = 'running' AND r.fencing_token = resource_slots.token)`);
    this.selectInUse = db.prepare(`SELECT c.name, c.max_concurrency, (SELECT count(*) FROM resource_slots s WHERE s.name = c.name) AS in_use
      FROM resource_caps c ORDER BY c.name`);
    this.insertSlot = db.prepare('INSERT OR REPLACE INTO resource_slots (name, run_id, token) VALUES (?, ?, ?)');
    // One team's runs of one lane, down runs_leasable_by_team (the plan's per-team slice).
    this.selectOfTeam = db.prepare<[string, string, string, number, number, number], unknown[]>(`
      SELECT ${leasableColumns}
      FROM runs r JOIN jobs j ON j.job_seq = r.job_seq
      WHERE r.pool = ? AND r.lane = ? AND r.team = ? AND r.status IN ('ready', 'retry_wait') AND r.held = 0
        AND r.ready_at > ? AND r.ready_at <= ?
      ORDER BY r.ready_at ${boundLimit}`).raw(true);
    // The teams of a lane, one index seek each (a skip scan of runs_leasable_by_team), kept when one is due.
    this.selectTeamsOfLane = db.prepare(`
      WITH RECURSIVE t(team) AS (
        SELECT (SELECT min(team) FROM runs WHERE pool = @pool AND lane = @lane AND status IN ('ready', 'retry_wait') AND held = 0
                  AND (@team IS NULL OR team = @team))
        UNION ALL
        SELECT (SELECT min(team) FROM runs WHERE pool = @pool AND lane = @lane AND status IN ('ready', 'retry_wait') AND held = 0
                  AND team > t.team AND (@team IS NULL OR team = @team))
          FROM t WHERE t.team IS NOT NULL
      )
      SELECT team FROM t WHERE team IS NOT NULL AND (SELECT min(ready_at) FROM runs WHERE pool = @pool AND lane = @lane
        AND team = t.team AND status IN ('ready', 'retry_wait') AND held = 0) <= @now`);
  }

  /** The gate of a lease, or null when the pool is paused for the lease's whole scope. */
  open(request: LeaseRunsRequest): LeaseGate | null {
    const state = this.selectGateState.get(request.pool)!;
    const paused = new Set(state.paused === null ? [] : state.paused.split('\u001f'));
    if (paused.has(allTeamsPause) || (request.team !== null && paused.has(request.team))) return null;
    const caps = new Map<string, { max: number; inUse: number }>();
    if (state.caps > 0) {
      this.sweepSlots.run();
      for (const row of this.selectInUse.all()) caps.set(row.name, { max: row.max_concurrency, inUse: row.in_use });
    }
    return new LeaseGate(paused, caps, (jobId) => {
      const text = this.selectResources.get(jobId)?.resources ?? null;
      return text === null ? [] : JSON.parse(text) as string[];
    });
  }

  /** One team's leasable runs of one lane, in ready order (raw rows, `leasableColumns`). */
  selectTeamRows(pool: string, lane: Lane, team: string, afterMs: number, untilMs: number, limit: number): unknown[][] {
    return this.selectOfTeam.all(pool, lane, team, afterMs, untilMs, limit) as unknown[][];
  }

  /** Records the slots a leased run took. */
  holdSlots(gate: LeaseGate, run: LeasedRun): void {
    for (const name of gate.cappedResourcesOf(run.jobId)) this.insertSlot.run(name, run.runId, Number(run.fencingToken));
  }

  readyLaneTeams(team: TeamScope, pool: string, nowMs: number): Map<Lane, string[]> {
    const backlog = new Map<Lane, string[]>();
    for (const lane of ['P0', 'P1', 'P2'] as const) {
      const teams = this.selectTeamsOfLane.all({ pool, lane, team, now: nowMs }).map((row) => row.team);
      if (teams.length > 0) backlog.set(lane, teams);
    }
    return backlog;
  }

  resourceUsage(names?: readonly string[]): ResourceUsage[] {
    this.sweepSlots.run();
    const rows = names === undefined
      ? this.selectInUse.all()
      : this.db.prepare<[string], { name: string; max_concurrency: number | null; in_use: number }>(`
        SELECT n.value AS name, c.max_concurrency, (SELECT count(*) FROM resource_slots s WHERE s.name = n.value) AS in_use
          FROM json_each(?) n LEFT JOIN resource_caps c ON c.name = n.value`).all(JSON.stringify(names));
    return rows.map((row) => ({ name: row.name, maxConcurrency: row.max_concurrency, inUse: row.in_use }));
  }

  putResourceCap(name: string, maxConcurrency: number, nowMs: number): void {
    this.db.prepare(`INSERT INTO resource_caps (name, max_concurrency, updated_at) VALUES (?, ?, ?)
      ON CONFLICT (name) DO UPDATE SET max_concurrency = excluded.max_concurrency, updated_at = excluded.updated_at`)
      .run(name, maxConcurrency, nowMs);
  }

  deleteResourceCap(name: string): boolean {
    return this.db.prepare('DELETE FROM resource_caps WHERE name = ?').run(name).changes > 0;
  }

  setPoolPause(pool: string, team: string, paused: boolean, nowMs: number): void {
    if (paused) this.db.prepare('INSERT OR IGNORE INTO pool_pauses (pool, team, at) VALUES (?, ?, ?)').run(pool, team, nowMs);
    else this.db.prepare('DELETE FROM pool_pauses WHERE pool = ? AND team = ?').run(pool, team);
  }

  clearPoolPauses(pool: string): void {
    this.db.prepare('DELETE FROM pool_pauses WHERE pool = ?').run(pool);
  }

  listPoolPauses(pool: string | null): PoolPause[] {
    return this.db.prepare<{ pool: string | null }, { pool: string; team: string; at: number }>(
      'SELECT pool, team, at FROM pool_pauses WHERE @pool IS NULL OR pool = @pool ORDER BY pool, team').all({ pool })
      .map((row) => ({ pool: row.pool, team: row.team, atMs: row.at }));
  }

  setLaneDispatchCap(lane: Lane, dispatchPerS: number | null): void {
    if (dispatchPerS === null) this.db.prepare('DELETE FROM lane_caps WHERE lane = ?').run(lane);
    else this.db.prepare('INSERT OR REPLACE INTO lane_caps (lane, dispatch_per_s) VALUES (?, ?)').run(lane, dispatchPerS);
  }

  listLaneDispatchCaps(): Map<Lane, number> {
    const rows = this.db.prepare<[], { lane: Lane; dispatch_per_s: number }>('SELECT lane, dispatch_per_s FROM lane_caps').all();
    return new Map(rows.map((row) => [row.lane, row.dispatch_per_s]));
  }

  takeDispatchTokens(key: string, ratePerS: number, wanted: number, nowMs: number): number {
    const row = this.db.prepare<[string], { tokens: number; at: number }>('SELECT tokens, at FROM dispatch_buckets WHERE key = ?').get(key);
    const { tokens, granted } = refillBucket(row, ratePerS, wanted, nowMs);
    this.db.prepare('INSERT OR REPLACE INTO dispatch_buckets (key, tokens, at) VALUES (?, ?, ?)')
      .run(key, tokens - granted, Math.max(nowMs, row?.at ?? nowMs));
    return granted;
  }

  returnDispatchTokens(key: string, ratePerS: number, count: number): void {
    this.db.prepare('UPDATE dispatch_buckets SET tokens = min(?, tokens + ?) WHERE key = ?').run(ratePerS, count, key);
  }
}

