/**
 * Batched writes shared by several transactions: timers, runs, run events and the release
 * of a `buffer_one` held run. Each is one statement over `unnest` arrays however many rows
 * it writes (STYLE.md §6: batch first), always inside a caller's transaction.
 */
import { randomUUID } from 'node:crypto';
import type { JobSpec, Lane, RunStatus } from '../../domain/types.js';
import { bucketOf } from '../../domain/identity.js';
import type { LoadedTimer } from '../store.js';
import { prepared, type CommitEffects, type Transaction } from './connection.js';
import { booleanArray, numberArray, textArray } from './array-literals.js';
import { jsonParam } from './rows.js';

export interface NewTimer {
  timerId: string;
  jobId: string;
  shard: number;
  fireAtMs: number;
  scheduledAtMs: number;
}

export function newTimerId(): string {
  return randomUUID();
}

export const insertTimersSql = prepared(
  `INSERT INTO timers (timer_id, job_id, shard, bucket, fire_at, scheduled_at)
   SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[])`);

export async function insertTimers(transaction: Transaction, timers: readonly NewTimer[]): Promise<void> {
  if (timers.length === 0) return;
  await transaction.query(insertTimersSql, timerParameters(timers));
}

/** `insertTimersSql`'s parameters. */
export function timerParameters(timers: readonly NewTimer[]): string[] {
  return [
    textArray(timers.map((timer) => timer.timerId)),
    textArray(timers.map((timer) => timer.jobId)),
    numberArray(timers.map((timer) => timer.shard)),
    numberArray(timers.map((timer) => bucketOf(timer.fireAtMs))),
    numberArray(timers.map((timer) => timer.fireAtMs)),
    numberArray(timers.map((timer) => timer.scheduledAtMs)),
  ];
}

/**
 * Deletes timers by (fire_at, timer_id), the key that prunes to one partition. Not a
 * prepared statement: PostgreSQL's generic plan for it is a hash join over a sequential
 * scan of every partition (EXPLAIN with plan_cache_mode = force_generic_plan), and with it
 * a 50-timer dispatch cost three times the database CPU.
 */
export const deleteTimersSql = `DELETE FROM timers t USING unnest($1::bigint[], $2::text[]) AS d(fire_at, timer_id)
      WHERE t.fire_at = d.fire_at AND t.timer_id = d.timer_id`;

/** `deleteTimersSql`'s parameters. */
export function deleteTimersParameters(timers: readonly { timerId: string; fireAtMs: number }[]): unknown[] {
  return [numberArray(timers.map((timer) => timer.fireAtMs)), textArray(timers.map((timer) => timer.timerId))];
}

export async function deleteTimers(transaction: Transaction,
  timers: readonly { timerId: string; fireAtMs: number }[]): Promise<void> {
  if (timers.length === 0) return;
  await transaction.query(deleteTimersSql, deleteTimersParameters(timers));
}

/** Collects a written timer for onNearTimers when it falls inside the near horizon. */
export function collectNearTimer(effects: CommitEffects, timer: NewTimer, job: { version: number; spec: JobSpec; team: string },
  nowMs: number, nearHorizonMs: number, dispatchedAhead = false): void {
  if (timer.fireAtMs >= nowMs + nearHorizonMs) return;
  const loaded: LoadedTimer = {
    ...timer, jobVersion: job.version, spec: job.spec, team: job.team, ...(dispatchedAhead ? { dispatchedAhead } : {}),
  };
  effects.nearTimers.push(loaded);
}

export interface NewRun {
  runId: string;
  jobId: string;
  team: string;
  pool: string;
  lane: Lane;
  scheduledAtMs: number;
  fireAtMs: number;
  dispatchedAtMs: number;
  status: RunStatus;
  lastError: string | null;
  readyAtMs: number | null;
  finishedAtMs: number | null;
  held: boolean;
}

/** The statuses a run has while it has a row in active_runs (schema version 3). */
const activeStatusesSql = `('ready', 'running', 'retry_wait')`;

/**
 * The runs insert and the queue entries of its active runs, as two CTEs (`runs_inserted`,
 * `runs_queued`) over parameters $1–$13 (`runParameters`), for a statement to stand in.
 */
export const insertRunsCtes = `runs_inserted AS (
     INSERT INTO runs (run_id, job_id, team, pool, lane, scheduled_at, fire_at, dispatched_at, status, last_error,
                       ready_at, finished_at, held)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[],
                          $8::bigint[], $9::text[], $10::text[], $11::bigint[], $12::bigint[], $13::bool[])
     ON CONFLICT (run_id) DO NOTHING
     RETURNING run_id, job_id, team, pool, lane, status, held, ready_at
   ), runs_queued AS (
     INSERT INTO active_runs (run_id, job_id, team, pool, lane, status, held, due_at)
     SELECT run_id, job_id, team, pool, lane, status, held, ready_at FROM runs_inserted
      WHERE status IN ${activeStatusesSql}
   )`;

const insertRunsSql = prepared(`WITH ${insertRunsCtes} SELECT run_id FROM runs_inserted`);

/**
 * Inserts runs, leaving existing run ids alone (invariant 1), and queues the active ones in
 * active_runs in the same statement; answers the ids inserted.
 */
export async function insertRuns(transaction: Transaction, runs: readonly NewRun[]): Promise<Set<string>> {
  if (runs.length === 0) return new Set();
  const result = await transaction.query<{ run_id: string }>(insertRunsSql, runParameters(runs));
  return new Set(result.rows.map((row) => row.run_id));
}

