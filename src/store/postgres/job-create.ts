/**
 * Creating jobs: the body of one group-commit transaction (see group-commit.ts). Many
 * callers' items arrive together and are written with one multi-row insert per table.
 * `key` idempotency: an item whose (team, key) already exists, in the database or earlier
 * in the same batch, answers `existing` when its request hash matches and `key_conflict`
 * otherwise; `ON CONFLICT DO NOTHING` makes concurrent transactions on the same key wait for
 * each other instead of failing.
 */
import assert from 'node:assert/strict';
import { isSameRequest, runIdOf } from '../../domain/identity.js';
import type { JobRecord } from '../../domain/types.js';
import { dispatchedAtCreateDetail, type CreateJobInput, type CreateJobOutcome } from '../store.js';
import { jsonTextArray, numberArray, textArray } from './array-literals.js';
import { newCommitEffects, parametersShifted, prepared, type CommitEffects, type Transaction } from './connection.js';
import { query, transaction, type StoreContext } from './context.js';
import { specJsonForWrite } from '../../domain/spec-json.js';
import { jobColumns, jobFromRow, type JobRow } from './rows.js';
import {
  appendEvents, appendEventsSql, collectNearTimer, eventParameters, insertRuns, insertRunsCtes, insertTimers, insertTimersSql,
  newTimerId, occurrenceRun, runParameters, timerParameters, type NewRun, type NewRunEvent, type NewTimer,
} from './writes.js';

export interface CreateItem {
  input: CreateJobInput;
  nowMs: number;
}

interface Prepared {
  job: JobRecord;
  timer: NewTimer | null;
  dueNow: CreateJobInput['dueNow'];
  legacyTextHash: string | undefined;
  nowMs: number;
}

function keyOf(job: JobRecord): string | null {
  return job.spec.key === null ? null : `${job.team}\u0000${job.spec.key}`;
}

function prepare(item: CreateItem): Prepared {
  const { job, timer } = item.input;
  const written: NewTimer | null = timer === null ? null : {
    timerId: newTimerId(), jobId: job.jobId, shard: job.shard, fireAtMs: timer.fireAtMs, scheduledAtMs: timer.scheduledAtMs,
  };
  return {
    job: { ...job, nextFireAtMs: timer?.fireAtMs ?? null, nextScheduledAtMs: timer?.scheduledAtMs ?? null },
    timer: written,
    dueNow: item.input.dueNow,
    legacyTextHash: item.input.legacyTextHash,
    nowMs: item.nowMs,
  };
}

/**
 * Creates a group of jobs, answering one outcome per item in order. A group of keyless jobs (the
 * common one: nothing to meet by key) is written by one statement outside a transaction, atomic
 * alone: its jobs and timers, and for jobs due now their runs, queue entries and first events,
 * with the NOTIFY of new ready runs and near timers, which PostgreSQL delivers only if it
 * commits. One round trip, where BEGIN, the inserts, the NOTIFY and COMMIT took four to six.
 * A group that may meet a key takes `createJobsWithin` in a transaction.
 */
export async function createJobs(context: StoreContext, items: readonly CreateItem[]): Promise<CreateJobOutcome[]> {
  if (items.some((item) => item.input.job.spec.key !== null)) {
    return transaction(context, 'createJobs', (tx) => createJobsWithin(tx, items, context.nearHorizonMs));
  }
  const prepared = items.map(prepare);
  const effects = newCommitEffects();
  collectNearTimers(effects, prepared, context.nearHorizonMs);
  const { runs, events } = runsAtCreate(effects, prepared);
  const jobsAndTimers = [...jobBatchParameters(prepared), ...timerParameters(timersOf(prepared))];
  if (runs.length === 0 && effects.nearTimers.length === 0) {
    await query(context, 'createJobs', createKeylessSql, jobsAndTimers);
  } else {
    const { channels, payloads } = context.hooks.notifications(effects);
    await query(context, 'createJobs', createKeylessDispatchingSql,
      [...jobsAndTimers, ...runParameters(runs), ...eventParameters(events), textArray(channels), textArray(payloads)]);
    context.hooks.afterCommit(effects);
  }
  return prepared.map((item): CreateJobOutcome => ({ kind: 'created', job: item.job }));
}

function timersOf(items: readonly Prepared[]): NewTimer[] {
  return items.flatMap((item) => (item.timer === null ? [] : [item.timer]));
}

