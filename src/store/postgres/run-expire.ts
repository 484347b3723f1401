/**
 * Lease expiry on PostgreSQL (DESIGN.md flow 7): the running runs whose lease ended, in due
 * order, locked; run-lifecycle.ts decides each one's fate (re-offered now, dead, or abandoned
 * for an at-most-once job) and one statement writes them all, queue rows with them, then
 * their events and the release of held runs whose job's run ended.
 */
import {
  decideExpiry, expiryEventType, expiryFinishedAtMs, expiryReadyAtMs, isFinalStatus, leaseExpiredError, leasedStatus,
} from '../../domain/run-lifecycle.js';
import type { IdempotencyClass, RetrySpec } from '../../domain/types.js';
import type { ExpiredLease } from '../store.js';
import { numberArray, textArray } from './array-literals.js';
import { transaction, type StoreContext } from './context.js';
import { releaseHeldOf, releasesHeldColumn } from './worker-runs.js';
import { appendEvents } from './writes.js';

/**
 * The expired leases are read in due order down active_runs_deadline, and the read stops at
 * `limit`. A bitmap scan has no order: with active_runs analyzed before the leases were granted,
 * the planner guessed 52 expired where 4,925 were, took them all that way, joined each to its
 * run and job and sorted them to keep 50 (163 ms against 2.7; for the sweeper's 1,000, 171
 * against 44), and a sweep of n expired leases cost n²/limit.
 */
const expiredInDueOrderSql = 'SET LOCAL enable_bitmapscan = off';

/**
 * Locks the runs rows, not the queue rows, first (as completions and heartbeats do), and
 * skips those held: a running run's queue row is then written only by whoever holds its
 * runs row. The runs row is checked again under the lock (a heartbeat may have extended it);
 * `lease_expires_at <= now` is `isLeaseExpired`.
 */
const lockExpiredSql = `SELECT r.run_id, r.job_id, r.pool, r.attempt, r.attempt_base, r.worker_id,
         j.spec->>'idempotency' AS idempotency, j.spec->'retry' AS retry, ${releasesHeldColumn("j.spec->>'overlap'")}
    FROM active_runs q JOIN runs r ON r.run_id = q.run_id JOIN jobs j ON j.job_id = r.job_id
   WHERE q.status = '${leasedStatus}' AND q.due_at <= $1 AND r.status = '${leasedStatus}' AND r.lease_expires_at <= $1
   ORDER BY q.due_at LIMIT $2 FOR UPDATE OF r SKIP LOCKED`;

/** Writes each run's decided status and times; a run re-offered is queued again from its ready time, an ended one leaves the queue. */
const writeExpiredSql = `WITH expired AS (
     UPDATE runs r SET status = u.status, lease_expires_at = NULL, ready_at = u.ready_at, finished_at = u.finished_at,
                       last_error = $5
       FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS u(run_id, status, ready_at, finished_at)
      WHERE r.run_id = u.run_id
     RETURNING r.run_id, r.job_id, r.status, r.ready_at
   ), requeued AS (
     UPDATE active_runs q SET status = expired.status, due_at = expired.ready_at, lease_node = NULL
       FROM expired WHERE q.job_id = expired.job_id AND q.run_id = expired.run_id AND expired.ready_at IS NOT NULL
   )
   DELETE FROM active_runs q USING expired
    WHERE q.job_id = expired.job_id AND q.run_id = expired.run_id AND expired.ready_at IS NULL`;

interface ExpiredRow {
  run_id: string; job_id: string; pool: string; attempt: number; attempt_base: number; worker_id: string | null;
  idempotency: IdempotencyClass; retry: RetrySpec; releases_held: boolean;
}

export function expireRunLeases(context: StoreContext, nowMs: number, limit: number): Promise<ExpiredLease[]> {
  if (limit <= 0) return Promise.resolve([]);
  return transaction(context, 'expireRunLeases', async (tx) => {
    await tx.query(expiredInDueOrderSql);
    const expired = await tx.query<ExpiredRow>(lockExpiredSql, [nowMs, limit]);
    if (expired.rows.length === 0) return [];
    const outcomes: ExpiredLease[] = expired.rows.map((row) => ({
      runId: row.run_id,
      pool: row.pool,
      toStatus: decideExpiry(row.idempotency, row.retry, row.attempt - row.attempt_base),
    }));
    await tx.query(writeExpiredSql, [
      textArray(outcomes.map((outcome) => outcome.runId)),
      textArray(outcomes.map((outcome) => outcome.toStatus)),
      numberArray(outcomes.map((outcome) => expiryReadyAtMs(outcome.toStatus, nowMs))),
      numberArray(outcomes.map((outcome) => expiryFinishedAtMs(outcome.toStatus, nowMs))),
      leaseExpiredError,
    ]);
    await appendEvents(tx, outcomes.map((outcome, index) => ({
      runId: outcome.runId, atMs: nowMs, type: expiryEventType(outcome.toStatus),
      fromStatus: leasedStatus, toStatus: outcome.toStatus,
      detail: { attempt: expired.rows[index]!.attempt, workerId: expired.rows[index]!.worker_id },
    })));
    for (const outcome of outcomes) if (!isFinalStatus(outcome.toStatus)) tx.readyPools.add(outcome.pool);
    const finalJobs = expired.rows.filter((_, index) => isFinalStatus(outcomes[index]!.toStatus))
      .map((row) => ({ jobId: row.job_id, releasesHeld: row.releases_held }));
    await releaseHeldOf(tx, finalJobs, nowMs);
    return outcomes;
  });
}
