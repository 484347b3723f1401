/**
 * A run's life after dispatch (DESIGN.md flows 6–7): lease, heartbeat, complete, lease
 * expiry and replay. The worker's fencing token is checked in the same statement or
 * transaction that writes (invariant 4); every status change appends a run event
 * (invariant 6), except heartbeats, which change no status and would flood the log.
 *
 *   ready | retry_wait --lease--> running --succeeded--> succeeded
 *   running --failed, attempts left--> retry_wait      running --failed, none left--> dead
 *   running --failed_permanent--> dead                 running --lease expired--> ready | dead | abandoned
 *   dead --replay--> ready                             ready | running | retry_wait --replaced--> cancelled
 */
import assert from 'node:assert/strict';
import type Database from 'better-sqlite3';
import { hasAttemptsLeft, retryDelayMs } from '../../domain/retry.js';
import type { JobSpec, RunStatus } from '../../domain/types.js';
import { laneOrder, leasedEventDetail, readyMaxOf } from '../store.js';
import type {
  CompleteOutcome, CompleteRequest, ExpiredLease, HeartbeatOutcome, LeaseRunsRequest, LeasedRun, ReplayOutcome,
  TeamScope,
} from '../store.js';
import { parseDecimalId, runFromRow, type RunRow } from './rows.js';
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

type RunWithSpec = RunRow & { spec: string };

interface SucceededParams {
  run_id: string;
  token: number;
  team: string | null;
  finished_at: number;
  result: string | null;
}

export class RunTransitions {
  private readonly selectLeasable: Database.Statement<[string, string, number, number, string | null, string | null, number], LeasableRow>;
  private readonly markRunning: Database.Statement<[number, number, number, number, string | null, number]>;
  private readonly extendLease: Database.Statement<[number, string, number], { lease_expires_at: number }>;
  private readonly selectSpec: Database.Statement<[string], { spec: string }>;
  private readonly selectExpired: Database.Statement<[number, number], RunWithSpec>;
  private readonly setOutcome: Database.Statement<{
    run_id: string; status: string; finished_at: number | null; last_error: string | null; result: string | null;
    ready_at: number | null;
  }>;
  private readonly markReplayed: Database.Statement<[number, string]>;
  private readonly markSucceeded: Database.Statement<SucceededParams, RunRow>;
  /** markSucceeded answering only what the rest of the completion needs. */
  private readonly markSucceededBriefly: Database.Statement<SucceededParams, { run_seq: number; job_seq: number }>;
  private readonly markManySucceeded: Database.Statement<[string], { run_id: string; run_seq: number; job_seq: number }>;
  /** Capacity hook: pauses, resource caps and the plan's per-team reads. */
  readonly gates: SqliteLeaseGates;

  constructor(
    private readonly db: Database.Database,
    private readonly runs: RunTable,
    private readonly tokens: TokenSequence,
    private readonly random: () => number,
  ) {
    this.gates = new SqliteLeaseGates(db);
    // One lane at a time, so each query is a range seek on runs_leasable in ready_at order.
    // SQLite pulls the two fields a lease needs out of the job's spec: `->` answers the
    // payload's JSON text as stored, which goes to the worker unparsed.
    this.selectLeasable = db.prepare<[string, string, number, number, string | null, string | null, number], LeasableRow>(`
      SELECT r.run_seq, r.run_id, r.job_id, r.team, r.status, r.attempt, r.scheduled_at, r.fire_at, r.dispatched_at,
        r.ready_at, j.spec ->> '$.lease_s' AS lease_s, j.spec -> '$.payload' AS payload_json
      FROM runs r JOIN jobs j ON j.job_seq = r.job_seq
      WHERE r.pool = ? AND r.lane = ? AND r.status IN ('ready', 'retry_wait') AND r.held = 0 AND r.ready_at > ? AND r.ready_at <= ?
        AND (? IS NULL OR r.team = ?)
      ORDER BY r.ready_at ${boundLimit}`).raw(true);
    this.markRunning = db.prepare(`
      UPDATE runs SET status = 'running', attempt = attempt + 1, fencing_token = ?, lease_ms = ?,
        lease_expires_at = ?, started_at = ?, worker_id = ?, ready_at = NULL
      WHERE run_seq = ?`);
    // The fence and the write in one statement.
    this.extendLease = db.prepare(`
      UPDATE runs SET lease_expires_at = ? + lease_ms
      WHERE run_id = ? AND status = 'running' AND fencing_token = ? RETURNING lease_expires_at`);
    this.selectSpec = db.prepare('SELECT spec FROM jobs WHERE job_id = ?');
    this.selectExpired = db.prepare(`
      SELECT r.*, j.spec FROM runs r JOIN jobs j ON j.job_seq = r.job_seq
      WHERE r.status = 'running' AND r.lease_expires_at <= ? ORDER BY r.lease_expires_at ${boundLimit}`);
    this.setOutcome = db.prepare(`
      UPDATE runs SET status = @status, finished_at = @finished_at, last_error = @last_error, result = @result,
        ready_at = @ready_at, lease_expires_at = NULL
      WHERE run_id = @run_id`);
    // A success fenced and written in one statement: the common completion reads nothing first.
    const markSucceeded = `
      UPDATE runs SET status = 'succeeded', finished_at = @finished_at, last_error = NULL, result = @result,
        ready_at = NULL, lease_expires_at = NULL
      WHERE run_id = @run_id AND status = 'running' AND fencing_token = @token AND (@team IS NULL OR team = @team)
      RETURNING`;
    this.markSucceeded = db.prepare(`${markSucceeded} *`);
    this.markSucceededBriefly = db.prepare(`${markSucceeded} run_seq, job_seq`);
    // Many successes as one statement: one JSON array of [run_id, token, result, team, at],
    // each element fenced as markSucceeded fences one. json_each drives the loop and each
    // element finds its run by the run_id index.
    this.markManySucceeded = db.prepare(`
      UPDATE runs SET status = 'succeeded', finished_at = c.at, last_error = NULL, result = c.result,
        ready_at = NULL, lease_expires_at = NULL
      FROM (SELECT value ->> 0 AS run_id, value ->> 1 AS token, value ->> 2 AS result, value ->> 3 AS team,
                   value ->> 4 AS at FROM json_each(?)) AS c
      WHERE runs.run_id = c.run_id AND runs.status = 'running' AND runs.fencing_token = c.token
        AND (c.team IS NULL OR runs.team = c.team)
      RETURNING runs.run_id, runs.run_seq, runs.job_seq`);
    this.markReplayed = db.prepare(`
      UPDATE runs SET status = 'ready', attempt_base = attempt, ready_at = ?, finished_at = NULL,
        lease_expires_at = NULL, held = 0
      WHERE run_id = ?`);
  }

