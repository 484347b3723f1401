/**
 * Timer reads for the loader and the reconciler. `loadTimers` is a keyset-paged range scan
 * on `(fire_at, timer_id)` with the node's shards bound as one array parameter (1,024 shards
 * are one parameter, not 1,024). The reconciler's "active recurring job without a pending
 * timer" is a partial index of the jobs table, empty when all is well.
 */
import type { JobRecord } from '../../domain/types.js';
import type { LoadTimersQuery, LoadedTimer, AnnouncedSilence, SilentJob, SilentJobsCursor, TimerWrite } from '../store.js';
import { numberArray, textArray } from './array-literals.js';
import type { Transaction } from './connection.js';
import { query, transaction, type StoreContext } from './context.js';
import { jobColumns, jobFromRow, loadedTimerColumns, loadedTimerFromRow, type JobRow, type LoadedTimerRow } from './rows.js';
import type { TimerRef } from './notifier.js';
import { collectNearTimer, insertTimers, newTimerId } from './writes.js';

export async function loadTimers(context: StoreContext, request: LoadTimersQuery): Promise<LoadedTimer[]> {
  if (request.shards.length === 0 || request.limit <= 0) return [];
  const after = request.after ?? { fireAtMs: Number.MIN_SAFE_INTEGER, timerId: '' };
  // The page of timers is cut first and joined to its jobs after: written as one join, the
  // planner turned later pages (past the first keyset) into a hash join over every job with
  // a sort spilling to disk, 184-254 ms a page on 80,000 jobs against 28 ms this way.
  const result = await query<LoadedTimerRow>(context, 'loadTimers',
    `WITH t AS MATERIALIZED (
       SELECT timer_id, job_id, shard, fire_at, scheduled_at FROM timers
        WHERE fire_at < $2 AND (fire_at, timer_id) > ($3, $4) AND shard = ANY($1::int[])
        ORDER BY fire_at, timer_id LIMIT $5
     )
     SELECT ${loadedTimerColumns} FROM t JOIN jobs j ON j.job_id = t.job_id
      ORDER BY t.fire_at, t.timer_id`,
    [numberArray(request.shards), request.untilMs, after.fireAtMs, after.timerId, request.limit]);
  return result.rows.map(loadedTimerFromRow);
}

/** Timers named by another process's near-timer notification; those gone since are left out. */
export async function loadTimersByRef(context: StoreContext, refs: readonly TimerRef[]): Promise<LoadedTimer[]> {
  if (refs.length === 0) return [];
  const result = await query<LoadedTimerRow>(context, 'loadTimersByRef',
    `SELECT ${loadedTimerColumns}
       FROM unnest($1::bigint[], $2::text[]) AS r(fire_at, timer_id)
       JOIN timers t ON t.fire_at = r.fire_at AND t.timer_id = r.timer_id
       JOIN jobs j ON j.job_id = t.job_id
      ORDER BY t.fire_at, t.timer_id`,
    [numberArray(refs.map((ref) => ref.fireAtMs)), textArray(refs.map((ref) => ref.timerId))]);
  return result.rows.map(loadedTimerFromRow);
}

/** `needs_timer` is state = 'active' AND timer_id IS NULL (schema version 4), as jobs_without_timer is keyed. */
const withoutTimerCondition = `needs_timer AND spec->'schedule'->>'cron' IS NOT NULL`;

export async function findJobsWithoutTimer(context: StoreContext, limit: number): Promise<JobRecord[]> {
  const result = await query<JobRow>(context, 'findJobsWithoutTimer',
    `SELECT ${jobColumns} FROM jobs WHERE ${withoutTimerCondition} ORDER BY job_id LIMIT $1`, [limit]);
  return result.rows.map(jobFromRow);
}

export async function countJobsWithoutTimer(context: StoreContext): Promise<number> {
  const result = await query<{ count: number }>(context, 'countJobsWithoutTimer',
    `SELECT count(*)::int AS count FROM jobs WHERE ${withoutTimerCondition}`);
  return result.rows[0]?.count ?? 0;
}

