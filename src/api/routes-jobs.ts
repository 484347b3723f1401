/**
 * Jobs (API.md "Jobs"): create (one or a batch), list, get, change, cancel, pause, resume,
 * trigger, and the schedule preview.
 */
import { Compile } from 'typebox/compile';
import { TicklerError } from '../errors.js';
import * as limits from '../limits.js';
import type { App, ApiContext } from './context.js';
import {
  CancelByPrefixQuery,
  CancelledCountAnswer,
  JobAnswer,
  JobBatchAnswer,
  UpsertAnswer,
  JobCancelBatchAnswer,
  PreviewAnswer,
  JobBatchBody,
  JobCancelBatchBody,
  JobCreateBody,
  JobIdParams,
  JobKeyParams,
  JobListQuery,
  JobPatchBody,
  PreviewQuery,
  RunAnswer,
  RunListQuery,
  SilentJobsAnswer,
  SilentJobsQuery,
  TeamQuery,
  JobUpsertBody,
  UpsertQuery,
  listAnswer,
} from './schemas.js';
import { scopeOf, teamOf } from './auth.js';
import { arrayItemTexts } from './json-body.js';
import { schemaIssueToError } from './http-errors.js';
import { iso, isoOrNull, joinedUtf8, jobToWire, jobWireJson, runToWire } from './wire.js';
import { assertEmptyBody, callerOf, checkId, instantOf, jsonType, limitOf, pageToWire } from './route-helpers.js';
import type { CreateItem, CreateResult } from '../service/job-service.js';
import type { JobRecord } from '../domain/types.js';
import { previewSchedule } from '../service/schedule-preview.js';

const checkCreateBody = Compile(JobCreateBody);

export function registerJobRoutes(app: App, context: ApiContext): void {
  registerCreateRoutes(app, context);
  registerReadRoutes(app, context);
  registerChangeRoutes(app, context);
  registerPreviewRoute(app, context);
}

