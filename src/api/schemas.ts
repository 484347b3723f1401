/**
 * The wire schemas of API.md, declared once with TypeBox: fastify validates requests with
 * them, handlers take their types from them and /openapi.json is built from them. Every
 * object refuses unknown fields (`additionalProperties: false`) except the free-form
 * `payload`, `result` and label values. Ranges come from src/limits.ts.
 */
import { Type, type Static, type TObject, type TSchema } from 'typebox';
import * as limits from '../limits.js';
import {
  catchUpPolicies,
  completionStatuses,
  dstGapRules,
  dstRepeatRules,
  idempotencyClasses,
  jobStates,
  lanes,
  overlapPolicies,
  runStatuses,
} from '../domain/types.js';
import { specLimits } from '../service/job-spec.js';
import type { JobCreateInput, JobPatchInput } from '../service/job-input.js';
import type { JobCreateRequest } from '../worker/wire.js';

function oneOf<const T extends string[]>(values: readonly [...T]) {
  return Type.Enum(values);
}

const strict = { additionalProperties: false } as const;

/** Names that travel into SQL, NOTIFY payloads and URLs: a conservative alphabet. */
const namePattern = '^[A-Za-z0-9][A-Za-z0-9._:/-]*$';
/** Free text without control characters (NUL, newlines): keys, labels, resources. */
const printablePattern = '^[^\\u0000-\\u001f\\u007f]*$';

export const rfc3339Pattern = '^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,9})?(Z|[+-]\\d{2}:\\d{2})$';

export const ScheduleInput = Type.Object({
  // No maxLength here: compileSchedule owns what a cron expression may be (invalid_schedule).
  cron: Type.Optional(Type.String()),
  tz: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  at: Type.Optional(Type.String({ maxLength: 64 })),
  delay_s: Type.Optional(Type.Number({ minimum: 0, maximum: specLimits.delaySecondsMax })),
}, { ...strict, description: 'exactly one of cron (with optional tz), at, delay_s' });

export const RetryInput = Type.Object({
  max_attempts: Type.Optional(Type.Integer({ minimum: 1, maximum: limits.retryAttemptsMax })),
  base_s: Type.Optional(Type.Integer({ minimum: 1, maximum: limits.retryBaseSecondsMax })),
  max_s: Type.Optional(Type.Integer({ minimum: 1, maximum: limits.retryMaxSecondsMax })),
}, strict);

export const DstInput = Type.Object({
  gap: Type.Optional(oneOf(dstGapRules)),
  repeat: Type.Optional(oneOf(dstRepeatRules)),
}, strict);

const labelText = Type.String({ minLength: 1, maxLength: limits.labelLengthMax, pattern: printablePattern });

/** The policy fields a create and a PATCH share. */
const policyFields = {
  pool: Type.String({ minLength: 1, maxLength: limits.poolLengthMax, pattern: namePattern }),
  payload: Type.Unknown(),
  lane: oneOf(lanes),
  tolerance_s: Type.Integer({ minimum: 0, maximum: limits.toleranceSecondsMax }),
  retry: RetryInput,
  overlap: oneOf(overlapPolicies),
  catch_up: oneOf(catchUpPolicies),
  catch_up_window_s: Type.Integer({ minimum: 0, maximum: specLimits.catchUpWindowSecondsMax }),
  dst: DstInput,
  idempotency: oneOf(idempotencyClasses),
  lease_s: Type.Integer({ minimum: limits.leaseSecondsMin, maximum: limits.leaseSecondsMax }),
  max_silence_s: Type.Union([Type.Integer({ minimum: 1, maximum: specLimits.maxSilenceSecondsMax }), Type.Null()]),
  resources: Type.Array(labelText, { maxItems: limits.resourcesCountMax }),
  labels: Type.Record(Type.String({ maxLength: limits.labelLengthMax }), Type.String({ maxLength: limits.labelLengthMax }),
    { maxProperties: limits.labelsCountMax }),
  owner: Type.Union([Type.String({ minLength: 1, maxLength: limits.ownerLengthMax, pattern: printablePattern }), Type.Null()]),
  pager: Type.Union([Type.String({ minLength: 1, maxLength: limits.ownerLengthMax, pattern: printablePattern }), Type.Null()]),
};

