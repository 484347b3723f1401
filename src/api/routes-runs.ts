/**
 * Runs and workers (API.md "Runs", "Workers"): the ledger, the DLQ and replay, and the
 * worker calls lease (long-poll), heartbeat and complete, one run at a time or in batches.
 */
import * as limits from '../limits.js';
import type { App, ApiContext } from './context.js';
import { completeItems, heartbeatItems, leaseWaitRequestOf } from './worker-calls.js';
import {
  CompleteBatchAnswer,
  CompleteBatchBody,
  HeartbeatAnswer,
  HeartbeatBatchAnswer,
  LeaseAnswer,
  CompleteBody,
  HeartbeatBatchBody,
  DlqQuery,
  HeartbeatBody,
  LeaseBody,
  RunAnswer,
  RunIdParams,
  RunListQuery,
  TeamQuery,
  listAnswer,
} from './schemas.js';
import { scopeOf } from './auth.js';
import { iso, joinedUtf8, leasedRunWireJson, runToWire, runWithEventsToWire } from './wire.js';
import { assertEmptyBody, callerOf, checkId, instantOf, jsonType, limitOf, pageToWire } from './route-helpers.js';

export function registerRunRoutes(app: App, context: ApiContext): void {
  registerLedgerRoutes(app, context);
  registerWorkerRoutes(app, context);
  registerWorkerBatchRoutes(app, context);
}

/** The ledger: what ran, what failed, what is dead, and replay. */
function registerLedgerRoutes(app: App, { runs }: ApiContext): void {
  app.get('/v1/runs', {
    schema: { querystring: RunListQuery },
    config: { doc: { summary: 'the team\'s runs, newest first', answers: { 200: listAnswer(RunAnswer) } } },
  }, async (request) => {
    const { team, since, until, limit, ...filters } = request.query;
    const page = await runs.list({
      ...filters, team: scopeOf(callerOf(request), team), limit: limitOf(limit),
      sinceMs: instantOf(since, 'since'), untilMs: instantOf(until, 'until'),
    });
    return pageToWire(page, runToWire);
  });

  app.get('/v1/runs/:run_id', {
    schema: { params: RunIdParams, querystring: TeamQuery },
    config: { doc: { summary: 'one run with its events', answers: { 200: RunAnswer } } },
  }, async (request) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    const run = await runs.get(scope, checkId(request.params.run_id, 'run'));
    const waitingFor = await runs.waitingFor(scope, run);
    return { ...runWithEventsToWire(run), ...(waitingFor === null ? {} : { waiting_for: waitingFor }) };
  });

  app.get('/v1/dlq', {
    schema: { querystring: DlqQuery },
    config: { doc: { summary: 'dead runs', answers: { 200: listAnswer(RunAnswer) } } },
  }, async (request) => {
    const { team, limit, ...filters } = request.query;
    const page = await runs.list({ ...filters, team: scopeOf(callerOf(request), team), status: 'dead', limit: limitOf(limit) });
    return pageToWire(page, runToWire);
  });

  app.post('/v1/runs/:run_id/replay', {
    schema: { params: RunIdParams, querystring: TeamQuery },
    config: { doc: { summary: 'a dead run back to ready, same run_id, retry budget afresh (no body, or {})', answers: { 200: RunAnswer }, errors: [409] } },
  }, async (request) => {
    assertEmptyBody(request.body);
    const scope = scopeOf(callerOf(request), request.query.team);
    return runToWire(await runs.replay(scope, checkId(request.params.run_id, 'run')));
  });

}

/** The worker calls; every one is fenced by the attempt's token in the store. */
function registerWorkerRoutes(app: App, { runs, waiters, deps }: ApiContext): void {
  app.post('/v1/workers/lease', {
    schema: { body: LeaseBody, querystring: TeamQuery },
    config: { doc: { summary: 'lease ready runs of a pool, waiting up to wait_s for some', answers: { 200: LeaseAnswer } } },
  }, async (request, reply) => {
    const body = request.body;
    const client = new AbortController();
    // The response's `close` before it was sent means the worker went away: stop waiting for it.
    // (`close` also follows every response sent; aborting then built a DOMException per lease
    // request, 1–2 % of the server's CPU on bench:peers W2.)
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) client.abort();
    });
    const leased = await waiters.lease(leaseWaitRequestOf(body, scopeOf(callerOf(request), request.query.team), client.signal));
    if (leased.length > 0) {
      const nowMs = deps.clock.nowMs();
      for (const run of leased) deps.metrics.observeReadyLag(run, nowMs);
    }
    return reply.type(jsonType).send(joinedUtf8('{"runs":[', leased, leasedRunWireJson, ']}'));
  });

  app.post('/v1/runs/:run_id/heartbeat', {
    schema: { params: RunIdParams, body: HeartbeatBody, querystring: TeamQuery },
    config: { doc: { summary: 'extend the lease of a running attempt', answers: { 200: HeartbeatAnswer }, errors: [409] } },
  }, async (request) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    const leaseExpiresAtMs = await runs.heartbeat(scope, checkId(request.params.run_id, 'run'), request.body.fencing_token);
    return { lease_expires_at: iso(leaseExpiresAtMs) };
  });

  app.post('/v1/runs/:run_id/complete', {
    schema: { params: RunIdParams, body: CompleteBody, querystring: TeamQuery },
    config: { doc: { summary: 'record the outcome of the attempt holding the token', answers: { 200: RunAnswer }, errors: [409] } },
  }, async (request) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    const body = request.body;
    const run = await runs.complete(scope, checkId(request.params.run_id, 'run'), {
      fencingToken: body.fencing_token, status: body.status, error: body.error ?? null, result: body.result ?? null,
    });
    return runToWire(run);
  });
}

/**
 * The batch forms of heartbeat and complete (an extension of API.md, documented in
 * docs/API.md). A worker sends everything it has finished since its previous request in one
 * call; every item is fenced by its own token and answers for itself, in order, and the
 * store writes the whole batch in one group commit.
 */
function registerWorkerBatchRoutes(app: App, { runs, deps }: ApiContext): void {
  app.post('/v1/runs::complete', {
    bodyLimit: limits.batchRequestBodyBytesMax,
    schema: { body: CompleteBatchBody, querystring: TeamQuery },
    config: { doc: { summary: 'record the outcomes of up to 1,000 attempts; each item answers for itself, in order', answers: { 200: CompleteBatchAnswer } } },
  }, async (request) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    // `answer: status` leaves the run out of each accepted item: the SDK's worker reads nothing
    // of it, and building and sending the run was a tenth of the server's time per completion.
    const brief = request.body.answer === 'status';
    return { results: await completeItems(runs, scope, request.body.completions, !brief, { log: request.log, metrics: deps.metrics }) };
  });

  app.post('/v1/runs::heartbeat', {
    bodyLimit: limits.batchRequestBodyBytesMax,
    schema: { body: HeartbeatBatchBody, querystring: TeamQuery },
    config: { doc: { summary: 'extend the leases of up to 1,000 running attempts; each item answers for itself, in order', answers: { 200: HeartbeatBatchAnswer } } },
  }, async (request) => {
    const scope = scopeOf(callerOf(request), request.query.team);
    return { results: await heartbeatItems(runs, scope, request.body.heartbeats, { log: request.log, metrics: deps.metrics }) };
  });
}
