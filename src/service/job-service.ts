/**
 * Job operations behind the HTTP API: validation → domain → store. Each operation is one
 * store transition; read-compute-write changes (PATCH, pause, resume) carry the version
 * they read and are recomputed when another writer got there first.
 */
import { TicklerError } from '../errors.js';
import type { Clock } from '../clock.js';
import type { Metrics } from '../obs/metrics.js';
import type { JobRecord, JobState, Page, RunRecord } from '../domain/types.js';
import { newJobId, requestHashOf, runIdOf, sha256Hex, shardOf } from '../domain/identity.js';
import { compileSchedule } from '../domain/schedule.js';
import { firstTimer, planFiring } from '../domain/firing-plan.js';
import type {
  CreateJobInput, CreateJobOutcome, JobChange, JobListFilter, SilentJob, Store, TeamScope, TimerWrite,
} from '../store/store.js';
import type { JobCreateInput, JobPatchInput, JobUpsertInput } from './job-input.js';
import { stringify as stableStringify } from 'safe-stable-stringify';
import { decodeCursor, encodeCursor } from '../store/cursor.js';
import { specJsonOf } from '../domain/spec-json.js';
import { specFromCreate, specFromPatch, type LabelSelector, type SpecContext } from './job-spec.js';
import { jobChangeAttemptsCountMax } from '../limits.js';
import type { TeamLimits } from './team-limits.js';

export interface JobServiceDeps {
  store: Store;
  clock: Clock;
  metrics: Metrics;
  cronToleranceDefaultS: number;
  /** Jobs with this label must set max_silence_s (`--require-max-silence-label`). */
  silenceRequiredLabel?: LabelSelector | null;
  payloadBytesMax: number;
  /**
   * A one-shot job already due when created is dispatched by its create (`CreateJobInput.dueNow`,
   * docs/API.md, "Jobs due when created"). On unless false (`TICKLER_DISPATCH_AT_CREATE=0`): then its
   * timer is written and the scheduler fires it, as every timer.
   */
  dispatchAtCreate?: boolean;
  /** Makes a new job's id (default `newJobId`: time prefix, random suffix); the simulator draws it from its seed. */
  newJobId?: (nowMs: number) => string;
  /** Team limits in force (team-limits.ts); without them no create is limited. */
  teamLimits?: TeamLimits;
}

/**
 * One create: the validated body, whose canonical JSON is hashed for key idempotency, and its
 * text as given, hashed only to match a keyed job stored before hashes were canonical. Only a
 * keyed body's text is read; callers may leave it empty for a body without `key`.
 */
export interface CreateItem {
  body: JobCreateInput;
  rawText: string;
}

export type CreateResult =
  | { kind: 'created' | 'existing'; job: JobRecord }
  | { kind: 'error'; error: TicklerError };

/** What `upsertByKey` answers: the job, whether it was created, whether anything changed. */
export interface UpsertResult {
  job: JobRecord;
  created: boolean;
  changed: boolean;
}

/** Creates checked and built, not yet written (`JobService.prepareCreates`). */
export interface PreparedCreates {
  team: string;
  nowMs: number;
  /** Per item: its error, or null where its input waits in `inputs`. */
  results: readonly (CreateResult | null)[];
  inputs: CreateJobInput[];
  /** The item index of each input. */
  inputIndexes: number[];
}

export class JobService {
  constructor(private readonly deps: JobServiceDeps) {}

  private specContext(nowMs: number): SpecContext {
    return { nowMs, cronToleranceDefaultS: this.deps.cronToleranceDefaultS, payloadBytesMax: this.deps.payloadBytesMax,
      silenceRequiredLabel: this.deps.silenceRequiredLabel ?? null };
  }

  /**
   * Creates jobs for `team`. Items that fail their checks answer their own error; the valid
   * ones go to the store in ONE createJobs call (one group commit).
   */
  create(team: string, items: readonly CreateItem[]): Promise<CreateResult[]> {
    return this.commitCreates(this.prepareCreates(team, items));
  }