function registerCreateRoutes(app: App, { jobs }: ApiContext): void {
  app.post('/v1/jobs', {
    schema: { body: JobCreateBody, querystring: TeamQuery },
    config: { doc: { summary: 'create a job (200 with the existing job when key and body repeat)', answers: { 201: JobAnswer, 200: JobAnswer }, errors: [409] } },
  }, async (request, reply) => {
    const team = teamOf(callerOf(request), request.query.team);
    const [result] = await jobs.create(team, [{ body: request.body, rawText: request.rawBody ?? JSON.stringify(request.body) }]);
    if (result === undefined) throw new Error('create answered no result');
    if (result.kind === 'error') throw result.error;
    return reply.code(result.kind === 'created' ? 201 : 200).type(jsonType).send(jobWireJson(result.job));
  });

  app.put('/v1/jobs/by-key/:key', {
    schema: { params: JobKeyParams, body: JobUpsertBody, querystring: UpsertQuery },
    config: {
      doc: {
        summary: 'create the job with this key, or replace its definition (201 or 200, with whether anything changed)',
        answers: { 201: UpsertAnswer, 200: UpsertAnswer }, errors: [409],
      },
    },
  }, async (request, reply) => {
    const team = teamOf(callerOf(request), request.query.team);
    const result = await jobs.upsertByKey(team, request.params.key, request.body, request.query.dry_run === true);
    return reply.code(result.created ? 201 : 200).type(jsonType)
      .send(`{"job":${jobWireJson(result.job)},"created":${result.created},"changed":${result.changed}}`);
  });

  app.post('/v1/jobs::batch', {
    bodyLimit: limits.batchRequestBodyBytesMax,
    schema: { body: JobBatchBody, querystring: TeamQuery },
    config: { doc: { summary: 'create up to 1,000 jobs; each item answers for itself, in order', answers: { 200: JobBatchAnswer } } },
  }, async (request, reply) => {
    const team = teamOf(callerOf(request), request.query.team);
    // Only a keyed item's text is ever hashed (JobService.create): a batch without keys need
    // not be cut into item texts.
    const keyed = request.body.jobs.some((item) => typeof item === 'object' && item !== null && 'key' in item);
    const texts = !keyed || request.rawBody === null ? null : arrayItemTexts(request.rawBody, 'jobs');
    const invalid: (CreateResult | null)[] = [];
    const valid: CreateItem[] = [];
    request.body.jobs.forEach((item, index) => {
      if (checkCreateBody.Check(item)) {
        valid.push({ body: item, rawText: texts?.[index] ?? (item.key === undefined ? '' : JSON.stringify(item)) });
        invalid.push(null);
      } else {
        invalid.push({ kind: 'error', error: schemaIssueToError(checkCreateBody.Errors(item)) });
      }
    });
    const prepared = jobs.prepareCreates(team, valid, request.body.answer === 'id' ? 'id' : 'job');
    const committing = jobs.commitCreates(prepared);
    // `answer: "id"` leaves the job out of each accepted item: a bulk load that needs only the
    // ids is spared building, sending and parsing ~500 bytes of job per item.
    if (request.body.answer === 'id') {
      const results = withItemErrors(invalid, await committing);
      return reply.type(jsonType).send(joinedUtf8('{"results":[', results, batchIdAnswerOf, ']}'));
    }
    // Awaited below; marked handled now, as it may fail before then.
    committing.catch(() => undefined);
    // The store commits on the next turn of the loop and answers once the commit's fsync is
    // done. The answer is built in that wait, from the results expected of a commit (every
    // job created as prepared), so a batch on one connection no longer waits for the disk
    // and then for its ~1 us a job of answer text. If the store answered anything else (a
    // key already taken, say), the whole answer is built again after.
    await new Promise<void>((resolve) => setImmediate(resolve));
    const expected = withItemErrors(invalid, jobs.expectedResults(prepared));
    const expectedBytes = joinedUtf8('{"results":[', expected, batchAnswerOf, ']}');
    const results = withItemErrors(invalid, await committing);
    const asExpected = results.every((result, index) => sameResult(result, expected[index]!));
    // As bytes: a string answer is measured (Buffer.byteLength) and then encoded again to be
    // written, twice over half a megabyte for a batch of 1,000.
    return reply.type(jsonType).send(asExpected ? expectedBytes : joinedUtf8('{"results":[', results, batchAnswerOf, ']}'));
  });
}

/** The items' schema errors where they failed, the service's results in between, in order. */
function withItemErrors(invalid: readonly (CreateResult | null)[], results: readonly CreateResult[]): CreateResult[] {
  let next = 0;
  return invalid.map((result) => result ?? results[next++]!);
}

/** The same error, or the same kind of result for the very record (so the same answer text). */
function sameResult(result: CreateResult, expected: CreateResult): boolean {
  if (result === expected) return true;
  return result.kind !== 'error' && expected.kind !== 'error' && result.kind === expected.kind && result.job === expected.job;
}

/** One item of `{"results": [...]}`, written out by hand: a job's text comes from jobWireJson. */
function batchAnswerOf(result: CreateResult): string {
  return result.kind === 'error'
    ? itemErrorJson(result.error)
    : `{"status":${result.kind === 'created' ? 201 : 200},"job":${jobWireJson(result.job)}}`;
}

/** As batchAnswerOf, with `answer: "id"`: an accepted item carries the job's id alone. */
function batchIdAnswerOf(result: CreateResult): string {
  return result.kind === 'error'
    ? itemErrorJson(result.error)
    : `{"status":${result.kind === 'created' ? 201 : 200},"job_id":${JSON.stringify(result.job.jobId)}}`;
}

function cancelAnswerOf(result: JobRecord | TicklerError): string {
  return result instanceof TicklerError ? itemErrorJson(result) : `{"status":200,"job":${jobWireJson(result)}}`;
}

