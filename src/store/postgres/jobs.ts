/**
 * Job reads and changes other than create: list and get (team-scoped: another team's job
 * reads as unknown), read-compute-write changes guarded by `version`, cancel (which deletes
 * the pending timer in the same transaction, invariant 7) and trigger. Each change locks the
 * job row first, so it serialises with a dispatch of the same job.
 *
 * A one-shot job whose run was written ahead of its fire time names that run on its row
 * (`ahead_run_id`, `Store.writeRunsAhead`) until the timer is consumed. A change before the
 * run comes due applies to it in the change's transaction: a cancel, a pause or a new time
 * takes it back (cancelled, with the reason in the ledger), a change that keeps the occurrence
 * (its pool, lane or tolerance) moves it. A run already due is a past occurrence, left alone.
 */
import type { JobRecord, JobSpec, Page, RunRecord } from '../../domain/types.js';
import { runIdOf } from '../../domain/identity.js';
import { TicklerError } from '../../errors.js';
import {
  jobCancelledBeforeDueReason, jobChangedBeforeDueReason,
  type JobChange, type JobChangeOutcome, type JobListFilter, type TeamScope,
} from '../store.js';
import { prepared, type Transaction } from './connection.js';
import { query, transaction, type StoreContext } from './context.js';
import { decodeCursor, encodeCursor } from '../cursor.js';
import {
  jobColumns, jobFromRow, jsonParam, runColumns, runFromRow, type JobRow, type RunRow,
} from './rows.js';
import {
  appendEvents, collectNearTimer, deleteTimers, deleteTimersParameters, deleteTimersSql, insertRuns, insertTimers, newTimerId,
} from './writes.js';

export async function getJob(context: StoreContext, team: TeamScope, jobId: string): Promise<JobRecord | null> {
  const result = await query<JobRow>(context, 'getJob',
    `SELECT ${jobColumns} FROM jobs WHERE job_id = $1 AND ($2::text IS NULL OR team = $2)`, [jobId, team]);
  const row = result.rows[0];
  return row === undefined ? null : jobFromRow(row);
}

export async function listJobs(context: StoreContext, filter: JobListFilter): Promise<Page<JobRecord>> {
  const conditions: string[] = [];
  const values: unknown[] = [];
  const bind = (value: unknown): string => {
    values.push(value);
    return `$${values.length}`;
  };
  if (filter.team !== null) conditions.push(`team = ${bind(filter.team)}`);
  if (filter.state !== undefined) conditions.push(`state = ${bind(filter.state)}`);
  if (filter.pool !== undefined) conditions.push(`pool = ${bind(filter.pool)}`);
  if (filter.key !== undefined) conditions.push(`key = ${bind(filter.key)}`);
  if (filter.keyPrefix !== undefined) conditions.push(`starts_with(key, ${bind(filter.keyPrefix)})`);
  if (filter.label !== undefined) {
    const separator = filter.label.indexOf('=');
    if (separator < 0) conditions.push(`(spec->'labels')::jsonb ? ${bind(filter.label)}`);
    else conditions.push(`spec->'labels'->>${bind(filter.label.slice(0, separator))} = ${bind(filter.label.slice(separator + 1))}`);
  }
  if (filter.cursor !== undefined) {
    const cursor = decodeCursor(filter.cursor);
    conditions.push(`(created_at, job_id) < (${bind(cursor.timeMs)}, ${bind(cursor.id)})`);
  }
  const where = conditions.length === 0 ? '' : `WHERE ${conditions.join(' AND ')}`;
  const result = await query<JobRow>(context, 'listJobs',
    `SELECT ${jobColumns} FROM jobs ${where} ORDER BY created_at DESC, job_id DESC LIMIT ${bind(filter.limit + 1)}`,
    values);
  const items = result.rows.slice(0, filter.limit).map(jobFromRow);
  const last = items[items.length - 1];
  const nextCursor = result.rows.length > filter.limit && last !== undefined
    ? encodeCursor(last.createdAtMs, last.jobId) : null;
  return { items, nextCursor };
}