  /**
   * `create` up to the store: each item checked and its job built, or its error. With
   * `answer: "job"` (the default) each spec's text is made and remembered now, once for the
   * store's write and the answer both; with `"id"` the store makes it and forgets it
   * (`specJsonForWrite`).
   */
  prepareCreates(team: string, items: readonly CreateItem[], answer: 'job' | 'id' = 'job'): PreparedCreates {
    const nowMs = this.deps.clock.nowMs();
    const results: (CreateResult | null)[] = [];
    const inputs: CreateJobInput[] = [];
    const inputIndexes: number[] = [];
    for (const item of items) {
      try {
        inputs.push(this.prepareCreate(team, item, nowMs));
        inputIndexes.push(results.length);
        results.push(null);
      } catch (error) {
        if (!(error instanceof TicklerError)) throw error;
        results.push({ kind: 'error', error });
      }
    }
    if (answer === 'job') for (const input of inputs) specJsonOf(input.job.spec);
    return { team, nowMs, results, inputs, inputIndexes };
  }

  /**
   * What each prepared item answers if the store creates its job as built: true of every
   * unkeyed item unless the whole write fails; a keyed one may find its key taken. The
   * batch route builds its answer from this while the store's sync is in flight, and keeps
   * the part that `commitCreates` confirms (the same result kind and record).
   */
  expectedResults(prepared: PreparedCreates): CreateResult[] {
    const expected = prepared.results.slice();
    prepared.inputs.forEach((input, position) => {
      expected[prepared.inputIndexes[position]!] = { kind: 'created', job: input.job };
    });
    return expected as CreateResult[];
  }

  /** The rest of `create`: the prepared jobs to the store, in one call. */
  async commitCreates(prepared: PreparedCreates): Promise<CreateResult[]> {
    const { team, nowMs, inputs, inputIndexes } = prepared;
    const results = prepared.results.slice();
    if (inputs.length > 0) {
      const outcomes = await this.createWithinLimits(team, inputs, nowMs);
      let createdCount = 0;
      outcomes.forEach((outcome, position) => {
        const index = inputIndexes[position]!;
        if (outcome.kind === 'key_conflict') {
          results[index] = {
            kind: 'error',
            error: new TicklerError('key_conflict', `key ${JSON.stringify(outcome.job.spec.key)} is taken by job ${outcome.job.jobId} with another request body`,
              { field: 'key' }),
          };
        } else {
          if (outcome.kind === 'created') createdCount++;
          results[index] = outcome;
        }
      });
      if (createdCount > 0) this.deps.metrics.jobsCreatedTotal.inc({ team: this.deps.metrics.teamLabel(team) }, createdCount);
      this.countDispatchedAtCreate(inputs, outcomes);
    }
    return results.map((result) => {
      if (result === null) throw new Error('createJobs answered fewer outcomes than inputs');
      return result;
    });
  }

  /**
   * The store's create, held to the team's quota when it has one (docs/API.md "Team limits"):
   * all of `inputs` are written or, refused, none, and the refusal is a `429 rate_limited`
   * naming the limit. A team without `create_per_s` or `pending_max` takes the plain create.
   */
  private async createWithinLimits(team: string, inputs: CreateJobInput[], nowMs: number): Promise<CreateJobOutcome[]> {
    const limits = this.deps.teamLimits;
    const quota = limits?.createQuotaOf(team) ?? null;
    if (limits === undefined || quota === null) return this.deps.store.createJobs(inputs, nowMs);
    const outcome = await this.deps.store.createJobsWithinQuota(inputs, nowMs, quota);
    if (outcome.kind === 'created') return outcome.outcomes;
    this.deps.metrics.rateLimitedTotal.inc({ team: this.deps.metrics.teamLabel(team), limit: outcome.limit });
    throw limits.refusal(quota, outcome.limit, outcome.retryAfterMs, inputs.length);
  }

