/**
 * Rows as SQLite hands them back, and their mapping to the domain records of
 * `src/domain/types.ts`. Column names are snake_case with epoch-millisecond integers; the
 * records are camelCase with the unit in the name.
 */
import type { JobRecord, JobSpec, JobState, Lane, RunEvent, RunRecord, RunStatus } from '../../domain/types.js';
import { specFromJson, specJsonOf } from '../../domain/spec-json.js';
import type { LoadedTimer, ShardLease } from '../store.js';

/** The columns of the jobs table. */
export interface JobColumns {
  job_id: string;
  team: string;
  key: string | null;
  pool: string;
  state: string;
  spec: string;
  request_hash: string;
  shard: number;
  version: number;
  created_at: number;
  updated_at: number;
  /** The spec's `max_silence_s`, kept as a column for the dead man's switch's index (schema v5). */
  max_silence_s: number | null;
}

/** A job as read through `jobSelectSql`: the columns plus its pending timer's times. */
export interface JobRow extends JobColumns {
  /** The job's rowid; runs carry it to find a job's active runs (schema v3). */
  job_seq: number;
  next_fire_at: number | null;
  next_scheduled_at: number | null;
}

/** Reads jobs with their next fire time, which is the pending timer's, found by the job's seq (alias `j`). */
export const jobSelectSql = `SELECT j.*, t.fire_at AS next_fire_at, t.scheduled_at AS next_scheduled_at
  FROM jobs j LEFT JOIN timers t ON t.job_seq = j.job_seq`;

/** A run as `SELECT *` reads it; run_seq is its rowid, which keys its events. */
export interface RunRow {
  run_seq: number;
  run_id: string;
  job_id: string;
  team: string;
  pool: string;
  lane: string;
  scheduled_at: number;
  fire_at: number;
  dispatched_at: number | null;
  attempt: number;
  attempt_base: number;
  status: RunStatus;
  started_at: number | null;
  finished_at: number | null;
  last_error: string | null;
  result: string | null;
  ready_at: number | null;
  lease_expires_at: number | null;
  lease_ms: number | null;
  worker_id: string | null;
  fencing_token: number | null;
  held: number;
  job_seq: number;
}

export interface RunEventRow {
  event_id: number;
  run_id: string;
  at: number;
  type: string;
  from_status: string | null;
  to_status: string | null;
  detail: string | null;
}

/** A pending timer with its job's id, version and spec, read by a join on the job's seq. */
export interface TimerWithJobRow {
  timer_id: number;
  job_id: string;
  shard: number;
  fire_at: number;
  scheduled_at: number;
  version: number;
  spec: string;
  dispatched_ahead: number;
  team: string;
}

export interface ShardLeaseRow {
  shard: number;
  node_id: string;
  token: number;
  expires_at: number;
}

export function jobFromRow(row: JobRow): JobRecord {
  return {
    jobId: row.job_id,
    team: row.team,
    state: row.state as JobState,
    spec: specFromJson(row.spec),
    requestHash: row.request_hash,
    shard: row.shard,
    version: row.version,
    nextFireAtMs: row.next_fire_at,
    nextScheduledAtMs: row.next_scheduled_at,
    createdAtMs: row.created_at,
    updatedAtMs: row.updated_at,
  };
}

/** The columns of a job row, as the insert and update statements' named parameters. */
export function jobToParams(job: JobRecord): JobColumns {
  return {
    job_id: job.jobId,
    team: job.team,
    key: job.spec.key,
    pool: job.spec.pool,
    state: job.state,
    spec: specJsonOf(job.spec),
    request_hash: job.requestHash,
    shard: job.shard,
    version: job.version,
    created_at: job.createdAtMs,
    updated_at: job.updatedAtMs,
    max_silence_s: job.spec.max_silence_s,
  };
}

export function runFromRow(row: RunRow): RunRecord {
  return {
    runId: row.run_id,
    jobId: row.job_id,
    team: row.team,
    pool: row.pool,
    lane: row.lane as Lane,
    scheduledAtMs: row.scheduled_at,
    fireAtMs: row.fire_at,
    dispatchedAtMs: row.dispatched_at,
    attempt: row.attempt,
    status: row.status,
    startedAtMs: row.started_at,
    finishedAtMs: row.finished_at,
    lastError: row.last_error,
    result: row.result === null ? null : (JSON.parse(row.result) as unknown),
    readyAtMs: row.ready_at,
    leaseExpiresAtMs: row.lease_expires_at,
    workerId: row.worker_id,
  };
}

export function runEventFromRow(row: RunEventRow): RunEvent {
  return {
    runId: row.run_id,
    sequence: row.event_id,
    atMs: row.at,
    type: row.type,
    fromStatus: row.from_status as RunStatus | null,
    toStatus: row.to_status as RunStatus | null,
    detail: row.detail === null ? null : (JSON.parse(row.detail) as Record<string, unknown>),
  };
}

export function loadedTimerFromRow(row: TimerWithJobRow): LoadedTimer {
  return {
    timerId: String(row.timer_id),
    jobId: row.job_id,
    shard: row.shard,
    fireAtMs: row.fire_at,
    scheduledAtMs: row.scheduled_at,
    jobVersion: row.version,
    spec: JSON.parse(row.spec) as JobSpec,
    team: row.team,
    ...(row.dispatched_ahead === 1 ? { dispatchedAhead: true } : {}),
  };
}

export function shardLeaseFromRow(row: ShardLeaseRow): ShardLease {
  return { shard: row.shard, nodeId: row.node_id, token: String(row.token), expiresAtMs: row.expires_at };
}

/**
 * A token or timer id as the store issued it: a decimal string of a non-negative safe
 * integer. Anything else (garbage from a client, a token from another store) is null, which
 * callers treat as stale: it can never equal a current token.
 */
export function parseDecimalId(text: string): number | null {
  if (!/^(0|[1-9][0-9]{0,15})$/.test(text)) return null;
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : null;
}