async function lockJob(tx: Transaction, team: TeamScope, jobId: string):
  Promise<(JobRow & { ahead_run_id: string | null }) | undefined> {
  const result = await tx.query<JobRow & { ahead_run_id: string | null }>(
    `SELECT ${jobColumns}, ahead_run_id FROM jobs WHERE job_id = $1 AND ($2::text IS NULL OR team = $2) FOR UPDATE`,
    [jobId, team]);
  return result.rows[0];
}

/** A run written ahead of its fire time that is not due yet (`lockRunAhead`). */
interface RunAheadRow {
  run_id: string;
  scheduled_at: number;
  fire_at: number;
  pool: string;
  lane: string;
}

/**
 * The job's run written ahead, locked, while it is still waiting for its fire time; after the
 * job's row (the order every writer of a job and its runs takes). A lease cannot hold it: it
 * takes only runs already due.
 */
const lockRunAheadSql = prepared(
  `SELECT r.run_id, r.scheduled_at, r.fire_at, r.pool, r.lane
     FROM active_runs q JOIN runs r ON r.run_id = q.run_id AND r.status = 'ready'
    WHERE q.job_id = $1 AND q.run_id = $2 AND q.status = 'ready' AND q.due_at > $3
      FOR UPDATE OF r`);

async function lockRunAhead(tx: Transaction, jobId: string, aheadRunId: string | null, nowMs: number):
  Promise<RunAheadRow | undefined> {
  if (aheadRunId === null) return undefined;
  return (await tx.query<RunAheadRow>(lockRunAheadSql, [jobId, aheadRunId, nowMs])).rows[0];
}

/**
 * A job's run written ahead and not due yet is taken back with a cancel or change of the job:
 * it never came due. The runs row first, then its queue row, as every writer of a run does
 * (worker-runs.ts); the `old` CTE names the locked jobs (`old_job_id`, `old_state`,
 * `old_ahead_run_id`). Parameters: $3 now, $4 the reason for the ledger.
 */
const takeBackRunsAheadCtes = `taken AS (
     UPDATE runs r SET status = 'cancelled', finished_at = $3, held = false, ready_at = NULL
       FROM old JOIN active_runs q ON q.job_id = old.old_job_id AND q.run_id = old.old_ahead_run_id
      WHERE old.old_state <> 'cancelled' AND r.run_id = q.run_id AND r.status = 'ready'
        AND q.status = 'ready' AND q.due_at > $3
     RETURNING r.run_id, r.job_id
   ), dequeued AS (
     DELETE FROM active_runs q USING taken WHERE q.job_id = taken.job_id AND q.run_id = taken.run_id
   ), taken_events AS (
     INSERT INTO run_events (run_id, at_ms, type, from_status, to_status, detail)
     SELECT run_id, $3, 'cancelled', 'ready', 'cancelled', json_build_object('reason', $4::text) FROM taken
   )`;

/** `takeBackRunsAheadCtes` for one job whose run written ahead is locked (`lockRunAhead`). */
const takeBackRunAheadSql = prepared(
  `WITH old AS (SELECT $1::text AS old_job_id, $2::text AS old_ahead_run_id, 'active'::text AS old_state),
   ${takeBackRunsAheadCtes}
   SELECT count(*)::int AS count FROM taken`);

const moveRunAheadSql = prepared(
  `WITH moved AS (
     UPDATE runs SET fire_at = $2, ready_at = $2, pool = $3, lane = $4 WHERE run_id = $1 AND status = 'ready'
     RETURNING run_id, job_id
   )
   UPDATE active_runs q SET due_at = $2, pool = $3, lane = $4
     FROM moved WHERE q.job_id = moved.job_id AND q.run_id = moved.run_id`);

/**
 * A run written ahead follows its job to a new fire time, pool or lane (still the same
 * occurrence); the ledger says what changed, when anything did.
 */