  /**
   * The runs a create dispatched, counted and their fire lag observed as the scheduler's
   * dispatcher does for the runs it dispatches (`tickler_dispatches_total`, `tickler_fire_lag_seconds`).
   */
  private countDispatchedAtCreate(inputs: readonly CreateJobInput[], outcomes: readonly CreateJobOutcome[]): void {
    let committedAtMs: number | null = null;
    inputs.forEach((input, position) => {
      if (input.dueNow === undefined || outcomes[position]?.kind !== 'created') return;
      committedAtMs ??= this.deps.clock.nowMs();
      for (const occurrence of input.dueNow) {
        this.deps.metrics.dispatchesTotal.inc({ status: occurrence.status });
        if (occurrence.status === 'ready') {
          this.deps.metrics.runsDispatchedTotal.inc({ team: this.deps.metrics.teamLabel(input.job.team) });
          this.deps.metrics.fireLagSeconds.observe({ lane: input.job.spec.lane },
            Math.max(0, committedAtMs - occurrence.fireAtMs) / 1000);
        }
      }
    });
  }

  private prepareCreate(team: string, item: CreateItem, nowMs: number): CreateJobInput {
    const { spec, schedule } = specFromCreate(item.body, this.specContext(nowMs));
    const jobId = (this.deps.newJobId ?? newJobId)(nowMs);
    const firstFire = firstTimer(jobId, spec, schedule, nowMs);
    // Due already: the occurrence is planned as a timer firing now would plan it and written
    // by the create itself, with no timer, wheel or dispatch transaction between.
    const dueNow = firstFire !== null && schedule.kind === 'once' && firstFire.fireAtMs <= nowMs &&
      this.deps.dispatchAtCreate !== false
      ? planFiring(jobId, spec, schedule, firstFire, nowMs, nowMs).occurrences
      : undefined;
    const timer = dueNow === undefined ? firstFire : null;
    return {
      job: {
        jobId,
        team,
        state: timer === null ? 'done' : 'active',
        spec,
        // Only a keyed create is ever compared with a later one; hashing every body of a
        // 1,000-job batch was a measurable share of the create path.
        requestHash: spec.key === null ? '' : requestHashOf(item.body),
        shard: shardOf(jobId),
        version: 1,
        nextFireAtMs: timer?.fireAtMs ?? null,
        nextScheduledAtMs: timer?.scheduledAtMs ?? null,
        createdAtMs: nowMs,
        updatedAtMs: nowMs,
      },
      timer,
      ...(dueNow === undefined ? {} : { dueNow }),
      ...(spec.key === null || item.rawText === '' ? {} : { legacyTextHash: sha256Hex(item.rawText) }),
    };
  }

