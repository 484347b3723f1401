/**
 * What the web UI reads beyond API.md's core routes (docs/API.md, "The UI's routes"): who the
 * key belongs to, the teams an admin may pick, the occurrences due in a window and what became
 * of them, the overview, and replay of a selection of dead runs, rate-limited per team.
 */
import { Type, type TSchema } from 'typebox';
import { TicklerError } from '../errors.js';
import type { RunRecord } from '../domain/types.js';
import type { App, ApiContext } from './context.js';
import { JobListQuery, TeamQuery } from './schemas.js';
import { adminTeam, openModeTeam, scopeOf } from './auth.js';
import { checkId, callerOf, instantOf } from './route-helpers.js';
import { iso, isoOrNull, jobToWire, runToWire } from './wire.js';
import { fireLagMs, occurrencesInWindow, type Occurrence } from '../service/occurrences.js';
import { buildOverview, overviewLimits } from '../service/overview.js';
import { apiOccurrenceWindowDaysMax, apiReplayBurstCount, apiReplayRefillCountPerS } from '../limits.js';

const dayMs = 86_400_000;
const instant = Type.String({ maxLength: 64 });

const OccurrencesQuery = Type.Object({
  since: instant,
  until: Type.Optional(instant),
  job_id: Type.Optional(Type.String({ minLength: 1, maxLength: 1024 })),
  key_prefix: JobListQuery.properties.key_prefix,
  pool: JobListQuery.properties.pool,
  late_s: Type.Optional(Type.Integer({ minimum: 0, maximum: 86_400 })),
  team: TeamQuery.properties.team,
}, { additionalProperties: false });

const ReplayBatchBody = Type.Object({
  run_ids: Type.Array(Type.String(), { minItems: 1, maxItems: apiReplayBurstCount }),
}, { additionalProperties: false });

const loose = (properties: Record<string, TSchema>, description?: string) =>
  Type.Object(properties, { additionalProperties: true, ...(description === undefined ? {} : { description }) });
const WhoamiAnswer = Type.Object({ team: Type.String(), admin: Type.Boolean(), open: Type.Boolean(), now: Type.String() });
const TeamsAnswer = Type.Object({ items: Type.Array(Type.String()) });
const OccurrencesAnswer = loose({ items: Type.Array(loose({})) }, 'per job: its expected occurrences in the window and what became of each (docs/API.md)');
const OverviewAnswer = loose({}, 'fire lag, due ahead, backlog per pool, failing runs, silent jobs (docs/API.md)');
const ReplayBatchAnswer = Type.Object({ results: Type.Array(loose({ status: Type.Integer() })) });

