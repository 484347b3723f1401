/**
 * The worker side of runs besides their transitions (those are run-lease.ts, run-heartbeat.ts,
 * run-complete.ts, run-expire.ts and run-replay.ts, as run-lifecycle.ts decides them): the
 * release of held runs when the run before them ends, the leases of nodes that are gone, and
 * the next lease expiry and ready time that sweepers and long-poll waiters arm for.
 *
 * Lock order, to stay clear of deadlocks with dispatch (which locks the job row, then
 * writes runs): a transaction of a run's transitions locks runs first, and locks a job row
 * only to release a `buffer_one` held run, after which it touches no run it had not locked
 * already except that held run, which dispatch never locks.
 *
 * A run's queue row (active_runs, schema version 3) is written only by a transaction that
 * holds the run's runs row: every writer locks (or updates) the runs row first. The lease
 * and the expiry skip runs rows others hold, so they never wait for a lock at all.
 */
import type { TeamScope } from '../store.js';
import { prepared, type Transaction } from './connection.js';
import { textArray } from './array-literals.js';
import { query, transaction, type StoreContext } from './context.js';
import { releaseHeldRuns } from './writes.js';

const lockJobsSql = prepared('SELECT 1 FROM jobs WHERE job_id = ANY($1::text[]) ORDER BY job_id FOR UPDATE');

/**
 * The column `releases_held` of a read of run `r` whose job's overlap is `overlap`: whether
 * ending the run may release a held run of its job. A `buffer_one` job's may (a dispatch may
 * be holding one now, hence the lock in `releaseHeldOf`); so may any job that has a held run
 * already: one held under `buffer_one` before a PATCH changed the overlap waited forever when
 * only the spec was read (the embedded store always looks for one).
 */
export function releasesHeldColumn(overlap: string): string {
  return `(${overlap} = 'buffer_one' OR EXISTS (SELECT 1 FROM active_runs h WHERE h.job_id = r.job_id AND h.held)) AS releases_held`;
}

/**
 * The negation of `releasesHeldColumn`, for a WHERE: a job that is not `buffer_one` (a NULL
 * overlap is not) and holds no run. The held run is looked for by a correlated scalar
 * subquery, which probes `active_runs_held` per row; a `NOT EXISTS` here was planned as a
 * hashed subplan that reads the whole queue.
 */
export function holdsNothingToRelease(overlap: string): string {
  return `${overlap} IS DISTINCT FROM 'buffer_one'
          AND (SELECT true FROM active_runs h WHERE h.job_id = r.job_id AND h.held LIMIT 1) IS NULL`;
}

/** Locks the jobs that may hold a run (serialising with dispatch, which may be holding a new run) and releases. */
export async function releaseHeldOf(tx: Transaction, jobs: readonly { jobId: string; releasesHeld: boolean }[], nowMs: number):
  Promise<void> {
  const jobIds = [...new Set(jobs.filter((job) => job.releasesHeld).map((job) => job.jobId))].sort();
  if (jobIds.length === 0) return;
  await tx.query(lockJobsSql, [textArray(jobIds)]);
  await releaseHeldRuns(tx, jobIds, nowMs);
}

/**
 * Held runs whose job has no other active run (`Store.releaseStrandedHeldRuns`): found through
 * the queue, then released as a completion releases them, under their jobs' locks (in job_id
 * order), by a statement that checks again what it found. The reconciler runs it every pass,
 * and held runs are few: they are read in job_id order down active_runs_held (schema version
 * 10), whose predicate `q.held` implies; it walked every queue row before (17-35 ms at 25,000
 * to 45,000, with fresh statistics too; 1.5-2.6 ms now; bench/probes/pg-stale-plan-cost.ts).
 */
export function releaseStrandedHeldRuns(context: StoreContext, nowMs: number, limit: number):
  Promise<{ runId: string; jobId: string }[]> {
  return transaction(context, 'releaseStrandedHeldRuns', async (tx) => {
    const stranded = await tx.query<{ job_id: string }>(
      `SELECT DISTINCT q.job_id FROM active_runs q
        WHERE q.held AND q.status = 'ready'
          AND NOT EXISTS (SELECT 1 FROM active_runs a WHERE a.job_id = q.job_id AND NOT a.held)
        ORDER BY q.job_id LIMIT $1`, [limit]);
    const jobIds = stranded.rows.map((row) => row.job_id);
    if (jobIds.length === 0) return [];
    await tx.query(lockJobsSql, [textArray(jobIds)]);
    return releaseHeldRuns(tx, jobIds, nowMs);
  });
}

/**
 * Cuts the leases granted by nodes that are not among `liveNodeIds` and never heartbeated
 * (`lease_node` still set) to a third of each lease plus `marginMs` from `nowMs`, or from the
 * run's ready time when it was leased ahead; a lease already ending sooner keeps its end.
 * Runs rows are locked before queue rows, as every writer of a running run does; a heartbeat
 * that lands between the scan and the lock is cut as well, which its worker's next heartbeat
 * (within a third of the lease) undoes. Answers how many leases were cut.
 */
export async function shortenLeasesOfGoneNodes(context: StoreContext, liveNodeIds: readonly string[], nowMs: number,
  marginMs: number): Promise<number> {
  const result = await query<{ count: string }>(context, 'shortenLeasesOfGoneNodes',
    `WITH orphaned AS (
       SELECT q.run_id, q.job_id FROM active_runs q
        WHERE q.status = 'running' AND q.lease_node IS NOT NULL AND q.lease_node <> ALL($1::text[])
     ), cut AS (
       UPDATE runs r SET lease_expires_at = GREATEST($2::bigint, r.lease_expires_at - r.lease_ms) + r.lease_ms / 3 + $3::bigint
         FROM orphaned o
        WHERE r.run_id = o.run_id AND r.status = 'running'
          AND r.lease_expires_at > GREATEST($2::bigint, r.lease_expires_at - r.lease_ms) + r.lease_ms / 3 + $3::bigint
       RETURNING r.run_id, r.job_id, r.lease_expires_at
     ), queued AS (
       UPDATE active_runs q SET due_at = cut.lease_expires_at, lease_node = NULL
         FROM cut WHERE q.job_id = cut.job_id AND q.run_id = cut.run_id
     )
     SELECT count(*) FROM cut`, [textArray([...liveNodeIds]), nowMs, marginMs]);
  return Number(result.rows[0]?.count ?? 0);
}

export async function nextLeaseExpiryMs(context: StoreContext): Promise<number | null> {
  const result = await query<{ at: number | null }>(context, 'nextLeaseExpiryMs',
    `SELECT min(due_at) AS at FROM active_runs WHERE status = 'running'`);
  return result.rows[0]?.at ?? null;
}

export async function nextReadyAtMs(context: StoreContext, team: TeamScope, pool: string): Promise<number | null> {
  // One index probe per lane rather than a scan of the pool's whole backlog.
  const result = await query<{ at: number | null }>(context, 'nextReadyAtMs',
    `SELECT min(first_ready) AS at FROM unnest(ARRAY['P0', 'P1', 'P2']) AS l(lane),
            LATERAL (SELECT q.due_at AS first_ready FROM active_runs q
                      WHERE q.pool = $1 AND q.lane = l.lane AND q.status IN ('ready', 'retry_wait') AND NOT q.held
                        AND ($2::text IS NULL OR q.team = $2)
                      ORDER BY q.due_at LIMIT 1) AS f`, [pool, team]);
  return result.rows[0]?.at ?? null;
}