  /**
   * `PUT /v1/jobs/by-key/{key}`: creates the team's job with this key, or replaces the
   * definition of the one there (docs/API.md, "Upsert by key"). A replacement is one
   * `changeJob` with the version read, so the spec, the state and the pending timer change in
   * one transaction; the job keeps its `job_id` and its runs. `paused` (recurring jobs only)
   * sets the state; left out, the state stays as it is. A cancelled job under the key is
   * brought back, as the file that names it asks. Answers whether anything changed; with
   * `dryRun` nothing is written and the job answered is the one that would be.
   */
  async upsertByKey(team: string, key: string, body: JobUpsertInput, dryRun = false): Promise<UpsertResult> {
    const { paused, ...rest } = body;
    if (rest.key !== undefined && rest.key !== key) {
      throw new TicklerError('invalid_request', 'the body\'s key differs from the key in the path', { field: 'key' });
    }
    if (rest.schedule.delay_s !== undefined) {
      throw new TicklerError('invalid_request', 'an upsert names its time: schedule.at, not delay_s (a delay would change the job on every call)',
        { field: 'schedule.delay_s' });
    }
    if (paused !== undefined && rest.schedule.cron === undefined) {
      throw new TicklerError('invalid_request', 'only a recurring job can be paused', { field: 'paused' });
    }
    const createBody: JobCreateInput = { ...rest, key };
    for (let attempt = 1; attempt <= jobChangeAttemptsCountMax; attempt++) {
      const nowMs = this.deps.clock.nowMs();
      const [existing] = (await this.deps.store.listJobs({ team, key, limit: 1 })).items;
      if (existing === undefined) {
        const input = this.prepareCreate(team, { body: createBody, rawText: '' }, nowMs);
        if (paused === true) Object.assign(input, { job: { ...input.job, state: 'paused', nextFireAtMs: null, nextScheduledAtMs: null }, timer: null });
        if (dryRun) return { job: input.job, created: true, changed: true };
        const [outcome] = await this.createWithinLimits(team, [input], nowMs);
        if (outcome?.kind === 'created') {
          this.deps.metrics.jobsCreatedTotal.inc({ team: this.deps.metrics.teamLabel(team) }, 1);
          this.countDispatchedAtCreate([input], [outcome]);
          return { job: outcome.job, created: true, changed: true };
        }
        continue; // another caller created it first: replace that one
      }
      const change = this.upsertChange(existing, createBody, paused, nowMs);
      if (change === null) return { job: existing, created: false, changed: false };
      if (change.timer !== 'keep') await this.refuseFiredOneShot(team, existing, nowMs);
      if (dryRun) {
        const timer = change.timer === 'keep' ? null : change.timer;
        return {
          job: { ...existing, ...change, version: existing.version + 1, updatedAtMs: nowMs,
            ...(change.timer === 'keep' ? {} : { nextFireAtMs: timer?.fireAtMs ?? null, nextScheduledAtMs: timer?.scheduledAtMs ?? null }) },
          created: false, changed: true,
        };
      }
      const outcome = await this.deps.store.changeJob({ team, jobId: existing.jobId, expectedVersion: existing.version, nowMs, ...change });
      if (outcome.kind === 'changed') return { job: outcome.job, created: false, changed: true };
    }
    throw new TicklerError('unavailable', `the job with key ${JSON.stringify(key.slice(0, 80))} kept changing under ${jobChangeAttemptsCountMax} attempts; retry`);
  }

  /** What an upsert changes in `job`, or null when it already is as asked. */
  private upsertChange(job: JobRecord, body: JobCreateInput, paused: boolean | undefined, nowMs: number):
    { spec: JobRecord['spec']; state: JobState; requestHash: string; timer: TimerWrite | null | 'keep' } | null {
    const { spec, schedule } = specFromCreate(body, this.specContext(nowMs));
    const recurring = 'cron' in spec.schedule;
    let state: JobState = job.state;
    if (job.state === 'cancelled') state = paused === true ? 'paused' : 'active';
    else if (paused !== undefined && job.state !== 'done') state = paused ? 'paused' : 'active';
    else if (job.state === 'paused' && !recurring) state = 'active';
    const sameSpec = stableStringify(spec) === stableStringify(job.spec);
    if (sameSpec && state === job.state) return null;
    if (job.state === 'done') {
      throw new TicklerError('invalid_state', `job ${job.jobId} under this key is done; a changed one-shot job needs a new key`);
    }
    const timingChanged = stableStringify([spec.schedule, spec.tolerance_s, spec.dst]) !==
      stableStringify([job.spec.schedule, job.spec.tolerance_s, job.spec.dst]);
    let timer: TimerWrite | null | 'keep' = 'keep';
    if (state !== 'active') timer = state === job.state ? 'keep' : null;
    else if (job.state !== 'active' || timingChanged) timer = firstTimer(job.jobId, spec, schedule, nowMs);
    return { spec, state, requestHash: requestHashOf(body), timer };
  }

  async get(scope: TeamScope, jobId: string): Promise<JobRecord> {
    const job = await this.deps.store.getJob(scope, jobId);
    if (job === null) throw notFound('job', jobId);
    return job;
  }

  list(filter: JobListFilter): Promise<Page<JobRecord>> {
    return this.deps.store.listJobs(filter);
  }