function collectNearTimers(effects: CommitEffects, items: readonly Prepared[], nearHorizonMs: number): void {
  for (const item of items) {
    if (item.timer !== null) collectNearTimer(effects, item.timer, item.job, item.nowMs, nearHorizonMs);
  }
}

export async function createJobsWithin(transaction: Transaction, items: readonly CreateItem[],
  nearHorizonMs: number): Promise<CreateJobOutcome[]> {
  const prepared = items.map(prepare);
  // The first item per (team, key) is inserted; later ones in the batch are answered from it.
  const firstIndexByKey = new Map<string, number>();
  const candidates: Prepared[] = [];
  prepared.forEach((item, index) => {
    const key = keyOf(item.job);
    if (key !== null) {
      if (firstIndexByKey.has(key)) return;
      firstIndexByKey.set(key, index);
    }
    candidates.push(item);
  });
  const insertedIds = await insertJobRows(transaction, candidates);
  const existingByKey = await loadExistingByKey(transaction,
    candidates.filter((item) => !insertedIds.has(item.job.jobId)).map((item) => item.job));

  const created = candidates.filter((item) => insertedIds.has(item.job.jobId));
  await insertTimers(transaction, timersOf(created));
  collectNearTimers(transaction, created, nearHorizonMs);
  const { runs, events } = runsAtCreate(transaction, created);
  if (runs.length > 0) {
    await insertRuns(transaction, runs);
    await appendEvents(transaction, events);
  }

  return prepared.map((item, index): CreateJobOutcome => {
    const key = keyOf(item.job);
    const firstIndex = key === null ? index : firstIndexByKey.get(key)!;
    if (firstIndex === index && insertedIds.has(item.job.jobId)) return { kind: 'created', job: item.job };
    assert.ok(key !== null, `job id ${item.job.jobId} collided with an existing job`);
    const first = prepared[firstIndex]!;
    const holder = insertedIds.has(first.job.jobId) ? first.job : existingByKey.get(key);
    assert.ok(holder !== undefined, `key ${key} was neither inserted nor found`);
    return isSameRequest(holder.requestHash, { requestHash: item.job.requestHash,
      ...(item.legacyTextHash === undefined ? {} : { legacyTextHash: item.legacyTextHash }) })
      ? { kind: 'existing', job: holder }
      : { kind: 'key_conflict', job: holder };
  });
}

/**
 * Jobs due when created are dispatched here, as the dispatcher would at their fire time:
 * their runs (ready now, or skipped as planned) with the runs' first events. The jobs are
 * new, so none has a run yet and no overlap policy applies; no shard token fences these
 * writes, as none fences a trigger: a create is the client's own request, not a timer a
 * stale node may still hold (docs/API.md, "Jobs due when created").
 */
function runsAtCreate(effects: CommitEffects, created: readonly Prepared[]): { runs: NewRun[]; events: NewRunEvent[] } {
  const runs: NewRun[] = [];
  const events: NewRunEvent[] = [];
  for (const { job, dueNow, nowMs } of created) {
    if (dueNow === undefined) continue;
    for (const occurrence of dueNow) {
      const ready = occurrence.status === 'ready';
      const { run, event } = occurrenceRun(job, occurrence, runIdOf(job.jobId, occurrence.scheduledAtMs), nowMs, {
        status: occurrence.status, lastError: ready ? null : occurrence.reason ?? occurrence.status, held: false,
        readyAtMs: nowMs, dispatchedDetail: dispatchedAtCreateDetail,
      });
      runs.push(run);
      events.push(event);
      if (ready) effects.readyPools.add(job.spec.pool);
    }
  }
  return { runs, events };
}

/**
 * Inserts the jobs; answers the ids inserted. Keyless jobs cannot conflict (their ids are
 * random), so they skip ON CONFLICT's speculative insertion and the returned rows; keyed
 * jobs may meet their key and are inserted with `ON CONFLICT DO NOTHING`.
 */
async function insertJobRows(transaction: Transaction, items: readonly Prepared[]): Promise<Set<string>> {
  const keyless = items.filter((item) => item.job.spec.key === null);
  const keyed = items.filter((item) => item.job.spec.key !== null);
  const inserted = new Set(keyless.map((item) => item.job.jobId));
  if (keyless.length > 0) await insertJobBatch(transaction, keyless, false);
  if (keyed.length > 0) {
    const result = await insertJobBatch(transaction, keyed, true);
    for (const row of result.rows) inserted.add(row.job_id);
  }
  return inserted;
}