/** As cancelAnswerOf, with `answer: "status"`: a cancelled item carries its status alone. */
function cancelStatusAnswerOf(result: JobRecord | TicklerError): string {
  return result instanceof TicklerError ? itemErrorJson(result) : '{"status":200}';
}

function itemErrorJson(error: TicklerError): string {
  return JSON.stringify({ status: error.status, ...error.toBody() });
}

function registerReadRoutes(app: App, { jobs, runs }: ApiContext): void {
  app.get('/v1/jobs', {
    schema: { querystring: JobListQuery },
    config: { doc: { summary: 'list jobs, newest first', answers: { 200: listAnswer(JobAnswer) } } },
  }, async (request) => {
    const { team, limit, key_prefix: keyPrefix, ...filters } = request.query;
    const page = await jobs.list({ ...filters, ...(keyPrefix === undefined ? {} : { keyPrefix }),
      team: scopeOf(callerOf(request), team), limit: limitOf(limit) });
    return pageToWire(page, jobToWire);
  });

  app.get('/v1/jobs::silent', {
    schema: { querystring: SilentJobsQuery },
    config: {
      doc: {
        summary: 'the dead man\'s switch: active jobs whose last success is older than their max_silence_s, longest silent first',
        answers: { 200: SilentJobsAnswer },
      },
    },
  }, async (request) => {
    const { team, limit, cursor } = request.query;
    const page = await jobs.silent(scopeOf(callerOf(request), team), limitOf(limit), cursor);
    return pageToWire(page, ({ job, lastSuccessAtMs, silentSinceMs }) => ({
      job: jobToWire(job), last_success_at: isoOrNull(lastSuccessAtMs), silent_since: iso(silentSinceMs),
    }));
  });

  app.get('/v1/jobs/:job_id', {
    schema: { params: JobIdParams, querystring: TeamQuery },
    config: { doc: { summary: 'one job', answers: { 200: JobAnswer } } },
  }, async (request) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    return jobToWire(await jobs.get(scope, checkId(request.params.job_id, 'job')));
  });

  app.get('/v1/jobs/:job_id/runs', {
    schema: { params: JobIdParams, querystring: RunListQuery },
    config: { doc: { summary: 'the job\'s occurrences, newest first', answers: { 200: listAnswer(RunAnswer) } } },
  }, async (request) => {
    const { team, since, until, limit, ...filters } = request.query;
    const scope = scopeOf(callerOf(request), team);
    const job = await jobs.get(scope, checkId(request.params.job_id, 'job'));
    const page = await runs.list({
      ...filters, team: scope, jobId: job.jobId, limit: limitOf(limit),
      sinceMs: instantOf(since, 'since'), untilMs: instantOf(until, 'until'),
    });
    return pageToWire(page, runToWire);
  });
}

