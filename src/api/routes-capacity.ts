/**
 * Capacity (API.md "Capacity"): resource caps, pool pauses, lane dispatch caps and the noisy
 * neighbours. Every lever acts in the store, so it holds on every node at once; the lease
 * planner (src/service/lease-planner.ts) and each store's lease gates apply them.
 */
import { Type } from 'typebox';
import * as limits from '../limits.js';
import type { Lane } from '../domain/types.js';
import { allTeamsPause, type ResourceUsage } from '../store/store.js';
import { notFound } from '../service/job-service.js';
import type { App, ApiContext } from './context.js';
import { scopeOf } from './auth.js';
import { assertEmptyBody, callerOf } from './route-helpers.js';
import { TeamQuery } from './schemas.js';
import { iso } from './wire.js';

const strict = { additionalProperties: false } as const;
const printablePattern = '^[^\\u0000-\\u001f\\u007f]*$';
const namePattern = '^[A-Za-z0-9][A-Za-z0-9._:/-]*$';

const ResourceParams = Type.Object({
  name: Type.String({ minLength: 1, maxLength: limits.labelLengthMax, pattern: printablePattern }),
}, strict);
const ResourceBody = Type.Object({
  max_concurrency: Type.Integer({ minimum: 1, maximum: limits.resourceConcurrencyMax }),
}, strict);
const ResourceAnswer = Type.Object({
  name: Type.String(),
  max_concurrency: Type.Union([Type.Integer(), Type.Null()]),
  in_use: Type.Integer(),
});
const PoolParams = Type.Object({
  pool: Type.String({ minLength: 1, maxLength: limits.poolLengthMax, pattern: namePattern }),
}, strict);
const PauseAnswer = Type.Object({
  pool: Type.String(),
  paused: Type.Boolean(),
  /** The team paused, or null for every team (an admin's pause). */
  team: Type.Union([Type.String(), Type.Null()]),
});
const LaneParams = Type.Object({ lane: Type.Union([Type.Literal('P0'), Type.Literal('P1'), Type.Literal('P2')]) }, strict);
const LaneBody = Type.Object({
  dispatch_per_s: Type.Union([Type.Number({ exclusiveMinimum: 0, maximum: limits.laneDispatchPerSecondMax }), Type.Null()]),
}, strict);
const LaneAnswer = Type.Object({ lane: Type.String(), dispatch_per_s: Type.Union([Type.Number(), Type.Null()]) });
const NoisyAnswer = Type.Object({
  items: Type.Array(Type.Object({ lane: Type.String(), team: Type.String(), share: Type.Number(), since: Type.String() })),
});

function resourceToWire(usage: ResourceUsage): Record<string, unknown> {
  return { name: usage.name, max_concurrency: usage.maxConcurrency, in_use: usage.inUse };
}

export function registerCapacityRoutes(app: App, context: ApiContext): void {
  const { deps, planner } = context;
  const store = planner.store;

  app.get('/v1/resources', {
    config: { auth: 'admin', doc: { summary: 'every capped resource with its slots in use', answers: { 200: Type.Object({ items: Type.Array(ResourceAnswer) }) } } },
  }, async () => ({ items: (await store.resourceUsage()).map(resourceToWire) }));

  app.get('/v1/resources/:name', {
    schema: { params: ResourceParams },
    config: { auth: 'admin', doc: { summary: 'a resource: its cap (null: unlimited) and slots in use', answers: { 200: ResourceAnswer } } },
  }, async (request) => resourceToWire((await store.resourceUsage([request.params.name]))[0]!));

  app.put('/v1/resources/:name', {
    schema: { params: ResourceParams, body: ResourceBody },
    config: { auth: 'admin', doc: { summary: 'cap the runs holding the resource at once', answers: { 200: ResourceAnswer } } },
  }, async (request) => {
    await store.putResourceCap(request.params.name, request.body.max_concurrency, deps.clock.nowMs());
    return resourceToWire((await store.resourceUsage([request.params.name]))[0]!);
  });

  app.delete('/v1/resources/:name', {
    schema: { params: ResourceParams },
    config: { auth: 'admin', doc: { summary: 'remove the cap (the resource is unlimited again)', answers: { 200: ResourceAnswer }, errors: [404] } },
  }, async (request) => {
    if (!await store.deleteResourceCap(request.params.name)) throw notFound('resource cap', request.params.name);
    return resourceToWire((await store.resourceUsage([request.params.name]))[0]!);
  });

  for (const action of ['pause', 'resume'] as const) {
    app.post(`/v1/pools/:pool/${action}`, {
      schema: { params: PoolParams, querystring: TeamQuery },
      config: { doc: { summary: action === 'pause'
        ? 'stop leasing the team\'s runs in the pool (an admin without ?team=: every team\'s); timers still fire'
        : 'lease again (an admin without ?team=: lifts every pause of the pool)', answers: { 200: PauseAnswer } } },
    }, async (request) => {
      assertEmptyBody(request.body);
      const scope = scopeOf(callerOf(request), request.query.team);
      const { pool } = request.params;
      const paused = action === 'pause';
      if (scope === null && !paused) await store.clearPoolPauses(pool);
      else await store.setPoolPause(pool, scope ?? allTeamsPause, paused, deps.clock.nowMs());
      return { pool, paused, team: scope };
    });
  }

  app.get('/v1/lanes', {
    config: { auth: 'admin', doc: { summary: 'the dispatch caps of the lanes', answers: { 200: Type.Object({ items: Type.Array(LaneAnswer) }) } } },
  }, async () => {
    const caps = await store.listLaneDispatchCaps();
    return { items: (['P0', 'P1', 'P2'] as const).map((lane) => ({ lane, dispatch_per_s: caps.get(lane) ?? null })) };
  });

  app.put('/v1/lanes/:lane', {
    schema: { params: LaneParams, body: LaneBody },
    config: { auth: 'admin', doc: { summary: 'cap the runs handed out per second in a lane, on every node together (null: no cap)', answers: { 200: LaneAnswer } } },
  }, async (request) => {
    const lane = request.params.lane as Lane;
    await store.setLaneDispatchCap(lane, request.body.dispatch_per_s);
    return { lane, dispatch_per_s: request.body.dispatch_per_s };
  });

  app.get('/v1/ops/noisy-neighbours', {
    config: { auth: 'admin', doc: { summary: 'teams holding over half of a lane\'s leases on this node for 10 minutes', answers: { 200: NoisyAnswer } } },
  }, async () => ({
    items: planner.noisyNeighbours().map((noisy) => ({ lane: noisy.lane, team: noisy.team, share: noisy.share, since: iso(noisy.sinceMs) })),
  }));
}

