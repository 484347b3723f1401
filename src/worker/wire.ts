/**
 * The wire shapes of API.md as TypeScript types: snake_case fields, times as RFC 3339 UTC
 * strings, durations in seconds with an `_s` suffix. Clients send and receive exactly these;
 * nothing here is converted.
 */
import type {
  CatchUpPolicy,
  CompletionStatus,
  DstSpec,
  IdempotencyClass,
  JobSpec,
  JobState,
  Lane,
  OverlapPolicy,
  RetrySpec,
  RunStatus,
} from '../domain/types.js';

export type { CompletionStatus, JobState, RunStatus };

export type ScheduleRequest =
  | { cron: string; tz?: string }
  | { at: string }
  | { delay_s: number };

/** `POST /v1/jobs` body: `schedule` and `pool` are required, everything else has a default. */
export interface JobCreateRequest {
  key?: string;
  schedule: ScheduleRequest;
  pool: string;
  payload?: unknown;
  lane?: Lane;
  tolerance_s?: number;
  retry?: Partial<RetrySpec>;
  overlap?: OverlapPolicy;
  catch_up?: CatchUpPolicy;
  catch_up_window_s?: number;
  dst?: Partial<DstSpec>;
  idempotency?: IdempotencyClass;
  lease_s?: number;
  max_silence_s?: number | null;
  resources?: string[];
  labels?: Record<string, string>;
  /** Who answers for the job and where to page them; carried in silence alerts. */
  owner?: string | null;
  pager?: string | null;
}

/** `PATCH /v1/jobs/{job_id}` body: schedule, payload or policies. */
export type JobPatchRequest = Partial<Omit<JobCreateRequest, 'key' | 'pool'>> & { pool?: string };

/** A job as the API answers it: the spec with defaults filled in, plus its state. */
export interface Job extends JobSpec {
  job_id: string;
  team: string;
  state: JobState;
  next_fire_at: string | null;
  next_scheduled_at: string | null;
  created_at: string;
  updated_at: string;
}

export interface RunEvent {
  sequence: number;
  at: string;
  type: string;
  from_status?: RunStatus | null;
  to_status?: RunStatus | null;
  detail?: Record<string, unknown> | null;
  [extension: string]: unknown;
}

export interface Run {
  run_id: string;
  job_id: string;
  team: string;
  pool: string;
  scheduled_at: string;
  fire_at: string;
  dispatched_at: string | null;
  attempt: number;
  status: RunStatus;
  started_at: string | null;
  finished_at: string | null;
  last_error: string | null;
  result: unknown;
  /** Extensions of API.md's run: the lane, when it may next be leased, and by whom it is held. */
  lane?: Lane;
  ready_at?: string | null;
  lease_expires_at?: string | null;
  worker_id?: string | null;
  /** Only on `GET /v1/runs/{run_id}`. */
  events?: RunEvent[];
}

export interface ListPage<T> {
  items: T[];
  next_cursor: string | null;
}

/** One item of `GET /v1/jobs:silent` (the dead man's switch). */
export interface SilentJob {
  job: Job;
  /** When its latest succeeded run finished; null when it never succeeded. */
  last_success_at: string | null;
  /** When its max_silence_s ran out: the later of its last success and its last change, plus max_silence_s. */
  silent_since: string;
}

export interface ListJobsQuery {
  state?: JobState;
  pool?: string;
  label?: string;
  /** The job with exactly this key (extension). */
  key?: string;
  team?: string;
  cursor?: string;
  limit?: number;
}

export interface ListRunsQuery {
  since?: string;
  until?: string;
  status?: RunStatus;
  pool?: string;
  team?: string;
  cursor?: string;
  limit?: number;
}

export interface ListDlqQuery {
  pool?: string;
  team?: string;
  cursor?: string;
  limit?: number;
}

export type BatchResult =
  | { status: 200 | 201; job: Job }
  | { status: number; error: { code: string; message: string; field?: string } };
/** As `BatchResult`, asked with `answer: 'id'`: an accepted item carries the job's id alone. */
export type BatchIdResult =
  | { status: 200 | 201; job_id: string }
  | { status: number; error: { code: string; message: string; field?: string } };

/** One item of `POST /v1/jobs:cancel`'s answer; with `answer: 'status'` a cancelled item carries no job. */
export type CancelBatchResult =
  | { status: 200; job: Job }
  | { status: number; error: { code: string; message: string; field?: string } };
export type CancelBatchStatusResult =
  | { status: 200 }
  | { status: number; error: { code: string; message: string; field?: string } };

export interface PreviewQuery {
  cron: string;
  tz?: string;
  from?: string;
  count?: number;
  gap?: DstSpec['gap'];
  repeat?: DstSpec['repeat'];
}

export interface PreviewItem {
  scheduled_at: string;
  local: string;
}

export interface LeaseRequest {
  pool: string;
  max: number;
  lease_s?: number;
  wait_s?: number;
  worker_id?: string;
  /** Also lease runs ready within this many ms (an extension of API.md: "Leasing ahead"). */
  ahead_ms?: number;
  /** At most this many of `max` ready now; the rest only runs ready within `ahead_ms` (same extension). */
  max_ready?: number;
}

/** One run handed to a worker by `POST /v1/workers/lease`. */
export interface LeasedRun {
  run_id: string;
  job_id: string;
  attempt: number;
  scheduled_at: string;
  fire_at: string;
  payload: unknown;
  fencing_token: string;
  lease_expires_at: string;
  /** Extensions of API.md's lease answer. */
  team?: string;
  dispatched_at?: string;
  /** When the run is ready: one leased ahead (`ahead_ms`) must not start before it. */
  ready_at?: string;
}

export interface CompleteRequest {
  fencing_token: string;
  status: CompletionStatus;
  error?: string;
  result?: unknown;
}

/** One item of `POST /v1/runs:complete` (an extension of API.md; see docs/API.md). */
export interface CompleteBatchItem extends CompleteRequest {
  run_id: string;
}

/** One item of `POST /v1/runs:heartbeat`. */
export interface HeartbeatBatchItem {
  run_id: string;
  fencing_token: string;
}

/** The error document of one failed batch item. */
export interface ItemError {
  code: string;
  message: string;
  field?: string;
}

/** Each item of a worker batch answers for itself, in request order. */
export type CompleteBatchResult = { status: 200; run: Run } | { status: number; error: ItemError };
/** As `CompleteBatchResult`, asked with `answer: 'status'`: an accepted item carries no run. */
export type CompleteBatchStatusResult = { status: 200 } | { status: number; error: ItemError };
export type HeartbeatBatchResult = { status: 200; lease_expires_at: string } | { status: number; error: ItemError };

export interface ClockAnswer {
  now: string;
}

/** Answers the spec leaves open in shape (trigger, cancel by prefix, health) are kept as JSON objects. */
export type JsonObject = Record<string, unknown>;
