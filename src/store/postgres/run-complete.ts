/**
 * Completing attempts (DESIGN.md flow 7): success ends the run; a failure waits for a
 * retry with backoff while attempts are left, otherwise the run is dead (the DLQ).
 *
 * Completions are the busiest write of a loaded cluster, and each commit costs an fsync, so
 * concurrent `completeRun` calls share one transaction (group commit, as creates do): the
 * runs are locked FOR UPDATE in run_id order (so two batches cannot deadlock), each request
 * is checked against its run's current token inside that transaction (invariant 4), the
 * outcome is decided by run-lifecycle.ts (`decideCompletion`: retry backoff is domain logic,
 * not SQL), and one UPDATE and one event INSERT write them all. A `buffer_one` job's held
 * run is released in the same commit.
 *
 * A batch of successes only (the common case) needs none of that reading: one statement
 * updates each run whose token still holds, fenced in its WHERE (invariant 4), and appends
 * the events; only the requests it did not match are read back, to say why.
 */
import {
  decideCompletion, fenceHolds, isFinalStatus, leaseMissOf, leasedStatus, succeededStatus,
} from '../../domain/run-lifecycle.js';
import type { RetrySpec, RunStatus } from '../../domain/types.js';
import type { CompleteOutcome, CompleteRequest } from '../store.js';
import { numberArray, textArray } from './array-literals.js';
import { prepared, type Transaction } from './connection.js';
import { query, transaction, type StoreContext } from './context.js';
import { jsonParam, runColumns, runFromRow, type RunRow } from './rows.js';
import { appendEvents, type NewRunEvent } from './writes.js';
import { releaseHeldOf, releasesHeldColumn, holdsNothingToRelease } from './worker-runs.js';

interface LockedRun {
  run_id: string;
  team: string;
  status: RunStatus;
  fencing_token: string | null;
  attempt: number;
  attempt_base: number;
  job_id: string;
  pool: string;
  retry: RetrySpec;
  releases_held: boolean;
}

interface RunChange {
  runId: string;
  status: RunStatus;
  readyAtMs: number | null;
  finishedAtMs: number | null;
  lastError: string | null;
  result: string | null;
}

/** The write and the event of a completion whose fence held, as `decideCompletion` decides it. */
function planCompletion(run: LockedRun, request: CompleteRequest, random: () => number):
  { change: RunChange; event: NewRunEvent } {
  const decided = decideCompletion(request, run.attempt - run.attempt_base, run.retry, random);
  return {
    change: {
      runId: run.run_id, status: decided.status, readyAtMs: decided.readyAtMs, finishedAtMs: decided.finishedAtMs,
      lastError: decided.lastError, result: jsonParam(request.result ?? null),
    },
    event: {
      runId: run.run_id, atMs: request.nowMs, type: decided.eventType, fromStatus: leasedStatus, toStatus: decided.status,
      detail: decided.detail,
    },
  };
}

/** `json_to_record` reads both fields from one parse of the spec (each `->` parses it again). */
const lockRunsSql = prepared(
  `SELECT r.run_id, r.team, r.status, r.fencing_token::text AS fencing_token, r.attempt, r.attempt_base, r.job_id, r.pool,
          s.retry, ${releasesHeldColumn('s.overlap')}
     FROM runs r JOIN jobs j ON j.job_id = r.job_id CROSS JOIN LATERAL json_to_record(j.spec) AS s(retry json, overlap text)
    WHERE r.run_id = ANY($1::text[]) ORDER BY r.run_id FOR UPDATE OF r`);

/**
 * Writes each run's decided outcome: one with a ready time (a retry) stays queued, due then;
 * one that ended leaves the queue.
 */
const writeChangesSql = prepared(
  `WITH written AS (
     UPDATE runs r SET status = c.status, ready_at = c.ready_at, finished_at = c.finished_at, lease_expires_at = NULL,
                       last_error = c.last_error, result = c.result
       FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::json[])
            AS c(run_id, status, ready_at, finished_at, last_error, result)
      WHERE r.run_id = c.run_id
     RETURNING ${runColumns}
   ), requeued AS (
     UPDATE active_runs q SET status = written.status, due_at = written.ready_at
       FROM written WHERE q.job_id = written.job_id AND q.run_id = written.run_id AND written.ready_at IS NOT NULL
   ), dequeued AS (
     DELETE FROM active_runs q USING written
      WHERE q.job_id = written.job_id AND q.run_id = written.run_id AND written.ready_at IS NULL
   )
   SELECT * FROM written`);

/**
 * Rows are updated in the order of the arrays, which the caller sorts by run_id, as the
 * locking read of the general path does (two batches lock their common runs in one order).
 *
 * `alone` is the statement's form that runs without a transaction of its own (one round trip
 * instead of BEGIN, the statement and COMMIT): it leaves out every run whose job may hold a
 * run to release (`buffer_one`, or a held run already queued), as releasing takes the job's
 * lock and a second statement. Those, and the runs it did not match, go the transaction's way.
 */