async function moveRunAheadTo(tx: Transaction, runAhead: RunAheadRow, fireAtMs: number, spec: JobSpec,
  nowMs: number): Promise<void> {
  const { pool, lane } = spec;
  if (fireAtMs === runAhead.fire_at && pool === runAhead.pool && lane === runAhead.lane) return;
  await tx.query(moveRunAheadSql, [runAhead.run_id, fireAtMs, pool, lane]);
  await appendEvents(tx, [{
    runId: runAhead.run_id, atMs: nowMs, type: 'changed', fromStatus: 'ready', toStatus: 'ready',
    detail: { reason: jobChangedBeforeDueReason, fire_at: fireAtMs, pool, lane },
  }]);
}

async function deletePendingTimer(tx: Transaction, row: JobRow): Promise<void> {
  if (row.timer_id !== null && row.next_fire_at !== null) {
    await deleteTimers(tx, [{ timerId: row.timer_id, fireAtMs: row.next_fire_at }]);
  }
}

export function changeJob(context: StoreContext, change: JobChange): Promise<JobChangeOutcome> {
  return transaction(context, 'changeJob', async (tx) => {
    const row = await lockJob(tx, change.team, change.jobId);
    if (row === undefined) return { kind: 'not_found' };
    if (row.version !== change.expectedVersion) return { kind: 'version_conflict', job: jobFromRow(row) };
    const spec = change.spec ?? row.spec;
    const state = change.state ?? row.state;
    const version = row.version + 1;
    let timerId = row.timer_id;
    let aheadRunId = row.ahead_run_id;
    let nextFireAtMs = row.next_fire_at;
    let nextScheduledAtMs = row.next_scheduled_at;
    const runAhead = await lockRunAhead(tx, row.job_id, row.ahead_run_id, change.nowMs);
    if (change.timer === 'keep') {
      if (runAhead !== undefined) await moveRunAheadTo(tx, runAhead, runAhead.fire_at, spec, change.nowMs);
    } else {
      await deletePendingTimer(tx, row);
      timerId = null;
      aheadRunId = null;
      nextFireAtMs = null;
      nextScheduledAtMs = null;
      // The same occurrence at a new time keeps its run, moved; any other change takes it back.
      const newTimer = change.timer;
      const sameOccurrence = runAhead !== undefined && newTimer !== null && newTimer.scheduledAtMs === runAhead.scheduled_at;
      if (sameOccurrence) {
        await moveRunAheadTo(tx, runAhead, newTimer.fireAtMs, spec, change.nowMs);
        aheadRunId = runAhead.run_id;
      } else if (runAhead !== undefined) {
        await tx.query(takeBackRunAheadSql, [row.job_id, runAhead.run_id, change.nowMs, jobChangedBeforeDueReason]);
      }
      if (newTimer !== null) {
        const timer = { timerId: newTimerId(), jobId: row.job_id, shard: row.shard, ...newTimer };
        await insertTimers(tx, [timer]);
        collectNearTimer(tx, timer, { version, spec, team: row.team }, change.nowMs, context.nearHorizonMs, sameOccurrence);
        ({ timerId, fireAtMs: nextFireAtMs, scheduledAtMs: nextScheduledAtMs } = timer);
      }
    }
    let updated;
    try {
      updated = await tx.query<JobRow>(
        `UPDATE jobs SET spec = $2::json, key = $3, pool = $4, request_hash = $5, state = $6, version = $7,
                         timer_id = $8, next_fire_at = $9, next_scheduled_at = $10, updated_at = $11, max_silence_s = $12,
                         ahead_run_id = $13
          WHERE job_id = $1 RETURNING ${jobColumns}`,
        [row.job_id, jsonParam(spec), spec.key, spec.pool, change.requestHash ?? row.request_hash, state, version,
          timerId, nextFireAtMs, nextScheduledAtMs, change.nowMs, spec.max_silence_s, aheadRunId]);
    } catch (error) {
      if ((error as { code?: unknown }).code === '23505') {
        throw new TicklerError('key_conflict', 'another job of this team already has this key', { field: 'key', cause: error });
      }
      throw error;
    }
    return { kind: 'changed', job: jobFromRow(updated.rows[0]!) };
  });
}