export const JobCreateBody = Type.Object({
  key: Type.Optional(Type.String({ minLength: 1, maxLength: limits.keyLengthMax, pattern: printablePattern })),
  schedule: ScheduleInput,
  pool: policyFields.pool,
  payload: Type.Optional(policyFields.payload),
  lane: Type.Optional(policyFields.lane),
  tolerance_s: Type.Optional(policyFields.tolerance_s),
  retry: Type.Optional(policyFields.retry),
  overlap: Type.Optional(policyFields.overlap),
  catch_up: Type.Optional(policyFields.catch_up),
  catch_up_window_s: Type.Optional(policyFields.catch_up_window_s),
  dst: Type.Optional(policyFields.dst),
  idempotency: Type.Optional(policyFields.idempotency),
  lease_s: Type.Optional(policyFields.lease_s),
  max_silence_s: Type.Optional(policyFields.max_silence_s),
  resources: Type.Optional(policyFields.resources),
  labels: Type.Optional(policyFields.labels),
  owner: Type.Optional(policyFields.owner),
  pager: Type.Optional(policyFields.pager),
}, strict);
export type JobCreateBody = Static<typeof JobCreateBody>;
/** True when A and B have the same fields, each assignable both ways (a compile-time check). */
type SameShape<A, B> = [A, B, keyof A, keyof B] extends [B, A, keyof B, keyof A] ? true : never;
// A validated body is exactly what the service takes, and what the SDK sends.
const createBodyIsServiceInput: SameShape<JobCreateBody, JobCreateInput> = true;
/** True when every A is a valid B and they name the same fields (the SDK's types may be narrower). */
type FitsWithSameFields<A, B> = [A, keyof A, keyof B] extends [B, keyof B, keyof A] ? true : never;
const createBodyIsSdkRequest: FitsWithSameFields<JobCreateRequest, JobCreateBody> = true;

/** `PUT /v1/jobs/by-key/{key}` (extension): a create body, `key` optional (the path names it), and `paused`. */
export const JobUpsertBody = Type.Object({
  ...JobCreateBody.properties,
  paused: Type.Optional(Type.Boolean()),
}, strict);
export type JobUpsertBody = Static<typeof JobUpsertBody>;

export const JobKeyParams = Type.Object({ key: Type.String({ minLength: 1, maxLength: limits.keyLengthMax, pattern: printablePattern }) }, strict);

/** A PATCH changes schedule, payload or policies; the key and the team stay. */
export const JobPatchBody = Type.Object({
  schedule: Type.Optional(ScheduleInput),
  pool: Type.Optional(policyFields.pool),
  payload: Type.Optional(policyFields.payload),
  lane: Type.Optional(policyFields.lane),
  tolerance_s: Type.Optional(policyFields.tolerance_s),
  retry: Type.Optional(policyFields.retry),
  overlap: Type.Optional(policyFields.overlap),
  catch_up: Type.Optional(policyFields.catch_up),
  catch_up_window_s: Type.Optional(policyFields.catch_up_window_s),
  dst: Type.Optional(policyFields.dst),
  idempotency: Type.Optional(policyFields.idempotency),
  lease_s: Type.Optional(policyFields.lease_s),
  max_silence_s: Type.Optional(policyFields.max_silence_s),
  resources: Type.Optional(policyFields.resources),
  labels: Type.Optional(policyFields.labels),
  owner: Type.Optional(policyFields.owner),
  pager: Type.Optional(policyFields.pager),
}, strict);
export type JobPatchBody = Static<typeof JobPatchBody>;
const patchBodyIsServiceInput: SameShape<JobPatchBody, JobPatchInput> = true;
void createBodyIsServiceInput;
void createBodyIsSdkRequest;
void patchBodyIsServiceInput;

/** Items are validated one by one in the handler, so one bad item fails only itself. */
/** What an accepted batch-create item carries: the whole job (default) or only its id. */
export const createAnswers = ['job', 'id'] as const;

export const JobBatchBody = Type.Object({
  jobs: Type.Array(Type.Unknown(), { minItems: 1, maxItems: limits.batchJobsMax }),
  answer: Type.Optional(oneOf(createAnswers)),
}, strict);

/** What a cancelled item answers in `POST /v1/jobs:cancel`: the whole job (the default), or its status alone. */
export const cancelAnswers = ['job', 'status'] as const;

export const JobCancelBatchBody = Type.Object({
  job_ids: Type.Array(Type.String(), { minItems: 1, maxItems: limits.batchJobsMax }),
  answer: Type.Optional(oneOf(cancelAnswers)),
}, strict);

export const JobIdParams = Type.Object({ job_id: Type.String() }, strict);
export const RunIdParams = Type.Object({ run_id: Type.String() }, strict);

const cursor = Type.String({ minLength: 1, maxLength: 1024, pattern: '^[A-Za-z0-9_=-]+$' });
const listLimit = Type.Integer({ minimum: 1, maximum: limits.listLimitMax });
const teamName = Type.String({ minLength: 1, maxLength: limits.poolLengthMax, pattern: namePattern });
const instant = Type.String({ maxLength: 64 });