  /**
   * Jobs whose last success is older than their `max_silence_s`, now (the dead man's switch),
   * a page of `limit` after `cursor` (an opaque text from the previous page).
   */
  async silent(scope: TeamScope, limit: number, cursor?: string): Promise<Page<SilentJob>> {
    const key = cursor === undefined ? undefined : decodeCursor(cursor);
    const after = key === undefined ? undefined : { silentSinceMs: key.timeMs, jobId: key.id };
    const found = await this.deps.store.findSilentJobs(scope, this.deps.clock.nowMs(), limit + 1, after);
    const items = found.slice(0, limit);
    const last = items.at(-1);
    const nextCursor = found.length > limit && last !== undefined
      ? encodeCursor(last.silentSinceMs, last.job.jobId)
      : null;
    return { items, nextCursor };
  }

  /** Schedule, payload or policies; the pending timer is replaced in the same transaction. */
  patch(scope: TeamScope, jobId: string, patch: JobPatchInput): Promise<JobRecord> {
    return this.changeWithRetry(scope, jobId, (job, nowMs) => {
      if (job.state === 'cancelled' || job.state === 'done') {
        throw new TicklerError('invalid_state', `job ${jobId} is ${job.state}; create a new job instead`);
      }
      const { spec, schedule, timingChanged } = specFromPatch(job.spec, patch, this.specContext(nowMs));
      const recurringChanged = ('cron' in spec.schedule) !== ('cron' in job.spec.schedule);
      if (job.state === 'paused' && recurringChanged) {
        throw new TicklerError('invalid_state', 'a paused job keeps a recurring schedule; resume it first', { field: 'schedule' });
      }
      const timer: TimerWrite | null | 'keep' =
        job.state === 'active' && timingChanged ? firstTimer(job.jobId, spec, schedule, nowMs) : 'keep';
      return { spec, timer };
    }, (job, nowMs) => this.refuseFiredOneShot(scope, job, nowMs));
  }

  /**
   * A one-shot job whose occurrence has fired is done, though its record may say `active` a
   * while longer: a herd's runs are written ahead and their jobs finished
   * `finishAheadDelayMs` after the instant (src/limits.ts). Its run in the ledger is what says
   * so; a PATCH then would fire a second occurrence, so it is refused as for a done job.
   */
  private async refuseFiredOneShot(scope: TeamScope, job: JobRecord, nowMs: number): Promise<void> {
    if (job.state !== 'active' || !('at' in job.spec.schedule) || job.nextScheduledAtMs === null) return;
    if (job.nextFireAtMs === null || job.nextFireAtMs > nowMs) return;
    const run = await this.deps.store.getRun(scope, runIdOf(job.jobId, job.nextScheduledAtMs));
    if (run !== null) {
      throw new TicklerError('invalid_state', `job ${job.jobId} is done: its run ${run.runId} came due; create a new job instead`);
    }
  }

  async cancel(scope: TeamScope, jobId: string): Promise<JobRecord> {
    const nowMs = this.deps.clock.nowMs();
    const job = await this.deps.store.cancelJob(scope, jobId, nowMs);
    if (job === null) throw notFound('job', jobId);
    this.countCancelled([job], nowMs);
    return job;
  }

  /**
   * Chargeback's cancels (`tickler_jobs_cancelled_total{team}`): a job the call cancelled
   * carries the call's time; one cancelled before answers as it was and is not counted again.
   */
  private countCancelled(jobs: readonly (JobRecord | null)[], nowMs: number): void {
    for (const job of jobs) {
      if (job !== null && job.state === 'cancelled' && job.updatedAtMs === nowMs) {
        this.deps.metrics.jobsCancelledTotal.inc({ team: this.deps.metrics.teamLabel(job.team) });
      }
    }
  }

  /**
   * `cancel` for each id, in one transaction, answered in order: the job, or the item's own
   * not_found (an unknown id, or another team's job).
   */
  async cancelMany(scope: TeamScope, jobIds: readonly string[]): Promise<(JobRecord | TicklerError)[]> {
    const nowMs = this.deps.clock.nowMs();
    const jobs = await this.deps.store.cancelJobs(scope, jobIds, nowMs);
    this.countCancelled([...new Set(jobs)], nowMs);
    return jobs.map((job, index) => job ?? notFound('job', jobIds[index]!));
  }