/**
 * The runs written ahead that a cancel's `old` CTE names and its `taken` CTE did not take back.
 * A statement that waited for a job's lock reads the job as it is after the lock (READ
 * COMMITTED re-reads a locked row) but every other table as of the statement's start: a run a
 * dispatch wrote ahead while the cancel waited on that dispatch's lock of the job is named, yet
 * not there to take back (bench:peers W5 once saw 64 jobs cancelled before their due time
 * fire). Also a run already due or leased, which stays.
 */
const unseenRunsAheadCte = `unseen AS MATERIALIZED (
     SELECT o.old_job_id, o.old_ahead_run_id FROM old o
      WHERE o.old_ahead_run_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM taken WHERE taken.run_id = o.old_ahead_run_id)
   )`;

/**
 * Takes back, in a statement of their own (its snapshot taken after the cancel committed), the
 * runs written ahead a cancel's statement named but could not see (`unseenRunsAheadCte`). The job
 * is cancelled by then, so nothing writes or finishes it any more; a worker leasing ahead that
 * took the run between the two statements keeps it, as one whose lease came before the cancel.
 */
async function takeBackUnseenRunsAhead(context: StoreContext, unseen: readonly { jobId: string; runId: string }[],
  nowMs: number): Promise<void> {
  for (const { jobId, runId } of unseen) {
    await query(context, 'takeBackRunAhead', takeBackRunAheadSql, [jobId, runId, nowMs, jobCancelledBeforeDueReason]);
  }
}

/**
 * The pending timers a cancel's `old` CTE names and its `removed` CTE did not delete: the same
 * trap as `unseenRunsAheadCte`. A dispatch that fired a recurring job while the cancel waited
 * on its lock consumed the timer the cancel's snapshot saw and wrote the next one, which the
 * job names after the lock but the cancel's DELETE cannot see: the timer outlived its
 * cancelled job (found by a test racing the two, after the run ahead's fix). A repair or a
 * change that wrote a new timer meanwhile leaves one the same way.
 *
 * Both are MATERIALIZED: read once, each would be inlined where it is joined, and the planner,
 * guessing one row for every CTE, joined them by nested loops that scanned `old` and `removed`
 * again for each cancelled job (64 x 64 x 64 comparisons for a batch of 64: 15-30 ms a
 * statement, and bench:peers W5 on PostgreSQL fell from 4,100 to 2,300 cancels/s).
 */
const unseenTimersCte = `unseen_timers AS MATERIALIZED (
     SELECT o.old_job_id, o.old_timer_id, o.old_fire_at FROM old o
      WHERE o.old_state <> 'cancelled' AND o.old_timer_id IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM removed WHERE removed.timer_id = o.old_timer_id)
   )`;

/**
 * Deletes, in a statement of its own (its snapshot taken after the cancel committed), the
 * timers a cancel's statement named but could not see (`unseenTimersCte`). The jobs no longer
 * name them, so nothing else deletes them; nothing fires them either (a dispatch finds the
 * timer gone from its job), but every wheel would load them and their day's partition would
 * never be dropped.
 */
async function deleteUnseenTimers(context: StoreContext, unseen: readonly { timerId: string; fireAtMs: number }[]):
  Promise<void> {
  if (unseen.length === 0) return;
  await query(context, 'deleteTimers', deleteTimersSql, deleteTimersParameters(unseen));
}

/**
 * One statement, as `cancelJobsByKeyPrefix`: the jobs are locked (in job_id order, as every
 * statement locking several jobs does: dispatch, leases; so none of them can deadlock),
 * cancelled and their pending timers deleted together, with a run written ahead and not due
 * yet; an already cancelled job is answered as it is, from the row its lock read
 * (`old_cancelled_job`): read from jobs, it was the row as of the statement's start, still
 * active when this cancel had waited for another cancel's lock. A single cancel is this with
 * one id. It was a transaction of five round trips (BEGIN, lock, delete, update, COMMIT): one
 * at a time from 64 callers, 1,510 cancels/s (bench:peers W5).
 *
 * The team is matched with `IS NOT DISTINCT FROM` (the same, as `team` is never null), which no
 * index serves: with `team = $2` the plan, made for the parameters' values, could walk the
 * team's listing index (`jobs_team_created`) and filter it by id, and right after a bulk
 * create, with the table's statistics not yet caught up (a team estimated at 18 rows holding
 * 50,000), it did (auto_explain): a cancel of 64 ids read the team's every job.
 */