export const JobListQuery = Type.Object({
  state: Type.Optional(oneOf(jobStates)),
  pool: Type.Optional(policyFields.pool),
  key: Type.Optional(Type.String({ minLength: 1, maxLength: limits.keyLengthMax })),
  key_prefix: Type.Optional(Type.String({ minLength: 1, maxLength: limits.keyLengthMax })),
  label: Type.Optional(Type.String({ minLength: 1, maxLength: 2 * limits.labelLengthMax + 1 })),
  cursor: Type.Optional(cursor),
  limit: Type.Optional(listLimit),
  team: Type.Optional(teamName),
}, strict);

export const TeamQuery = Type.Object({ team: Type.Optional(teamName) }, strict);
/** `PUT /v1/jobs/by-key/{key}`: `dry_run=true` answers what would change and writes nothing. */
export const UpsertQuery = Type.Object({ team: Type.Optional(teamName), dry_run: Type.Optional(Type.Boolean()) }, strict);

export const SilentJobsQuery = Type.Object({
  cursor: Type.Optional(cursor),
  limit: Type.Optional(listLimit),
  team: Type.Optional(teamName),
}, strict);

export const CancelByPrefixQuery = Type.Object({
  key_prefix: Type.String({ minLength: 1, maxLength: limits.keyLengthMax, pattern: printablePattern }),
  team: Type.Optional(teamName),
}, strict);

export const RunListQuery = Type.Object({
  since: Type.Optional(instant),
  until: Type.Optional(instant),
  status: Type.Optional(oneOf(runStatuses)),
  pool: Type.Optional(policyFields.pool),
  cursor: Type.Optional(cursor),
  limit: Type.Optional(listLimit),
  team: Type.Optional(teamName),
}, strict);

export const DlqQuery = Type.Object({
  pool: Type.Optional(policyFields.pool),
  cursor: Type.Optional(cursor),
  limit: Type.Optional(listLimit),
  team: Type.Optional(teamName),
}, strict);

export const PreviewQuery = Type.Object({
  cron: Type.String(),
  tz: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  from: Type.Optional(instant),
  count: Type.Optional(Type.Integer({ minimum: 1, maximum: limits.previewCountMax })),
  gap: Type.Optional(oneOf(dstGapRules)),
  repeat: Type.Optional(oneOf(dstRepeatRules)),
}, strict);

export const LeaseBody = Type.Object({
  pool: policyFields.pool,
  max: Type.Optional(Type.Integer({ minimum: 1, maximum: limits.leaseBatchMax })),
  lease_s: Type.Optional(policyFields.lease_s),
  wait_s: Type.Optional(Type.Number({ minimum: 0, maximum: limits.leaseWaitSecondsMax })),
  worker_id: Type.Optional(Type.String({ minLength: 1, maxLength: limits.poolLengthMax, pattern: printablePattern })),
  ahead_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: limits.leaseAheadMsMax })),
  max_ready: Type.Optional(Type.Integer({ minimum: 1, maximum: limits.leaseBatchMax })),
}, strict);

const fencingToken = Type.String({ minLength: 1, maxLength: 64 });

export const HeartbeatBody = Type.Object({ fencing_token: fencingToken }, strict);

export const CompleteBody = Type.Object({
  fencing_token: fencingToken,
  status: oneOf(completionStatuses),
  error: Type.Optional(Type.Union([Type.String({ maxLength: limits.errorTextLengthMax }), Type.Null()])),
  result: Type.Optional(Type.Unknown()),
}, strict);

/**
 * Batches of worker calls (an extension of API.md: `POST /v1/runs:complete` and
 * `/v1/runs:heartbeat`). As in `jobs:batch`, items are validated one by one in the handler,
 * so one bad item fails only itself. A batch is bounded like a lease: a worker completes at
 * most what it could lease in one call.
 */
export const CompleteItem = Type.Object({
  run_id: Type.String(),
  fencing_token: fencingToken,
  status: oneOf(completionStatuses),
  error: Type.Optional(Type.Union([Type.String({ maxLength: limits.errorTextLengthMax }), Type.Null()])),
  result: Type.Optional(Type.Unknown()),
}, strict);
export type CompleteItem = Static<typeof CompleteItem>;

/** What an accepted completion answers: the whole run (the default), or its status alone. */
export const completeAnswers = ['run', 'status'] as const;

export const CompleteBatchBody = Type.Object({
  completions: Type.Array(Type.Unknown(), { minItems: 1, maxItems: limits.leaseBatchMax }),
  answer: Type.Optional(oneOf(completeAnswers)),
}, strict);

export const HeartbeatItem = Type.Object({ run_id: Type.String(), fencing_token: fencingToken }, strict);
export type HeartbeatItem = Static<typeof HeartbeatItem>;