  /**
   * Lane by lane, in ready order. With a `readyMax` below `max` (and `aheadMs`), two passes:
   * runs ready now up to `readyMax`, then runs ready within `aheadMs` up to `max`.
   */
  lease(request: LeaseRunsRequest): LeasedRun[] {
    assert.ok(request.max >= 1, 'lease at least one run');
    const aheadUntilMs = request.nowMs + (request.aheadMs ?? 0);
    const readyMax = readyMaxOf(request);
    const apply = (): LeasedRun[] => {
      const leased: LeasedRun[] = [];
      // Capacity hook: a paused scope leases nothing; a plan is executed slice by slice.
      const gate = this.gates.open(request);
      if (gate === null) return leased;
      if (request.plan !== undefined && readyMax >= request.max) {
        runPlanSync(request.plan, request.max, (slice, room) =>
          this.leaseSlice(request, gate, slice, aheadUntilMs, leased.length + room, leased));
        return leased;
      }
      if (readyMax >= request.max) {
        this.leaseWithin(request, gate, Number.MIN_SAFE_INTEGER, aheadUntilMs, request.max, leased);
      } else {
        this.leaseWithin(request, gate, Number.MIN_SAFE_INTEGER, request.nowMs, readyMax, leased);
        if (aheadUntilMs > request.nowMs) this.leaseWithin(request, gate, request.nowMs, aheadUntilMs, request.max, leased);
      }
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
    const leaseExpiresAtMs = Math.max(request.nowMs, readyAtMs) + leaseMs;
    this.markRunning.run(token, leaseMs, leaseExpiresAtMs, request.nowMs, request.workerId, runSeq);
    this.runs.eventOfSeq(runSeq, request.nowMs, 'leased', status as RunStatus, 'running',
      JSON.stringify(leasedEventDetail(attempt + 1, request, readyAtMs)));
    return {
      runId, jobId, team, attempt: attempt + 1, scheduledAtMs, fireAtMs, dispatchedAtMs: dispatchedAtMs ?? fireAtMs,
      payloadJson: payloadJson ?? 'null', fencingToken: String(token), leaseExpiresAtMs, readyAtMs,
    };
  }

  /**
   * A lease past its expiry that no sweep has taken yet still extends: the token is still the
   * current one, so no other worker can hold the run.
   */
  heartbeat(team: TeamScope, runId: string, fencingToken: string, nowMs: number): HeartbeatOutcome {
    const row = this.runs.get(runId);
    if (row === undefined || (team !== null && row.team !== team)) return { kind: 'not_found' };
    const token = parseDecimalId(fencingToken);
    if (token !== null) {
      const extended = this.extendLease.get(nowMs, runId, token);
      if (extended !== undefined) return { kind: 'extended', leaseExpiresAtMs: extended.lease_expires_at };
    }
    return row.status === 'cancelled' ? { kind: 'cancelled' } : { kind: 'stale_token' };
  }

  /**
   * Answers the outcome and the pools where a held run was released. A success needs
   * nothing of the job's spec: it is fenced and written by one UPDATE ... RETURNING, and only
   * when that changes nothing is the run read, to answer not_found, cancelled or stale_token
   * (measured: the read first was 5.8 us of a completion's ~30). A failure reads the run and
   * the spec (for the retry policy); the run answered is that row with the outcome applied.
   */
  complete(request: CompleteRequest): { outcome: CompleteOutcome; readyPools: string[] } {
    const readyPools: string[] = [];
    const apply = (): CompleteOutcome => {
      if (request.status === 'succeeded') {
        const done = this.completeSucceeded(request, readyPools);
        if (done !== null) return done;
      }
      // A failure, or a success the fence refused: read the run to say which, or to apply the retry policy.
      const row = this.runs.get(request.runId);
      if (row === undefined || (request.team !== null && row.team !== request.team)) return { kind: 'not_found' };
      if (row.status === 'cancelled') return { kind: 'cancelled' };
      if (row.status !== 'running' || String(row.fencing_token) !== request.fencingToken) return { kind: 'stale_token' };
      const result = request.result === undefined ? null : JSON.stringify(request.result);
      const outcome = request.status === 'succeeded'
        ? { status: 'succeeded' as const, readyAtMs: null, eventType: 'succeeded', detail: null }
        : this.failureOutcome(row, request);
      const change = {
        run_id: row.run_id, status: outcome.status, ready_at: outcome.readyAtMs, result,
        finished_at: outcome.status === 'retry_wait' ? null : request.nowMs,
        last_error: outcome.status === 'succeeded' ? null : request.error,
      };
      this.setOutcome.run(change);
      this.runs.eventOfSeq(row.run_seq, request.nowMs, outcome.eventType, 'running', outcome.status,
        outcome.detail === null ? null : JSON.stringify(outcome.detail));
      if (outcome.status !== 'retry_wait') {
        const pool = this.runs.releaseHeldRun(row.job_seq, request.nowMs)?.pool ?? null;
        if (pool !== null) readyPools.push(pool);
      } else {
        // Parked waiters arm for the retry's ready time (StoreNotifications.onRunsReady).
        readyPools.push(row.pool);
      }
      return { kind: 'completed', run: runFromRow({ ...row, ...change, lease_expires_at: null }) };
    };
    return { outcome: atomically(this.db, apply), readyPools };
  }

  /**
   * Successes answered without the run (`wantRun` false), as one UPDATE, then each recorded
   * one's event and held run as `complete` writes them. Answers `accepted` for each request
   * the statement recorded and null for the rest (fence refused, unknown run, a run named
   * twice), which the caller completes one by one as `complete` would have. Run inside the
   * caller's transaction.
   */
  completeManySucceeded(requests: readonly CompleteRequest[]): { outcomes: (CompleteOutcome | null)[]; readyPools: string[] } {
    const readyPools: string[] = [];
    const outcomes: (CompleteOutcome | null)[] = new Array<CompleteOutcome | null>(requests.length).fill(null);
    const firstIndexOf = new Map<string, number>();
    const elements: unknown[] = [];
    requests.forEach((request, index) => {
      const token = parseDecimalId(request.fencingToken);
      if (token === null || firstIndexOf.has(request.runId)) return;
      firstIndexOf.set(request.runId, index);
      elements.push([request.runId, token, request.result === undefined ? null : JSON.stringify(request.result),
        request.team, request.nowMs]);
    });
    if (elements.length === 0) return { outcomes, readyPools };
    const recorded = this.markManySucceeded.all(JSON.stringify(elements));
    const events: [number, number][] = [];
    for (const row of recorded) {
      const index = firstIndexOf.get(row.run_id)!;
      events.push([row.run_seq, requests[index]!.nowMs]);
      outcomes[index] = { kind: 'accepted' };
    }
    this.runs.eventsOfSeqs(events, 'succeeded', 'running', 'succeeded');
    // Most jobs hold no run; one statement finds those that do.
    const nowMs = Math.max(...requests.map((request) => request.nowMs));
    for (const jobSeq of this.runs.jobsHoldingRunsAmong(recorded.map((row) => row.job_seq))) {
      const pool = this.runs.releaseHeldRun(jobSeq, nowMs)?.pool ?? null;
      if (pool !== null) readyPools.push(pool);
    }
    return { outcomes, readyPools };
  }

  /** Records a success if the token is the run's current one; null when the fence refused it. */
  private completeSucceeded(request: CompleteRequest, readyPools: string[]): CompleteOutcome | null {
    const token = parseDecimalId(request.fencingToken);
    if (token === null) return null;
    const params: SucceededParams = {
      run_id: request.runId, token, team: request.team, finished_at: request.nowMs,
      result: request.result === undefined ? null : JSON.stringify(request.result),
    };
    if (request.wantRun === false) {
      const seqs = this.markSucceededBriefly.get(params);
      if (seqs === undefined) return null;
      this.afterSuccess(seqs, request.nowMs, readyPools);
      return { kind: 'accepted' };
    }
    const row = this.markSucceeded.get(params);
    if (row === undefined) return null;
    this.afterSuccess(row, request.nowMs, readyPools);
    return { kind: 'completed', run: runFromRow(row) };
  }

  /** The success's event, and the job's held run released if it was waiting for this one. */
  private afterSuccess(seqs: { run_seq: number; job_seq: number }, nowMs: number, readyPools: string[]): void {
    this.runs.eventOfSeq(seqs.run_seq, nowMs, 'succeeded', 'running', 'succeeded', null);
    const pool = this.runs.releaseHeldRun(seqs.job_seq, nowMs)?.pool ?? null;
    if (pool !== null) readyPools.push(pool);
  }

  /** A failed attempt waits for a retry while the job's policy has attempts left; otherwise it is dead. */
  private failureOutcome(row: RunRow, request: CompleteRequest):
    { status: 'retry_wait' | 'dead'; readyAtMs: number | null; eventType: string; detail: Record<string, unknown> } {
    const spec = JSON.parse(this.selectSpec.get(row.job_id)!.spec) as JobSpec;
    const attemptsUsed = row.attempt - row.attempt_base;
    if (request.status === 'failed' && hasAttemptsLeft(spec.retry, attemptsUsed)) {
      const delayMs = retryDelayMs(spec.retry, attemptsUsed, this.random());
      return { status: 'retry_wait', readyAtMs: request.nowMs + delayMs, eventType: 'retry_scheduled',
        detail: { error: request.error, delayMs } };
    }
    return { status: 'dead', readyAtMs: null, eventType: 'dead', detail: { error: request.error, completion: request.status } };
  }

  /**
   * `Store.releaseStrandedHeldRuns`: held runs of jobs with no other active run, released as
   * a completion releases them. (One writer: nothing strands a held run here that the
   * completions do not release; the net is the same on both stores.)
   */
  releaseStranded(nowMs: number, limit: number): { released: { runId: string; jobId: string }[]; readyPools: string[] } {
    const released: { runId: string; jobId: string }[] = [];
    const readyPools: string[] = [];
    for (const jobSeq of this.runs.jobsHoldingRuns(limit)) {
      const run = this.runs.releaseHeldRun(jobSeq, nowMs);
      if (run === null) continue;
      released.push({ runId: run.runId, jobId: run.jobId });
      readyPools.push(run.pool);
    }
    return { released, readyPools };
  }

  expire(nowMs: number, limit: number): { expired: ExpiredLease[]; readyPools: string[] } {
    const readyPools: string[] = [];
    const apply = (): ExpiredLease[] => this.selectExpired.all(nowMs, limit).map((row) => {
      const spec = JSON.parse(row.spec) as JobSpec;
      let toStatus: ExpiredLease['toStatus'];
      if (spec.idempotency === 'unsafe') toStatus = 'abandoned';
      else if (!hasAttemptsLeft(spec.retry, row.attempt - row.attempt_base)) toStatus = 'dead';
      else toStatus = 'ready';
      const final = toStatus !== 'ready';
      this.setOutcome.run({ run_id: row.run_id, status: toStatus, finished_at: final ? nowMs : null,
        last_error: 'worker lease expired', result: null, ready_at: final ? null : nowMs });
      const eventType = toStatus === 'ready' ? 'lease_expired' : toStatus;
      this.runs.event(row.run_id, nowMs, eventType, 'running', toStatus,
        { attempt: row.attempt, workerId: row.worker_id });
      if (final) {
        const pool = this.runs.releaseHeldRun(row.job_seq, nowMs)?.pool ?? null;
        if (pool !== null) readyPools.push(pool);
      } else {
        readyPools.push(row.pool);
      }
      return { runId: row.run_id, pool: row.pool, toStatus };
    });
    return { expired: atomically(this.db, apply), readyPools };
  }

  replay(team: TeamScope, runId: string, nowMs: number): ReplayOutcome {
    const apply = (): ReplayOutcome => {
      const row = this.runs.get(runId);
      if (row === undefined || (team !== null && row.team !== team)) return { kind: 'not_found' };
      if (row.status !== 'dead') return { kind: 'invalid_state', run: runFromRow(row) };
      this.markReplayed.run(nowMs, runId);
      this.runs.event(runId, nowMs, 'replayed', 'dead', 'ready', { attempt: row.attempt });
      return { kind: 'replayed', run: runFromRow(this.runs.get(runId)!) };
    };
    return atomically(this.db, apply);
  }
}