const completeSucceededSql = (answer: string, form: 'within' | 'alone'): string =>
  `WITH done AS (
     UPDATE runs r SET status = '${succeededStatus}', finished_at = c.finished_at, ready_at = NULL, lease_expires_at = NULL,
                       last_error = NULL, result = c.result
       FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::json[])
              AS c(run_id, fencing_token, team, finished_at, result),
            jobs j CROSS JOIN LATERAL json_to_record(j.spec) AS s(overlap text)
      WHERE r.run_id = c.run_id AND r.status = '${leasedStatus}' AND r.fencing_token::text = c.fencing_token
        AND (c.team IS NULL OR r.team = c.team) AND j.job_id = r.job_id
        ${form === 'alone' ? `AND ${holdsNothingToRelease('s.overlap')}` : ''}
     RETURNING ${runColumns}${form === 'within' ? `, ${releasesHeldColumn('s.overlap')}` : ''}
   ), dequeued AS (
     DELETE FROM active_runs q USING done WHERE q.job_id = done.job_id AND q.run_id = done.run_id
   ), events AS (
     INSERT INTO run_events (run_id, at_ms, type, from_status, to_status, detail)
     SELECT run_id, finished_at, 'succeeded', '${leasedStatus}', '${succeededStatus}', NULL FROM done
   )
   SELECT ${answer} FROM done`;
const completeSucceededWholeSql = prepared(completeSucceededSql('*', 'within'));
/** For a group that wants no run back (`wantRun: false`, the SDK's brief completions). */
const completeSucceededBrieflySql = prepared(completeSucceededSql('run_id, job_id, releases_held', 'within'));
const completeSucceededWholeAloneSql = prepared(completeSucceededSql('*', 'alone'), { autocommit: true });
const completeSucceededBrieflyAloneSql = prepared(completeSucceededSql('run_id', 'alone'), { autocommit: true });

const missedRunsSql = prepared('SELECT run_id, team, status FROM runs WHERE run_id = ANY($1::text[])');

function isBrief(requests: readonly CompleteRequest[]): boolean {
  return requests.every((request) => request.wantRun === false);
}

function isDistinctSuccesses(requests: readonly CompleteRequest[]): boolean {
  return new Set(requests.map((request) => request.runId)).size === requests.length
    && requests.every((request) => request.status === 'succeeded');
}

/** The success statements' arrays, sorted by run_id (see `completeSucceededSql`). */
function succeededParams(requests: readonly CompleteRequest[]): string[] {
  const tried = [...requests].sort((left, right) => (left.runId < right.runId ? -1 : left.runId > right.runId ? 1 : 0));
  return [
    textArray(tried.map((request) => request.runId)),
    textArray(tried.map((request) => request.fencingToken)),
    textArray(tried.map((request) => request.team)),
    numberArray(tried.map((request) => request.nowMs)),
    textArray(tried.map((request) => jsonParam(request.result ?? null))),
  ];
}

/**
 * Many completions, answered in order. A group of distinct successes (an SDK's batch) first
 * runs as one statement outside a transaction, which is atomic alone and commits with it; on
 * PostgreSQL each round trip costs both processes a socket write and a wake-up, and this
 * takes the common group from three (BEGIN, the statement, COMMIT) to one. What that
 * statement left, runs that missed or whose job may release a held run, goes through
 * `completeRunsWithin` in a transaction, as every group did before.
 */
export async function completeRuns(context: StoreContext, requests: readonly CompleteRequest[]): Promise<CompleteOutcome[]> {
  const inTransaction = (rest: readonly CompleteRequest[]): Promise<CompleteOutcome[]> =>
    transaction(context, 'completeRun', (tx) => completeRunsWithin(tx, rest, context.random));
  if (!isDistinctSuccesses(requests)) return inTransaction(requests);
  const brief = isBrief(requests);
  const done = await query<RunRow>(context, 'completeRun', brief ? completeSucceededBrieflyAloneSql : completeSucceededWholeAloneSql,
    succeededParams(requests));
  const completed = new Map(done.rows.map((row) => [row.run_id, row]));
  const rest = requests.filter((request) => !completed.has(request.runId));
  const restOutcomes = rest.length === 0 ? [] : await inTransaction(rest);
  let restIndex = 0;
  return requests.map((request): CompleteOutcome => {
    const row = completed.get(request.runId);
    if (row === undefined) return restOutcomes[restIndex++]!;
    return brief ? { kind: 'accepted' } : { kind: 'completed', run: runFromRow(row) };
  });
}