function registerChangeRoutes(app: App, { jobs }: ApiContext): void {
  app.delete('/v1/jobs', {
    schema: { querystring: CancelByPrefixQuery },
    config: { doc: { summary: 'cancel every job of the team whose key starts with key_prefix', answers: { 200: CancelledCountAnswer } } },
  }, async (request) => {
    const caller = callerOf(request);
    if (caller.admin && request.query.team === undefined) {
      throw new TicklerError('invalid_request', 'an admin names the team whose jobs to cancel', { field: 'team' });
    }
    return { cancelled: await jobs.cancelByKeyPrefix(teamOf(caller, request.query.team), request.query.key_prefix) };
  });

  app.post('/v1/jobs::cancel', {
    bodyLimit: limits.batchRequestBodyBytesMax,
    schema: { body: JobCancelBatchBody, querystring: TeamQuery },
    config: { doc: { summary: 'cancel up to 1,000 jobs by id, in one transaction; each item answers for itself, in order', answers: { 200: JobCancelBatchAnswer } } },
  }, async (request, reply) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    // An id of no possible job's shape is its item's not_found, as the single route answers it.
    const checked = request.body.job_ids.map((jobId): string | TicklerError => {
      try {
        return checkId(jobId, 'job');
      } catch (error) {
        if (error instanceof TicklerError) return error;
        throw error;
      }
    });
    const valid = checked.filter((item): item is string => typeof item === 'string');
    const outcomes = valid.length === 0 ? [] : await jobs.cancelMany(scope, valid);
    let next = 0;
    const results = checked.map((item) => (typeof item === 'string' ? outcomes[next++]! : item));
    const itemOf = request.body.answer === 'status' ? cancelStatusAnswerOf : cancelAnswerOf;
    return reply.type(jsonType).send(joinedUtf8('{"results":[', results, itemOf, ']}'));
  });

  app.patch('/v1/jobs/:job_id', {
    schema: { params: JobIdParams, body: JobPatchBody, querystring: TeamQuery },
    config: { doc: { summary: 'change schedule, payload or policies; the pending timer is replaced atomically', answers: { 200: JobAnswer }, errors: [409] } },
  }, async (request) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    return jobToWire(await jobs.patch(scope, checkId(request.params.job_id, 'job'), request.body));
  });

  app.delete('/v1/jobs/:job_id', {
    schema: { params: JobIdParams, querystring: TeamQuery },
    config: { doc: { summary: 'cancel all future occurrences; idempotent', answers: { 200: JobAnswer } } },
  }, async (request) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    return jobToWire(await jobs.cancel(scope, checkId(request.params.job_id, 'job')));
  });

  const transitions = { pause: 'pause', resume: 'resume' } as const;
  for (const action of Object.values(transitions)) {
    app.post(`/v1/jobs/:job_id/${action}`, {
      schema: { params: JobIdParams, querystring: TeamQuery },
      config: { doc: { summary: `${action} a recurring job (no body, or {})`, answers: { 200: JobAnswer }, errors: [409] } },
    }, async (request) => {
      assertEmptyBody(request.body);
      const scope = scopeOf(callerOf(request), request.query.team);
      const jobId = checkId(request.params.job_id, 'job');
      return jobToWire(action === 'pause' ? await jobs.pause(scope, jobId) : await jobs.resume(scope, jobId));
    });
  }

  app.post('/v1/jobs/:job_id/trigger', {
    schema: { params: JobIdParams, querystring: TeamQuery },
    config: { doc: { summary: 'run it now, once, outside its schedule (no body, or {})', answers: { 201: RunAnswer }, errors: [409] } },
  }, async (request, reply) => {
    assertEmptyBody(request.body);
    const scope = scopeOf(callerOf(request), request.query.team);
    return reply.code(201).send(runToWire(await jobs.trigger(scope, checkId(request.params.job_id, 'job'))));
  });
}

function registerPreviewRoute(app: App, context: ApiContext): void {
  app.get('/v1/schedules/preview', {
    schema: { querystring: PreviewQuery },
    config: { doc: { summary: 'the next count scheduled times strictly after from, pre-jitter', answers: { 200: PreviewAnswer } } },
  }, async (request) => {
    const query = request.query;
    const items = withPreviewFields(() => previewSchedule({
      cron: query.cron,
      tz: query.tz ?? 'UTC',
      fromMs: instantOf(query.from, 'from') ?? context.deps.clock.nowMs(),
      count: query.count ?? 10,
      dst: { gap: query.gap ?? 'shift', repeat: query.repeat ?? 'first' },
    }));
    return { items };
  });
}

/** The preview takes `cron` and `tz` as query parameters, so errors name them so. */
function withPreviewFields<T>(compute: () => T): T {
  try {
    return compute();
  } catch (error) {
    if (error instanceof TicklerError && error.field?.startsWith('schedule.')) {
      throw new TicklerError(error.code, error.message, { field: error.field.slice('schedule.'.length), cause: error });
    }
    throw error;
  }
}