  async cancelByKeyPrefix(team: string, keyPrefix: string): Promise<number> {
    const cancelled = await this.deps.store.cancelJobsByKeyPrefix(team, keyPrefix, this.deps.clock.nowMs());
    if (cancelled > 0) this.deps.metrics.jobsCancelledTotal.inc({ team: this.deps.metrics.teamLabel(team) }, cancelled);
    return cancelled;
  }

  /** Only an active recurring job pauses; its pending timer goes away with the pause. */
  pause(scope: TeamScope, jobId: string): Promise<JobRecord> {
    return this.changeWithRetry(scope, jobId, (job) => {
      if (job.state !== 'active' || !('cron' in job.spec.schedule)) {
        throw new TicklerError('invalid_state', `only an active recurring job can be paused; job ${jobId} is ${describe(job)}`);
      }
      return { state: 'paused', timer: null };
    });
  }

  /**
   * A paused job gets a new pending timer. By default it is the first occurrence after
   * now: a pause is deliberate, so what it covered is not owed. With `catch_up: all` the
   * owner asked for every occurrence, so the timer starts at the first occurrence after the
   * moment of the pause (`updatedAtMs`, which the pause wrote and nothing else changes
   * while paused) and the scheduler's firing plan works the backlog off in order, bounded
   * by `catch_up_window_s`.
   */
  resume(scope: TeamScope, jobId: string): Promise<JobRecord> {
    return this.changeWithRetry(scope, jobId, (job, nowMs) => {
      if (job.state !== 'paused') {
        throw new TicklerError('invalid_state', `only a paused job can be resumed; job ${jobId} is ${job.state}`);
      }
      const schedule = compileSchedule(job.spec.schedule, job.spec.dst);
      const fromMs = job.spec.catch_up === 'all' ? Math.min(job.updatedAtMs, nowMs) : nowMs;
      return { state: 'active', timer: firstTimer(job.jobId, job.spec, schedule, fromMs) };
    });
  }

  /** One run now, outside the schedule; a cancelled job has nothing left to run. */
  async trigger(scope: TeamScope, jobId: string): Promise<RunRecord> {
    const job = await this.get(scope, jobId);
    if (job.state === 'cancelled') throw new TicklerError('invalid_state', `job ${jobId} is cancelled`);
    const run = await this.deps.store.triggerJob(scope, jobId, this.deps.clock.nowMs());
    if (run === null) throw notFound('job', jobId);
    return run;
  }

  private async changeWithRetry(
    scope: TeamScope,
    jobId: string,
    compute: (job: JobRecord, nowMs: number) => { spec?: JobChange['spec']; state?: JobState; timer: JobChange['timer'] },
    /** A check that needs the store, on the same read of the job as `compute`. */
    precheck?: (job: JobRecord, nowMs: number) => Promise<void>,
  ): Promise<JobRecord> {
    for (let attempt = 1; attempt <= jobChangeAttemptsCountMax; attempt++) {
      const job = await this.get(scope, jobId);
      const nowMs = this.deps.clock.nowMs();
      await precheck?.(job, nowMs);
      const change = compute(job, nowMs);
      const outcome = await this.deps.store.changeJob({
        team: scope, jobId, expectedVersion: job.version, nowMs, ...change,
      });
      if (outcome.kind === 'changed') return outcome.job;
      if (outcome.kind === 'not_found') throw notFound('job', jobId);
    }
    throw new TicklerError('unavailable', `job ${jobId} kept changing under ${jobChangeAttemptsCountMax} attempts; retry`);
  }
}

function describe(job: JobRecord): string {
  return 'cron' in job.spec.schedule ? job.state : `a one-shot job (${job.state})`;
}

export function notFound(noun: string, id: string): TicklerError {
  // Ids may be hostile (NUL, newlines, 10 kB): quote and cut them before they reach a message.
  return new TicklerError('not_found', `no ${noun} ${JSON.stringify(id.slice(0, 80))}`);
}