const cancelJobsSql = `WITH old AS (
     SELECT job_id AS old_job_id, state AS old_state, timer_id AS old_timer_id, next_fire_at AS old_fire_at,
            ahead_run_id AS old_ahead_run_id, CASE WHEN state = 'cancelled' THEN jobs END AS old_cancelled_job
       FROM jobs WHERE job_id = ANY($1::text[]) AND ($2::text IS NULL OR team IS NOT DISTINCT FROM $2) ORDER BY job_id FOR UPDATE
   ), cancelled AS (
     UPDATE jobs SET state = 'cancelled', timer_id = NULL, next_fire_at = NULL, next_scheduled_at = NULL,
                     ahead_run_id = NULL, version = version + 1, updated_at = $3
       FROM old WHERE job_id = old.old_job_id AND old.old_state <> 'cancelled'
     RETURNING ${jobColumns}
   ), removed AS (
     DELETE FROM timers t USING old
      WHERE old.old_state <> 'cancelled' AND t.fire_at = old.old_fire_at AND t.timer_id = old.old_timer_id
     RETURNING t.timer_id
   ), ${takeBackRunsAheadCtes}, ${unseenRunsAheadCte}, ${unseenTimersCte}
   SELECT ${jobColumns}, (SELECT old_ahead_run_id FROM unseen WHERE old_job_id = cancelled.job_id) AS unseen_ahead_run_id,
          u.old_timer_id AS unseen_timer_id, u.old_fire_at AS unseen_fire_at
     FROM cancelled LEFT JOIN unseen_timers u ON u.old_job_id = cancelled.job_id
   UNION ALL
   SELECT ${jobColumns}, NULL, NULL, NULL FROM (SELECT (old_cancelled_job).* FROM old WHERE old_state = 'cancelled') AS j`;

export async function cancelJob(context: StoreContext, team: TeamScope, jobId: string, nowMs: number):
  Promise<JobRecord | null> {
  const [job] = await cancelJobs(context, team, [jobId], nowMs);
  return job ?? null;
}

export async function cancelJobs(context: StoreContext, team: TeamScope, jobIds: readonly string[], nowMs: number):
  Promise<(JobRecord | null)[]> {
  if (jobIds.length === 0) return [];
  const result = await query<JobRow & {
    unseen_ahead_run_id: string | null; unseen_timer_id: string | null; unseen_fire_at: number | null;
  }>(context, 'cancelJobs', cancelJobsSql, [[...new Set(jobIds)], team, nowMs, jobCancelledBeforeDueReason]);
  const byId = new Map<string, JobRecord>();
  const unseen: { jobId: string; runId: string }[] = [];
  const unseenTimers: { timerId: string; fireAtMs: number }[] = [];
  for (const row of result.rows) {
    const job = jobFromRow(row);
    byId.set(job.jobId, job);
    if (row.unseen_ahead_run_id !== null) unseen.push({ jobId: job.jobId, runId: row.unseen_ahead_run_id });
    if (row.unseen_timer_id !== null && row.unseen_fire_at !== null) {
      unseenTimers.push({ timerId: row.unseen_timer_id, fireAtMs: row.unseen_fire_at });
    }
  }
  await takeBackUnseenRunsAhead(context, unseen, nowMs);
  await deleteUnseenTimers(context, unseenTimers);
  return jobIds.map((jobId) => byId.get(jobId) ?? null);
}

