/**
 * The lease (DESIGN.md flow 6; run-lifecycle.ts decides what may be leased and how): a
 * worker's, one ahead of its ready time, or one served inside a dispatch's transaction
 * (sqlite-store.ts `leaseToParkedWaiters`), all through `RunLease.lease`. Lane by lane, in ready
 * order; each run leased takes the next token and appends its `leased` event (invariant 6).
 */
import assert from 'node:assert/strict';
import type Database from 'better-sqlite3';
import {
  leaseExpiresAtMsOf, leasePasses, leasableStatusesSql, leasedAttemptOf, leasedEventDetail, leasedStatus,
} from '../../domain/run-lifecycle.js';
import type { RunStatus } from '../../domain/types.js';
import { laneOrder, type LeaseRunsRequest, type LeasedRun } from '../store.js';
import { boundLimit, type RunTable, type TokenSequence } from './tables.js';
import { atomically } from './atomically.js';
// Capacity hooks (lease-gates.ts): the lease plan, pauses and resource caps.
import { runPlanSync, type LeaseSlice } from '../../domain/lease-policy.js';
import type { Lane } from '../../domain/types.js';
import { SqliteLeaseGates, type LeaseGate } from './lease-gates.js';

/**
 * A leasable run as the lease query answers it, in column order: the query runs in raw mode
 * (arrays, not objects). Measured (bench/probes/sqlite-store-cost.ts, 30,000 runs, alternated): a
 * lease from 12.4-12.7 to 10.1-12.2 us of wall time per run; an ad-hoc loop of the query
 * alone, 3.6 to 2.3 us per row.
 */
type LeasableRow = [
  run_seq: number, run_id: string, job_id: string, team: string, status: string, attempt: number,
  scheduled_at: number, fire_at: number, dispatched_at: number | null, ready_at: number, lease_s: number,
  payload_json: string | null,
];

/**
 * The lease query: the leasable runs of one pool and lane whose ready time is in
 * (`afterMs`, `untilMs`], oldest first, with what the lease answers of each. One lane at a
 * time, so each query is a range seek on runs_leasable in ready_at order (the status list is
 * the index's predicate, word for word). SQLite pulls the two fields a lease needs out of the
 * job's spec: `->` answers the payload's JSON text as stored, which goes to the worker unparsed.
 */
function leaseQueryText(): string {
  return `
    SELECT r.run_seq, r.run_id, r.job_id, r.team, r.status, r.attempt, r.scheduled_at, r.fire_at, r.dispatched_at,
      r.ready_at, j.spec ->> '$.lease_s' AS lease_s, j.spec -> '$.payload' AS payload_json
    FROM runs r JOIN jobs j ON j.job_seq = r.job_seq
    WHERE r.pool = ? AND r.lane = ? AND r.status IN ${leasableStatusesSql} AND r.held = 0 AND r.ready_at > ? AND r.ready_at <= ?
      AND (? IS NULL OR r.team = ?)
    ORDER BY r.ready_at ${boundLimit}`;
}

export class RunLease {
  private readonly selectLeasable: Database.Statement<[string, string, number, number, string | null, string | null, number], LeasableRow>;
  private readonly markRunning: Database.Statement<[number, number, number, number, number, string | null, number]>;
  /** Capacity hook: pauses, resource caps and the plan's per-team reads. */
  readonly gates: SqliteLeaseGates;

  constructor(
    private readonly db: Database.Database,
    private readonly runs: RunTable,
    private readonly tokens: TokenSequence,
  ) {
    this.gates = new SqliteLeaseGates(db);
    this.selectLeasable = db.prepare<[string, string, number, number, string | null, string | null, number], LeasableRow>(
      leaseQueryText()).raw(true);
    this.markRunning = db.prepare(`
      UPDATE runs SET status = '${leasedStatus}', attempt = ?, fencing_token = ?, lease_ms = ?,
        lease_expires_at = ?, started_at = ?, worker_id = ?, ready_at = NULL
      WHERE run_seq = ?`);
  }