/** `insertRunsCtes`' parameters. */
export function runParameters(runs: readonly NewRun[]): string[] {
  return [
    textArray(runs.map((run) => run.runId)),
    textArray(runs.map((run) => run.jobId)),
    textArray(runs.map((run) => run.team)),
    textArray(runs.map((run) => run.pool)),
    textArray(runs.map((run) => run.lane)),
    numberArray(runs.map((run) => run.scheduledAtMs)),
    numberArray(runs.map((run) => run.fireAtMs)),
    numberArray(runs.map((run) => run.dispatchedAtMs)),
    textArray(runs.map((run) => run.status)),
    textArray(runs.map((run) => run.lastError)),
    numberArray(runs.map((run) => run.readyAtMs)),
    numberArray(runs.map((run) => run.finishedAtMs)),
    booleanArray(runs.map((run) => run.held)),
  ];
}

export interface NewRunEvent {
  runId: string;
  atMs: number;
  type: string;
  fromStatus: RunStatus | null;
  toStatus: RunStatus | null;
  detail?: Record<string, unknown> | null;
}

/** What the dispatch of an occurrence decided for its run. */
export interface OccurrenceDecision {
  /** `ready`, or a final status (skipped as planned or by the overlap policy). */
  status: RunStatus;
  /** A final status's reason. */
  lastError: string | null;
  held: boolean;
  /** When a ready run becomes leasable: now, or its fire time for one written ahead. */
  readyAtMs: number;
  /** The `dispatched` event's detail, for a ready run. */
  dispatchedDetail: Record<string, unknown> | null;
}

/**
 * The run of a dispatched occurrence and its first event, `dispatched` (ready) or `skipped`
 * (final now, with its reason), as the dispatcher and a create dispatching its due job both
 * write them.
 */
export function occurrenceRun(job: { jobId: string; team: string; spec: Pick<JobSpec, 'pool' | 'lane'> },
  occurrence: { scheduledAtMs: number; fireAtMs: number }, runId: string, nowMs: number, decision: OccurrenceDecision):
  { run: NewRun; event: NewRunEvent } {
  const final = decision.status !== 'ready';
  return {
    run: {
      runId, jobId: job.jobId, team: job.team, pool: job.spec.pool, lane: job.spec.lane,
      scheduledAtMs: occurrence.scheduledAtMs, fireAtMs: occurrence.fireAtMs, dispatchedAtMs: nowMs,
      status: decision.status, lastError: decision.lastError, readyAtMs: final ? null : decision.readyAtMs,
      finishedAtMs: final ? nowMs : null, held: decision.held,
    },
    event: {
      runId, atMs: nowMs, type: final ? 'skipped' : 'dispatched', fromStatus: null, toStatus: decision.status,
      detail: final ? (decision.lastError !== null ? { reason: decision.lastError } : null) : decision.dispatchedDetail,
    },
  };
}

export const appendEventsSql = prepared(
  `INSERT INTO run_events (run_id, at_ms, type, from_status, to_status, detail)
   SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::json[])`);

/** Appends run events in array order (invariant 6). */
export async function appendEvents(transaction: Transaction, events: readonly NewRunEvent[]): Promise<void> {
  if (events.length === 0) return;
  await transaction.query(appendEventsSql, eventParameters(events));
}

/** `appendEventsSql`'s parameters. */
export function eventParameters(events: readonly NewRunEvent[]): string[] {
  return [
    textArray(events.map((event) => event.runId)),
    numberArray(events.map((event) => event.atMs)),
    textArray(events.map((event) => event.type)),
    textArray(events.map((event) => event.fromStatus)),
    textArray(events.map((event) => event.toStatus)),
    textArray(events.map((event) => (event.detail === undefined || event.detail === null ? null : jsonParam(event.detail)))),
  ];
}

/**
 * The held runs are found through the queue (read, not locked: the caller holds the jobs'
 * rows, as dispatch does when it holds a run), then written runs row first, as every writer
 * of a run does (worker-runs.ts).
 */
const releaseHeldRunsSql = prepared(
  `WITH releasable AS (
     SELECT DISTINCT ON (q.job_id) q.run_id FROM active_runs q JOIN runs h ON h.run_id = q.run_id
      WHERE q.job_id = ANY($1::text[]) AND q.held AND q.status = 'ready'
        AND NOT EXISTS (SELECT 1 FROM active_runs a WHERE a.job_id = q.job_id AND NOT a.held)
      ORDER BY q.job_id, h.scheduled_at
   ), released AS (
     UPDATE runs r SET held = false, ready_at = $2 FROM releasable
      WHERE r.run_id = releasable.run_id AND r.held AND r.status = 'ready'
     RETURNING r.run_id, r.job_id, r.pool
   ), queued AS (
     UPDATE active_runs q SET held = false, due_at = $2
       FROM released WHERE q.job_id = released.job_id AND q.run_id = released.run_id
   )
   SELECT run_id, job_id, pool FROM released`);

/**
 * A held occurrence (`buffer_one`, or queued under `forbid`) waits until no unheld active run
 * of its job is left; this releases the earliest held one of each job (leasable from `nowMs`)
 * once the run before it reached a final status. Answers the runs released.
 */
export async function releaseHeldRuns(transaction: Transaction, jobIds: readonly string[], nowMs: number):
  Promise<{ runId: string; jobId: string }[]> {
  if (jobIds.length === 0) return [];
  const released = await transaction.query<{ run_id: string; job_id: string; pool: string }>(releaseHeldRunsSql,
    [textArray([...new Set(jobIds)]), nowMs]);
  await appendEvents(transaction, released.rows.map((row) => ({
    runId: row.run_id, atMs: nowMs, type: 'released', fromStatus: 'ready', toStatus: 'ready',
  })));
  for (const row of released.rows) transaction.readyPools.add(row.pool);
  return released.rows.map((row) => ({ runId: row.run_id, jobId: row.job_id }));
}