/**
 * One statement: the jobs are locked, cancelled and their timers deleted together.
 *
 * The jobs are locked in job_id order, as every statement locking several jobs does: locked in
 * the order its scan met them (key order, or the team's listing index, newest first), the
 * cancel held one job while a dispatch or a cancel by ids of the same jobs held another, each
 * waiting for the other until PostgreSQL failed one (40P01,
 * test/store/postgres-prefix-cancel-lock-order.test.ts).
 *
 * `starts_with` with the prefix known while planning (this statement is not prepared) is read
 * as a range of jobs_team_key, `key >= prefix AND key < ` the next string, since keys compare
 * as "C" (schema version 9); under the database's collation (C.UTF-8 is not "C" to PostgreSQL
 * 15) it was no index condition, and with statistics behind a bulk create the plan read every
 * job of the team (42-56 ms at 60,000-100,000 jobs, 9-17 ms with fresh statistics; 1.4-6 ms
 * now; bench/probes/pg-stale-plan-cost.ts).
 */
export async function cancelJobsByKeyPrefix(context: StoreContext, team: string, prefix: string,
  nowMs: number): Promise<number> {
  const result = await query<{
    count: number; unseen: { job_id: string; run_id: string }[]; unseen_timers: { timer_id: string; fire_at: number }[];
  }>(context, 'cancelJobsByKeyPrefix',
    `WITH old AS (
       SELECT job_id AS old_job_id, state AS old_state, timer_id AS old_timer_id, next_fire_at AS old_fire_at,
              ahead_run_id AS old_ahead_run_id
         FROM jobs
        WHERE team = $1 AND key IS NOT NULL AND starts_with(key, $2) AND state <> 'cancelled'
        ORDER BY job_id FOR UPDATE
     ), cancelled AS (
       UPDATE jobs j SET state = 'cancelled', timer_id = NULL, next_fire_at = NULL, next_scheduled_at = NULL,
                         ahead_run_id = NULL, version = j.version + 1, updated_at = $3
         FROM old WHERE j.job_id = old.old_job_id
     ), removed AS (
       DELETE FROM timers t USING old WHERE t.fire_at = old.old_fire_at AND t.timer_id = old.old_timer_id
       RETURNING t.timer_id
     ), ${takeBackRunsAheadCtes}, ${unseenRunsAheadCte}, ${unseenTimersCte}
     SELECT (SELECT count(*)::int FROM old) AS count,
            (SELECT coalesce(json_agg(json_build_object('job_id', old_job_id, 'run_id', old_ahead_run_id)), '[]') FROM unseen)
              AS unseen,
            (SELECT coalesce(json_agg(json_build_object('timer_id', old_timer_id, 'fire_at', old_fire_at)), '[]') FROM unseen_timers)
              AS unseen_timers`, [team, prefix, nowMs, jobCancelledBeforeDueReason]);
  const row = result.rows[0];
  await takeBackUnseenRunsAhead(context, (row?.unseen ?? []).map((item) => ({ jobId: item.job_id, runId: item.run_id })), nowMs);
  await deleteUnseenTimers(context, (row?.unseen_timers ?? []).map((item) => ({ timerId: item.timer_id, fireAtMs: item.fire_at })));
  return row?.count ?? 0;
}

/**
 * A run ready now, outside the schedule; a repeat at the same instant answers the same run.
 * A cancelled job is not triggered (invariant 7): it answers null, as an unknown job does.
 */
export function triggerJob(context: StoreContext, team: TeamScope, jobId: string, nowMs: number): Promise<RunRecord | null> {
  return transaction(context, 'triggerJob', async (tx) => {
    const row = await lockJob(tx, team, jobId);
    if (row === undefined || row.state === 'cancelled') return null;
    const runId = runIdOf(row.job_id, nowMs);
    const inserted = await insertRuns(tx, [{
      runId, jobId: row.job_id, team: row.team, pool: row.spec.pool, lane: row.spec.lane, scheduledAtMs: nowMs,
      fireAtMs: nowMs, dispatchedAtMs: nowMs, status: 'ready', lastError: null, readyAtMs: nowMs, finishedAtMs: null,
      held: false,
    }]);
    if (inserted.has(runId)) {
      await appendEvents(tx, [{ runId, atMs: nowMs, type: 'triggered', fromStatus: null, toStatus: 'ready' }]);
      tx.readyPools.add(row.spec.pool);
    }
    const run = await tx.query<RunRow>(`SELECT ${runColumns} FROM runs r WHERE r.run_id = $1`, [runId]);
    return runFromRow(run.rows[0]!);
  });
}
