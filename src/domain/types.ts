/**
 * The nouns of tickler (DESIGN.md "Nouns"), as plain data. A job's `spec` keeps the wire
 * shape of API.md (snake_case, seconds) because it is the document a team wrote and reads
 * back; everything the engine computes is camelCase with its unit in the name.
 */

export const lanes = ['P0', 'P1', 'P2'] as const;
export type Lane = (typeof lanes)[number];

export const overlapPolicies = ['allow', 'forbid', 'replace', 'buffer_one'] as const;
export type OverlapPolicy = (typeof overlapPolicies)[number];

export const catchUpPolicies = ['latest', 'all', 'none'] as const;
export type CatchUpPolicy = (typeof catchUpPolicies)[number];

export const dstGapRules = ['shift', 'skip'] as const;
export type DstGapRule = (typeof dstGapRules)[number];

export const dstRepeatRules = ['first', 'last', 'both'] as const;
export type DstRepeatRule = (typeof dstRepeatRules)[number];

export const idempotencyClasses = ['keyed', 'unsafe'] as const;
export type IdempotencyClass = (typeof idempotencyClasses)[number];

export const jobStates = ['active', 'paused', 'cancelled', 'done'] as const;
export type JobState = (typeof jobStates)[number];

export const runStatuses = [
  'ready',
  'running',
  'retry_wait',
  'succeeded',
  'dead',
  'skipped_overlap',
  'skipped_outage',
  'skipped_dst',
  'cancelled',
  'abandoned',
] as const;
export type RunStatus = (typeof runStatuses)[number];

/** Runs that hold a job's "current occurrence" for the overlap policy. */
export const activeRunStatuses: readonly RunStatus[] = ['ready', 'running', 'retry_wait'];

export const completionStatuses = ['succeeded', 'failed', 'failed_permanent'] as const;
export type CompletionStatus = (typeof completionStatuses)[number];

/** The schedule as the API takes it. `delay_s` is turned into `at` on create. */
export type ScheduleSpec =
  | { cron: string; tz: string }
  | { at: string; delay_s?: number };

export interface RetrySpec {
  max_attempts: number;
  base_s: number;
  max_s: number;
}

export interface DstSpec {
  gap: DstGapRule;
  repeat: DstRepeatRule;
}

/** A job definition with every default filled in (API.md "Jobs"). */
export interface JobSpec {
  key: string | null;
  schedule: ScheduleSpec;
  pool: string;
  payload: unknown;
  lane: Lane;
  tolerance_s: number;
  retry: RetrySpec;
  overlap: OverlapPolicy;
  catch_up: CatchUpPolicy;
  catch_up_window_s: number;
  dst: DstSpec;
  idempotency: IdempotencyClass;
  lease_s: number;
  max_silence_s: number | null;
  resources: string[];
  labels: Record<string, string>;
  /**
   * Who answers for the job, and where to page them (free text: a team, an address, a
   * PagerDuty service): carried in silence alerts. Absent on jobs stored before the fields
   * existed; null when not given.
   */
  owner?: string | null;
  pager?: string | null;
}

export interface JobRecord {
  jobId: string;
  team: string;
  state: JobState;
  spec: JobSpec;
  /** sha256 of the create request body as given, for `key` idempotency. */
  requestHash: string;
  shard: number;
  /** Bumped on every change; guards read-compute-write updates (PATCH, pause, resume). */
  version: number;
  nextFireAtMs: number | null;
  nextScheduledAtMs: number | null;
  createdAtMs: number;
  updatedAtMs: number;
}

/** The durable "fire this at T" record (DESIGN.md flow 1). */
export interface TimerRecord {
  timerId: string;
  jobId: string;
  shard: number;
  bucket: number;
  fireAtMs: number;
  scheduledAtMs: number;
}

export interface RunRecord {
  runId: string;
  jobId: string;
  team: string;
  pool: string;
  lane: Lane;
  scheduledAtMs: number;
  fireAtMs: number;
  dispatchedAtMs: number | null;
  attempt: number;
  status: RunStatus;
  startedAtMs: number | null;
  finishedAtMs: number | null;
  lastError: string | null;
  result: unknown;
  /** When a `ready` or `retry_wait` run may next be leased. */
  readyAtMs: number | null;
  leaseExpiresAtMs: number | null;
  workerId: string | null;
}

export interface RunEvent {
  runId: string;
  sequence: number;
  atMs: number;
  type: string;
  fromStatus: RunStatus | null;
  toStatus: RunStatus | null;
  detail: Record<string, unknown> | null;
}

export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

/** A pending timer to write: when it fires (with jitter) and the occurrence it stands for. */
export interface TimerWrite {
  fireAtMs: number;
  scheduledAtMs: number;
}

/** An occurrence the firing plan records: a run to dispatch, or one skipped with its reason. */
export interface OccurrenceWrite {
  scheduledAtMs: number;
  fireAtMs: number;
  /**
   * `ready` occurrences pass through the job's overlap policy inside the dispatch
   * transaction; skipped ones are recorded as they are, with `reason` in `last_error`.
   */
  status: 'ready' | 'skipped_outage' | 'skipped_dst';
  reason?: string;
}