export function registerUiDataRoutes(app: App, context: ApiContext): void {
  const { deps } = context;

  app.get('/v1/whoami', {
    config: { doc: { summary: 'the caller: its team, whether it is an admin, whether the server runs open (no keys), and the server\'s now', answers: { 200: WhoamiAnswer } } },
  }, async (request) => {
    const caller = callerOf(request);
    return { team: caller.team, admin: caller.admin, open: deps.config.apiKeys === null, now: iso(deps.clock.nowMs()) };
  });

  app.get('/v1/teams', {
    config: { auth: 'admin', doc: { summary: 'the teams the configured keys name (admin)', answers: { 200: TeamsAnswer } } },
  }, async () => {
    const keys = deps.config.apiKeys;
    const teams = keys === null ? [openModeTeam] : [...new Set(keys.values())].filter((team) => team !== adminTeam);
    return { items: teams.sort() };
  });

  app.get('/v1/occurrences', {
    schema: { querystring: OccurrencesQuery },
    config: { doc: { summary: 'every occurrence due in a window, per job, and what became of it; missed, failed and late first', answers: { 200: OccurrencesAnswer } } },
  }, async (request) => {
    const query = request.query;
    const scope = scopeOf(callerOf(request), query.team);
    const nowMs = deps.clock.nowMs();
    const sinceMs = instantOf(query.since, 'since')!;
    const untilMs = instantOf(query.until, 'until') ?? nowMs;
    if (untilMs <= sinceMs) throw new TicklerError('invalid_request', 'until must be after since', { field: 'until' });
    if (untilMs - sinceMs > apiOccurrenceWindowDaysMax * dayMs) {
      throw new TicklerError('invalid_request', `a window spans at most ${apiOccurrenceWindowDaysMax} days`, { field: 'until' });
    }
    if (query.job_id !== undefined) await context.jobs.get(scope, checkId(query.job_id, 'job'));
    const window = await occurrencesInWindow(deps.store, {
      team: scope, sinceMs, untilMs, nowMs, jobId: query.job_id, keyPrefix: query.key_prefix, pool: query.pool,
      lateAfterMs: (query.late_s ?? 60) * 1000,
    });
    return {
      since: iso(sinceMs), until: iso(untilMs), now: iso(nowMs), truncated: window.truncated,
      items: window.rows.map((row) => ({
        job: row.job === null ? null : jobToWire(row.job), pool: row.pool,
        total: row.total, missed: row.missed, failed: row.failed, late: row.late, counts: row.counts,
        truncated: row.truncated, occurrences: row.occurrences.map(occurrenceToWire),
      })),
    };
  });

  app.get('/v1/overview', {
    schema: { querystring: TeamQuery },
    config: { doc: { summary: 'fire lag of the last hour, occurrences due ahead, backlog per pool, failing runs, silent jobs', answers: { 200: OverviewAnswer } } },
  }, async (request) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    const overview = await buildOverview({
      store: deps.store, metrics: deps.metrics, team: scope, nowMs: deps.clock.nowMs(),
      silent: async () => (await context.jobs.silent(scope, overviewLimits.silentListed)).items,
    });
    const seconds = (ms: number | null) => (ms === null ? null : ms / 1000);
    return {
      now: iso(overview.nowMs),
      fire_lag: {
        count: overview.fireLag.count, p50_s: seconds(overview.fireLag.p50Ms), p99_s: seconds(overview.fireLag.p99Ms),
        capped: overview.fireLag.capped,
        per_minute: overview.fireLag.perMinute.map((minute) => ({
          minute: iso(minute.minuteMs), count: minute.count, p50_s: minute.p50Ms / 1000, p99_s: minute.p99Ms / 1000,
        })),
      },
      due_ahead: {
        capped: overview.dueAhead.capped,
        per_minute: overview.dueAhead.perMinute.map((minute) => ({ minute: iso(minute.minuteMs), count: minute.count })),
      },
      backlog: { capped: overview.backlogCapped, items: overview.backlog.map((pool) => ({
        pool: pool.pool, ready: pool.ready, running: pool.running, retry_wait: pool.retryWait })) },
      failing: {
        dead_last_day: overview.failing.deadLastDay, retry_wait: overview.failing.retryWait, capped: overview.failing.capped,
        latest: overview.failing.latest.map(runToWire),
      },
      silent: overview.silent.map(({ job, lastSuccessAtMs, silentSinceMs }) => ({
        job: jobToWire(job), last_success_at: isoOrNull(lastSuccessAtMs), silent_since: iso(silentSinceMs),
      })),
      stale_tokens: overview.staleTokens,
    };
  });

  const buckets = new Map<string, { tokens: number; atMs: number }>();
  app.post('/v1/runs::replay', {
    schema: { body: ReplayBatchBody, querystring: TeamQuery },
    config: { doc: { summary: `replay up to ${apiReplayBurstCount} dead runs, rate-limited per team; each item answers for itself, in order`, answers: { 200: ReplayBatchAnswer }, errors: [429] } },
  }, async (request, reply) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    const ids = request.body.run_ids;
    const nowMs = deps.clock.nowMs();
    const bucketKey = scope ?? '';
    const bucket = buckets.get(bucketKey) ?? { tokens: apiReplayBurstCount, atMs: nowMs };
    bucket.tokens = Math.min(apiReplayBurstCount, bucket.tokens + ((nowMs - bucket.atMs) / 1000) * apiReplayRefillCountPerS);
    bucket.atMs = nowMs;
    buckets.set(bucketKey, bucket);
    if (bucket.tokens < ids.length) {
      void reply.header('retry-after', String(Math.max(1, Math.ceil((ids.length - bucket.tokens) / apiReplayRefillCountPerS))));
      throw new TicklerError('rate_limited',
        `replays are limited to ${apiReplayRefillCountPerS}/s per team (bursts of ${apiReplayBurstCount}); ${Math.floor(bucket.tokens)} may start now`);
    }
    bucket.tokens -= ids.length;
    const results: unknown[] = [];
    for (const runId of ids) {
      try {
        results.push({ status: 200, run: runToWire(await context.runs.replay(scope, checkId(runId, 'run'))) });
      } catch (error) {
        if (!(error instanceof TicklerError)) throw error;
        results.push({ status: error.status, ...error.toBody() });
      }
    }
    return { results };
  });
}

function occurrenceToWire(occurrence: Occurrence): Record<string, unknown> {
  const run: RunRecord | null = occurrence.run;
  const lag = run === null ? null : fireLagMs(run);
  return {
    scheduled_at: iso(occurrence.scheduledAtMs), status: occurrence.status, expected: occurrence.expected, late: occurrence.late,
    run_id: run?.runId ?? null, fire_at: run === null ? null : iso(run.fireAtMs), dispatched_at: isoOrNull(run?.dispatchedAtMs ?? null),
    fire_lag_s: lag === null ? null : lag / 1000, attempt: run?.attempt ?? null, finished_at: isoOrNull(run?.finishedAtMs ?? null),
    last_error: run?.lastError ?? null,
  };
}