/** Successes only: one fenced UPDATE with its events; the misses are read back (not locked) to be classified. */
async function completeSucceededWithin(tx: Transaction, requests: readonly CompleteRequest[]): Promise<CompleteOutcome[]> {
  // No run is named twice here (completeRunsWithin sends such a group down the general path).
  // A brief group's rows carry only run_id, job_id and releases_held: runFromRow is never called on them.
  const brief = isBrief(requests);
  const done = await tx.query<RunRow & { releases_held: boolean }>(brief ? completeSucceededBrieflySql : completeSucceededWholeSql,
    succeededParams(requests));
  const completed = new Map(done.rows.map((row) => [row.run_id, row]));
  const isCompleted = (request: CompleteRequest): boolean => completed.has(request.runId);
  const missedIds = requests.filter((request) => !isCompleted(request)).map((request) => request.runId);
  const missed = missedIds.length === 0 ? new Map<string, { team: string; status: RunStatus }>()
    : new Map((await tx.query<{ run_id: string; team: string; status: RunStatus }>(missedRunsSql, [textArray(missedIds)]))
      .rows.map((row) => [row.run_id, row]));
  const releaseJobs = requests.filter(isCompleted).map((request) => {
    const row = completed.get(request.runId)!;
    return { jobId: row.job_id, releasesHeld: row.releases_held, nowMs: request.nowMs };
  });
  await releaseHeldOfJobs(tx, releaseJobs);
  return requests.map((request): CompleteOutcome => {
    if (isCompleted(request)) return brief ? { kind: 'accepted' } : { kind: 'completed', run: runFromRow(completed.get(request.runId)!) };
    const run = missed.get(request.runId);
    if (run === undefined || (request.team !== null && run.team !== request.team)) return { kind: 'not_found' };
    return leaseMissOf(run);
  });
}

async function releaseHeldOfJobs(tx: Transaction, jobs: readonly { jobId: string; releasesHeld: boolean; nowMs: number }[]):
  Promise<void> {
  for (const nowMs of new Set(jobs.map((job) => job.nowMs))) {
    await releaseHeldOf(tx, jobs.filter((job) => job.nowMs === nowMs), nowMs);
  }
}

/** One transaction for many completions; answers one outcome per request, in order. */
export async function completeRunsWithin(tx: Transaction, requests: readonly CompleteRequest[],
  random: () => number): Promise<CompleteOutcome[]> {
  // A run named twice must be answered as if its completions came one after the other: the
  // first may miss (another team's, a stale token) and the next succeed. The general path
  // reads and decides them in order; a group of distinct successes needs no read.
  if (isDistinctSuccesses(requests)) return completeSucceededWithin(tx, requests);
  const locked = await tx.query<LockedRun>(lockRunsSql,
    [textArray([...new Set(requests.map((request) => request.runId))])]);
  const runs = new Map(locked.rows.map((row) => [row.run_id, row]));
  const changes = new Map<string, RunChange>();
  const events: NewRunEvent[] = [];
  const releaseJobs: { jobId: string; releasesHeld: boolean; nowMs: number }[] = [];
  const verdicts = requests.map((request): CompleteOutcome | 'completed' => {
    const run = runs.get(request.runId);
    if (run === undefined || (request.team !== null && run.team !== request.team)) return leaseMissOf(undefined);
    if (!fenceHolds(run.status, run.fencing_token, request.fencingToken)) return leaseMissOf(run);
    const { change, event } = planCompletion(run, request, random);
    changes.set(run.run_id, change);
    events.push(event);
    // A second completion of the same attempt in this batch finds it finished: stale.
    run.status = change.status;
    if (isFinalStatus(change.status)) releaseJobs.push({ jobId: run.job_id, releasesHeld: run.releases_held, nowMs: request.nowMs });
    // Parked waiters, on every node, arm for the retry's ready time (StoreNotifications.onRunsReady).
    else tx.readyPools.add(run.pool);
    return 'completed';
  });
  const written = await writeChanges(tx, [...changes.values()]);
  await appendEvents(tx, events);
  await releaseHeldOfJobs(tx, releaseJobs);
  return verdicts.map((verdict, index) => (verdict === 'completed'
    ? { kind: 'completed', run: runFromRow(written.get(requests[index]!.runId)!) }
    : verdict));
}

async function writeChanges(tx: Transaction, changes: readonly RunChange[]): Promise<Map<string, RunRow>> {
  if (changes.length === 0) return new Map();
  const result = await tx.query<RunRow>(writeChangesSql, [
      textArray(changes.map((change) => change.runId)),
      textArray(changes.map((change) => change.status)),
      numberArray(changes.map((change) => change.readyAtMs)),
      numberArray(changes.map((change) => change.finishedAtMs)),
      textArray(changes.map((change) => change.lastError)),
      textArray(changes.map((change) => change.result)),
    ]);
  return new Map(result.rows.map((row) => [row.run_id, row]));
}