const jobColumnsInserted = `job_id, team, key, state, pool, spec, request_hash, shard, version, timer_id,
                       next_fire_at, next_scheduled_at, created_at, updated_at, max_silence_s`;
const jobRowsFromParameters = `SELECT * FROM ROWS FROM (unnest($1::text[]), unnest($2::text[]), unnest($3::text[]), unnest($4::text[]),
                              unnest($5::text[]), json_array_elements($6::json), unnest($7::text[]), unnest($8::int[]),
                              unnest($9::int[]), unnest($10::text[]), unnest($11::bigint[]), unnest($12::bigint[]),
                              unnest($13::bigint[]), unnest($14::bigint[]), unnest($15::int[]))`;
const insertKeylessJobsSql = prepared(`INSERT INTO jobs (${jobColumnsInserted}) ${jobRowsFromParameters}`);
const insertKeyedJobsSql = prepared(
  `INSERT INTO jobs (${jobColumnsInserted}) ${jobRowsFromParameters} ON CONFLICT DO NOTHING RETURNING job_id`);

/** Keyless jobs and their timers; the timers' parameters follow the jobs' 15. */
const createKeylessSql = prepared(
  `WITH timers_written AS (${parametersShifted(insertTimersSql.text, 15)})
   INSERT INTO jobs (${jobColumnsInserted}) ${jobRowsFromParameters}`, { autocommit: true });

/**
 * The same with the runs of jobs due now (their parameters from $22), their events (from $35)
 * and the NOTIFY channels and payloads ($41, $42): the answer's rows are the notifications sent.
 */
const createKeylessDispatchingSql = prepared(
  `WITH timers_written AS (${parametersShifted(insertTimersSql.text, 15)}),
        ${parametersShifted(insertRunsCtes, 21)},
        events_written AS (${parametersShifted(appendEventsSql.text, 34)}),
        jobs_written AS (INSERT INTO jobs (${jobColumnsInserted}) ${jobRowsFromParameters})
   SELECT pg_notify(c, p) FROM unnest($41::text[], $42::text[]) AS n(c, p)`, { autocommit: true });

function insertJobBatch(transaction: Transaction, items: readonly Prepared[], keyed: boolean) {
  return transaction.query<{ job_id: string }>(keyed ? insertKeyedJobsSql : insertKeylessJobsSql, jobBatchParameters(items));
}

function jobBatchParameters(items: readonly Prepared[]): string[] {
  const jobs = items.map((item) => item.job);
  return [
    textArray(jobs.map((job) => job.jobId)),
    textArray(jobs.map((job) => job.team)),
    textArray(jobs.map((job) => job.spec.key)),
    textArray(jobs.map((job) => job.state)),
    textArray(jobs.map((job) => job.spec.pool)),
    jsonTextArray(jobs.map((job) => specJsonForWrite(job.spec))),
    textArray(jobs.map((job) => job.requestHash)),
    numberArray(jobs.map((job) => job.shard)),
    numberArray(jobs.map((job) => job.version)),
    textArray(items.map((item) => item.timer?.timerId ?? null)),
    numberArray(jobs.map((job) => job.nextFireAtMs)),
    numberArray(jobs.map((job) => job.nextScheduledAtMs)),
    numberArray(jobs.map((job) => job.createdAtMs)),
    numberArray(jobs.map((job) => job.updatedAtMs)),
    numberArray(jobs.map((job) => job.spec.max_silence_s)),
  ];
}

async function loadExistingByKey(transaction: Transaction, jobs: readonly JobRecord[]): Promise<Map<string, JobRecord>> {
  const keyed = jobs.filter((job) => job.spec.key !== null);
  if (keyed.length === 0) return new Map();
  const result = await transaction.query<JobRow>(
    `SELECT ${jobColumns} FROM jobs
      WHERE (team, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
    [keyed.map((job) => job.team), keyed.map((job) => job.spec.key)]);
  const byKey = new Map<string, JobRecord>();
  for (const row of result.rows) {
    const job = jobFromRow(row);
    byKey.set(keyOf(job)!, job);
  }
  return byKey;
}
