/**
 * Rows as PostgreSQL answers them, and their mapping to the domain records. bigint columns
 * arrive as numbers (see connection.ts); tokens are selected as text. The column lists are
 * kept here so that every query selects exactly what its mapper reads.
 */
import type { JobRecord, JobSpec, JobState, Lane, RunEvent, RunRecord, RunStatus } from '../../domain/types.js';
import type { LoadedTimer } from '../store.js';

export const jobColumns = `job_id, team, state, spec, request_hash, shard, version, timer_id,
  next_fire_at, next_scheduled_at, created_at, updated_at`;

export interface JobRow {
  job_id: string;
  team: string;
  state: JobState;
  spec: JobSpec;
  request_hash: string;
  shard: number;
  version: number;
  timer_id: string | null;
  next_fire_at: number | null;
  next_scheduled_at: number | null;
  created_at: number;
  updated_at: number;
}

export function jobFromRow(row: JobRow): JobRecord {
  return {
    jobId: row.job_id,
    team: row.team,
    state: row.state,
    spec: row.spec,
    requestHash: row.request_hash,
    shard: row.shard,
    version: row.version,
    nextFireAtMs: row.next_fire_at,
    nextScheduledAtMs: row.next_scheduled_at,
    createdAtMs: row.created_at,
    updatedAtMs: row.updated_at,
  };
}

/** Columns of `runs r` as RunRow reads them. */
export const runColumns = `r.run_id, r.job_id, r.team, r.pool, r.lane, r.scheduled_at, r.fire_at, r.dispatched_at,
  r.attempt, r.status, r.started_at, r.finished_at, r.last_error, r.result, r.ready_at, r.lease_expires_at,
  r.worker_id`;

export interface RunRow {
  run_id: string;
  job_id: string;
  team: string;
  pool: string;
  lane: Lane;
  scheduled_at: number;
  fire_at: number;
  dispatched_at: number | null;
  attempt: number;
  status: RunStatus;
  started_at: number | null;
  finished_at: number | null;
  last_error: string | null;
  result: unknown;
  ready_at: number | null;
  lease_expires_at: number | null;
  worker_id: string | null;
}

export function runFromRow(row: RunRow): RunRecord {
  return {
    runId: row.run_id,
    jobId: row.job_id,
    team: row.team,
    pool: row.pool,
    lane: row.lane,
    scheduledAtMs: row.scheduled_at,
    fireAtMs: row.fire_at,
    dispatchedAtMs: row.dispatched_at,
    attempt: row.attempt,
    status: row.status,
    startedAtMs: row.started_at,
    finishedAtMs: row.finished_at,
    lastError: row.last_error,
    result: row.result ?? null,
    readyAtMs: row.ready_at,
    leaseExpiresAtMs: row.lease_expires_at,
    workerId: row.worker_id,
  };
}

export interface RunEventRow {
  run_id: string;
  sequence: number;
  at_ms: number;
  type: string;
  from_status: RunStatus | null;
  to_status: RunStatus | null;
  detail: Record<string, unknown> | null;
}

export function runEventFromRow(row: RunEventRow): RunEvent {
  return {
    runId: row.run_id,
    sequence: row.sequence,
    atMs: row.at_ms,
    type: row.type,
    fromStatus: row.from_status,
    toStatus: row.to_status,
    detail: row.detail,
  };
}

/** Columns of `timers t JOIN jobs j` as LoadedTimerRow reads them. */
export const loadedTimerColumns = `t.timer_id, t.job_id, t.shard, t.fire_at, t.scheduled_at, j.version, j.spec, j.team,
  (j.ahead_run_id IS NOT NULL AND j.timer_id = t.timer_id) AS dispatched_ahead`;

export interface LoadedTimerRow {
  timer_id: string;
  job_id: string;
  shard: number;
  fire_at: number;
  scheduled_at: number;
  version: number;
  spec: JobSpec;
  team: string;
  /** The job names a run written ahead for this timer (schema v7, `jobs.ahead_run_id`). */
  dispatched_ahead: boolean;
}

export function loadedTimerFromRow(row: LoadedTimerRow): LoadedTimer {
  return {
    timerId: row.timer_id,
    jobId: row.job_id,
    shard: row.shard,
    fireAtMs: row.fire_at,
    scheduledAtMs: row.scheduled_at,
    jobVersion: row.version,
    spec: row.spec,
    team: row.team,
    ...(row.dispatched_ahead ? { dispatchedAhead: true } : {}),
  };
}

/** Serialises a JSON value for a `json` parameter; `undefined` becomes SQL NULL. */
export function jsonParam(value: unknown): string | null {
  return value === undefined ? null : JSON.stringify(value);
}