export const HeartbeatBatchBody = Type.Object({
  heartbeats: Type.Array(Type.Unknown(), { minItems: 1, maxItems: limits.leaseBatchMax }),
}, strict);

export const ClockAdvanceBody = Type.Object({
  seconds: Type.Number({ minimum: 0, maximum: specLimits.clockAdvanceSecondsMax }),
}, strict);

// Answers (documented in /openapi.json; handlers build them in wire.ts) -------------------

const nullableInstant = Type.Union([Type.String(), Type.Null()]);

export const JobAnswer = Type.Object({
  job_id: Type.String(),
  team: Type.String(),
  state: oneOf(jobStates),
  key: Type.Union([Type.String(), Type.Null()]),
  schedule: Type.Object({}, { additionalProperties: true }),
  next_fire_at: nullableInstant,
  next_scheduled_at: nullableInstant,
  created_at: Type.String(),
  updated_at: Type.String(),
}, { additionalProperties: true, description: 'the job spec with defaults filled in, plus these fields' });

export const RunAnswer = Type.Object({
  run_id: Type.String(),
  job_id: Type.String(),
  team: Type.String(),
  pool: Type.String(),
  scheduled_at: Type.String(),
  fire_at: Type.String(),
  dispatched_at: nullableInstant,
  attempt: Type.Integer(),
  status: oneOf(runStatuses),
  started_at: nullableInstant,
  finished_at: nullableInstant,
  last_error: Type.Union([Type.String(), Type.Null()]),
  result: Type.Unknown(),
}, { additionalProperties: true });

export function listAnswer(item: TSchema) {
  return Type.Object({ items: Type.Array(item), next_cursor: Type.Union([Type.String(), Type.Null()]) });
}

export const SilentJobsAnswer = Type.Object({
  items: Type.Array(Type.Object({
    job: Type.Unknown(),
    last_success_at: Type.Union([Type.String(), Type.Null()]),
    silent_since: Type.String(),
  })),
  next_cursor: Type.Union([Type.String(), Type.Null()]),
});

export const ErrorAnswer = Type.Object({
  error: Type.Object({ code: Type.String(), message: Type.String(), field: Type.Optional(Type.String()) }),
});

/** One item of a batch answer: its own status, and the thing or the error. */
function batchItem(ok: TObject): TSchema {
  return Type.Union([
    Type.Object({ status: Type.Integer({ minimum: 200, maximum: 299 }), ...ok.properties }),
    Type.Object({ status: Type.Integer({ minimum: 400, maximum: 599 }), error: ErrorAnswer.properties.error }),
  ]);
}

export const JobBatchAnswer = Type.Object({
  results: Type.Array(Type.Union([
    batchItem(Type.Object({ job: JobAnswer })),
    batchItem(Type.Object({ job_id: Type.String() })),
  ])),
}, { description: 'one result per item, in order; with "answer": "id", accepted items carry job_id instead of job' });

export const JobCancelBatchAnswer = Type.Object({
  results: Type.Array(Type.Union([batchItem(Type.Object({ job: JobAnswer })), batchItem(Type.Object({}))])),
});

export const LeasedRunAnswer = Type.Object({
  run_id: Type.String(),
  job_id: Type.String(),
  attempt: Type.Integer(),
  scheduled_at: Type.String(),
  fire_at: Type.String(),
  payload: Type.Unknown(),
  fencing_token: Type.String(),
  lease_expires_at: Type.String(),
}, { additionalProperties: true });

export const LeaseAnswer = Type.Object({ runs: Type.Array(LeasedRunAnswer) });

export const HeartbeatAnswer = Type.Object({ lease_expires_at: Type.String() });

export const CompleteBatchAnswer = Type.Object({
  results: Type.Array(Type.Union([batchItem(Type.Object({ run: RunAnswer })), batchItem(Type.Object({}))])),
});

export const HeartbeatBatchAnswer = Type.Object({
  results: Type.Array(batchItem(Type.Object({ lease_expires_at: Type.String() }))),
});

export const PreviewAnswer = Type.Object({
  items: Type.Array(Type.Object({ scheduled_at: Type.String() }, { additionalProperties: true })),
}, { additionalProperties: true });

export const StatusAnswer = Type.Object({ status: Type.String() }, { additionalProperties: true });

export const ReadinessAnswer = Type.Object({ ready: Type.Boolean() }, { additionalProperties: true });

export const CancelledCountAnswer = Type.Object({ cancelled: Type.Integer() });

export const UpsertAnswer = Type.Object({ job: JobAnswer, created: Type.Boolean(), changed: Type.Boolean() });