export function repairJobTimer(context: StoreContext, jobId: string, expectedVersion: number, timer: TimerWrite,
  nowMs: number): Promise<boolean> {
  return transaction(context, 'repairJobTimer', async (tx) => {
    const written = { timerId: newTimerId(), jobId, shard: 0, ...timer };
    const updated = await tx.query<JobRow>(
      `UPDATE jobs SET timer_id = $3, next_fire_at = $4, next_scheduled_at = $5
        WHERE job_id = $1 AND version = $2 AND state = 'active' AND timer_id IS NULL
        RETURNING ${jobColumns}`,
      [jobId, expectedVersion, written.timerId, timer.fireAtMs, timer.scheduledAtMs]);
    const row = updated.rows[0];
    if (row === undefined) return false;
    written.shard = row.shard;
    await insertTimers(tx, [written]);
    collectNearTimer(tx, written, row, nowMs, context.nearHorizonMs);
    return true;
  });
}

/**
 * The silent-jobs read takes jobs_watched and runs_job whatever the statistics say. Until jobs
 * is analyzed with its watched jobs in it (a schema analyzed empty, or a bulk create since),
 * the planner takes `max_silence_s IS NOT NULL` for 99.5 % of jobs: the reconciler's pass
 * scanned every job (100,900 read for 100 watched) and, costed that high, was JIT-compiled
 * (407 of its 500 ms; 1.6 ms once analyzed; JIT is now off on every store connection,
 * connection.ts). Hence no sequential (`beginSql`) or bitmap scan, and the team matched with `IS NOT DISTINCT FROM`, which no index serves (with
 * `team =` the plan ANDed the team's listing index, 100,000 entries, with jobs_watched).
 */
const silentJobsPlanSql = 'SET LOCAL enable_bitmapscan = off';

/**
 * Active jobs with `max_silence_s` silent at `nowMs` (store.ts `SilentJob`): the watched jobs
 * through jobs_watched (schema v6), and for each its latest success read from runs_job
 * (job_id, scheduled_at DESC) newest first.
 */
export function findSilentJobs(context: StoreContext, team: string | null, nowMs: number, limit: number,
  after: SilentJobsCursor | undefined): Promise<SilentJob[]> {
  return transaction(context, 'findSilentJobs', (tx) => findSilentJobsWithin(tx, team, nowMs, limit, after));
}

async function findSilentJobsWithin(tx: Transaction, team: string | null, nowMs: number, limit: number,
  after: SilentJobsCursor | undefined): Promise<SilentJob[]> {
  await tx.query(silentJobsPlanSql);
  const silentSince = `greatest(coalesce(s.last_success_at, j.updated_at), j.updated_at) + j.max_silence_s::bigint * 1000`;
  const result = await tx.query<JobRow & { last_success_at: string | number | null; silent_since: string | number }>(
    `SELECT ${jobColumns.split(',').map((column) => `j.${column.trim()}`).join(', ')},
            s.last_success_at, ${silentSince} AS silent_since
       FROM jobs j
       LEFT JOIN LATERAL (
         SELECT r.finished_at AS last_success_at FROM runs r
          WHERE r.job_id = j.job_id AND r.status = 'succeeded'
          ORDER BY r.scheduled_at DESC, r.run_id DESC LIMIT 1) s ON true
      WHERE j.max_silence_s IS NOT NULL AND j.state = 'active' AND ($1::text IS NULL OR j.team IS NOT DISTINCT FROM $1)
        AND ${silentSince} <= $2
        AND ($4::bigint IS NULL OR (${silentSince}, j.job_id) > ($4::bigint, $5::text))
      ORDER BY silent_since, j.job_id LIMIT $3`,
    [team, nowMs, limit, after?.silentSinceMs ?? null, after?.jobId ?? '']);
  return result.rows.map((row) => ({
    job: jobFromRow(row),
    lastSuccessAtMs: row.last_success_at === null ? null : Number(row.last_success_at),
    silentSinceMs: Number(row.silent_since),
  }));
}

export async function listSilenceAnnounced(context: StoreContext, limit: number): Promise<AnnouncedSilence[]> {
  const result = await query<JobRow & { silence_announced_since: string }>(context, 'listSilenceAnnounced',
    `SELECT ${jobColumns}, silence_announced_since FROM jobs WHERE silence_announced_since IS NOT NULL
      ORDER BY job_id LIMIT $1`, [limit]);
  return result.rows.map((row) => ({ job: jobFromRow(row), silentSinceMs: Number(row.silence_announced_since) }));
}

export async function setSilenceAnnounced(context: StoreContext, jobId: string, silentSinceMs: number | null): Promise<void> {
  await query(context, 'setSilenceAnnounced', 'UPDATE jobs SET silence_announced_since = $2 WHERE job_id = $1',
    [jobId, silentSinceMs]);
}
