/**
 * Completing an attempt (DESIGN.md flow 7): run-lifecycle.ts decides the outcome (success,
 * a retry after its delay, or dead); this writes it with its event (invariant 6), fenced by
 * the attempt's token in the same transaction (invariant 4), and releases the job's held run
 * when the run ended.
 */
import type Database from 'better-sqlite3';
import {
  decideCompletion, fenceHolds, isFinalStatus, leaseMissOf, leasedStatus, succeededStatus,
} from '../../domain/run-lifecycle.js';
import type { JobSpec, RetrySpec } from '../../domain/types.js';
import type { CompleteOutcome, CompleteRequest } from '../store.js';
import { parseDecimalId, runFromRow, type RunRow } from './rows.js';
import type { RunTable } from './tables.js';
import { atomically } from './atomically.js';

interface SucceededParams {
  run_id: string;
  token: number;
  team: string | null;
  finished_at: number;
  result: string | null;
}

export class RunComplete {
  private readonly selectSpec: Database.Statement<[string], { spec: string }>;
  private readonly setOutcome: Database.Statement<{
    run_id: string; status: string; finished_at: number | null; last_error: string | null; result: string | null;
    ready_at: number | null;
  }>;
  private readonly markSucceeded: Database.Statement<SucceededParams, RunRow>;
  /** markSucceeded answering only what the rest of the completion needs. */
  private readonly markSucceededBriefly: Database.Statement<SucceededParams, { run_seq: number; job_seq: number }>;
  private readonly markManySucceeded: Database.Statement<[string], { run_id: string; run_seq: number; job_seq: number }>;

  constructor(
    private readonly db: Database.Database,
    private readonly runs: RunTable,
    private readonly random: () => number,
  ) {
    this.selectSpec = db.prepare('SELECT spec FROM jobs WHERE job_id = ?');
    this.setOutcome = db.prepare(`
      UPDATE runs SET status = @status, finished_at = @finished_at, last_error = @last_error, result = @result,
        ready_at = @ready_at, lease_expires_at = NULL
      WHERE run_id = @run_id`);
    // A success (decideCompletion: finished now, no error, not ready again) fenced and written
    // in one statement: the common completion reads nothing first.
    const markSucceeded = `
      UPDATE runs SET status = '${succeededStatus}', finished_at = @finished_at, last_error = NULL, result = @result,
        ready_at = NULL, lease_expires_at = NULL
      WHERE run_id = @run_id AND status = '${leasedStatus}' AND fencing_token = @token AND (@team IS NULL OR team = @team)
      RETURNING`;
    this.markSucceeded = db.prepare(`${markSucceeded} *`);
    this.markSucceededBriefly = db.prepare(`${markSucceeded} run_seq, job_seq`);
    // Many successes as one statement: one JSON array of [run_id, token, result, team, at],
    // each element fenced as markSucceeded fences one. json_each drives the loop and each
    // element finds its run by the run_id index.
    this.markManySucceeded = db.prepare(`
      UPDATE runs SET status = '${succeededStatus}', finished_at = c.at, last_error = NULL, result = c.result,
        ready_at = NULL, lease_expires_at = NULL
      FROM (SELECT value ->> 0 AS run_id, value ->> 1 AS token, value ->> 2 AS result, value ->> 3 AS team,
                   value ->> 4 AS at FROM json_each(?)) AS c
      WHERE runs.run_id = c.run_id AND runs.status = '${leasedStatus}' AND runs.fencing_token = c.token
        AND (c.team IS NULL OR runs.team = c.team)
      RETURNING runs.run_id, runs.run_seq, runs.job_seq`);
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
      if (row === undefined || (request.team !== null && row.team !== request.team)) return leaseMissOf(undefined);
      const currentToken = row.fencing_token === null ? null : String(row.fencing_token);
      if (!fenceHolds(row.status, currentToken, request.fencingToken)) return leaseMissOf(row);
      const decided = decideCompletion(request, row.attempt - row.attempt_base,
        request.status === 'succeeded' ? undefined : this.retryOf(row.job_id), this.random);
      const change = {
        run_id: row.run_id, status: decided.status, ready_at: decided.readyAtMs, finished_at: decided.finishedAtMs,
        last_error: decided.lastError, result: request.result === undefined ? null : JSON.stringify(request.result),
      };
      this.setOutcome.run(change);
      this.runs.eventOfSeq(row.run_seq, request.nowMs, decided.eventType, leasedStatus, decided.status,
        decided.detail === null ? null : JSON.stringify(decided.detail));
      if (isFinalStatus(decided.status)) {
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
    this.runs.eventsOfSeqs(events, 'succeeded', leasedStatus, succeededStatus);
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
    this.runs.eventOfSeq(seqs.run_seq, nowMs, 'succeeded', leasedStatus, succeededStatus, null);
    const pool = this.runs.releaseHeldRun(seqs.job_seq, nowMs)?.pool ?? null;
    if (pool !== null) readyPools.push(pool);
  }

  /** The job's retry policy, read only for a failure. */
  private retryOf(jobId: string): RetrySpec {
    return (JSON.parse(this.selectSpec.get(jobId)!.spec) as JobSpec).retry;
  }
}
