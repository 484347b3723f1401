/**
 * What a client sends to define a job, as the service takes it: the create body and the PATCH
 * body of docs/API.md, before defaults are filled in (job-spec.ts). The HTTP schemas
 * (api/schemas.ts) validate requests into exactly these shapes, and check at compile time
 * that they do; the service itself knows nothing of HTTP.
 */
import type {
  CatchUpPolicy, DstGapRule, DstRepeatRule, IdempotencyClass, Lane, OverlapPolicy,
} from '../domain/types.js';

/** Exactly one of `cron` (with `tz`), `at` or `delay_s`. */
export interface ScheduleInput {
  cron?: string;
  tz?: string;
  at?: string;
  delay_s?: number;
}

export interface JobCreateInput {
  key?: string;
  schedule: ScheduleInput;
  pool: string;
  payload?: unknown;
  lane?: Lane;
  tolerance_s?: number;
  retry?: { max_attempts?: number; base_s?: number; max_s?: number };
  overlap?: OverlapPolicy;
  catch_up?: CatchUpPolicy;
  catch_up_window_s?: number;
  dst?: { gap?: DstGapRule; repeat?: DstRepeatRule };
  idempotency?: IdempotencyClass;
  lease_s?: number;
  max_silence_s?: number | null;
  resources?: string[];
  labels?: Record<string, string>;
  owner?: string | null;
  pager?: string | null;
}

/** A PATCH changes schedule, payload or policies; the key and the team stay. */
export type JobPatchInput = Partial<Omit<JobCreateInput, 'key'>>;

/** `PUT /v1/jobs/by-key/{key}`: a create body whose `key` the path names, and whether it is paused. */
export type JobUpsertInput = JobCreateInput & { paused?: boolean };