  /** The lease's passes (`leasePasses`: ready now up to `readyMax`, then ahead up to `max`), in one transaction. */
  lease(request: LeaseRunsRequest): LeasedRun[] {
    assert.ok(request.max >= 1, 'lease at least one run');
    const apply = (): LeasedRun[] => {
      const leased: LeasedRun[] = [];
      // Capacity hook: a paused scope leases nothing; a plan is executed slice by slice.
      const gate = this.gates.open(request);
      if (gate === null) return leased;
      const passes = leasePasses(request);
      if (request.plan !== undefined && passes.length === 1 && passes[0]!.upToCount === request.max) {
        const { untilMs } = passes[0]!;
        runPlanSync(request.plan, request.max, (slice, room) => this.leaseSlice(request, gate, slice, untilMs, leased.length + room, leased));
        return leased;
      }
      for (const pass of passes) this.leaseWithin(request, gate, pass.afterMs, pass.untilMs, pass.upToCount, leased);
      return leased;
    };
    return atomically(this.db, apply);
  }

  /** Leases runs with `afterMs < ready_at <= untilMs` until `leased` holds `upToCount`. */
  private leaseWithin(request: LeaseRunsRequest, gate: LeaseGate, afterMs: number, untilMs: number, upToCount: number,
    leased: LeasedRun[], lanes: readonly Lane[] = laneOrder, team: string | null = request.team): void {
    for (const lane of lanes) {
      const remaining = upToCount - leased.length;
      if (remaining <= 0) return;
      // Capacity hook: the gate holds back runs of paused teams and runs over a resource cap.
      const rows = gate.admit(remaining, (limit) => team !== null && request.team === null
        ? this.gates.selectTeamRows(request.pool, lane, team, afterMs, untilMs, limit) as LeasableRow[]
        : this.selectLeasable.all(request.pool, lane, afterMs, untilMs, team, team, limit));
      if (rows.length === 0) continue;
      let token = this.tokens.reserve(rows.length);
      for (const row of rows) {
        const run = this.leaseOne(row, token++, request);
        run.lane = lane;
        if (!gate.open) this.gates.holdSlots(gate, run);
        leased.push(run);
      }
    }
  }

  /** Capacity hook: one slice of a lease plan (a lane or all, a team or the request's scope); answers what it leased. */
  private leaseSlice(request: LeaseRunsRequest, gate: LeaseGate, slice: LeaseSlice, untilMs: number, upToCount: number,
    leased: LeasedRun[]): number {
    if (slice.team !== null && gate.teamPaused(slice.team)) return 0;
    const before = leased.length;
    this.leaseWithin(request, gate, Number.MIN_SAFE_INTEGER, untilMs, upToCount, leased,
      slice.lane === null ? laneOrder : [slice.lane], slice.team ?? request.team);
    return leased.length - before;
  }

  /** A run leased ahead (ready_at still to come) is leased from its ready time, and its event says so. */
  private leaseOne(row: LeasableRow, token: number, request: LeaseRunsRequest): LeasedRun {
    const [runSeq, runId, jobId, team, status, attempt, scheduledAtMs, fireAtMs, dispatchedAtMs, readyAtMs, leaseS,
      payloadJson] = row;
    const leaseMs = request.leaseMs ?? leaseS * 1000;
    const leaseExpiresAtMs = leaseExpiresAtMsOf(request.nowMs, readyAtMs, leaseMs);
    const leasedAttempt = leasedAttemptOf(attempt);
    this.markRunning.run(leasedAttempt, token, leaseMs, leaseExpiresAtMs, request.nowMs, request.workerId, runSeq);
    this.runs.eventOfSeq(runSeq, request.nowMs, 'leased', status as RunStatus, leasedStatus,
      JSON.stringify(leasedEventDetail(leasedAttempt, request, readyAtMs)));
    return {
      runId, jobId, team, attempt: leasedAttempt, scheduledAtMs, fireAtMs, dispatchedAtMs: dispatchedAtMs ?? fireAtMs,
      payloadJson: payloadJson ?? 'null', fencingToken: String(token), leaseExpiresAtMs, readyAtMs,
    };
  }
}
