/**
 * Operations (API.md "Operations", "Virtual clock"): liveness and readiness without a key,
 * Prometheus metrics and the virtual clock for admins (open in development mode), the
 * OpenAPI document.
 */
import { Type } from 'typebox';
import type { FastifyInstance } from 'fastify';
import { TicklerError } from '../errors.js';
import type { App, ApiContext } from './context.js';
import { ClockAdvanceBody, ReadinessAnswer, StatusAnswer } from './schemas.js';
import { openApiDocument } from './openapi.js';
import { iso } from './wire.js';

const NowAnswer = Type.Object({ now: Type.String() });

export function registerOperationRoutes(app: App, context: ApiContext): void {
  const { deps } = context;

  app.get('/healthz', { config: { auth: 'none', doc: { summary: 'liveness', answers: { 200: StatusAnswer } } } }, async () => ({ status: 'ok' }));

  app.get('/readyz', { config: { auth: 'none', doc: { summary: 'readiness: store reachable, shards owned', answers: { 200: ReadinessAnswer, 503: ReadinessAnswer } } } },
    async (_request, reply) => {
      const readiness = await deps.readiness();
      return reply.code(readiness.ready ? 200 : 503).send({ ready: readiness.ready, ...readiness.detail });
    });

  app.get('/metrics', {
    config: { auth: 'admin', doc: { summary: 'Prometheus text', answers: { 200: { contentType: 'text/plain' } } } },
  }, async (_request, reply) => {
    const text = await deps.metrics.registry.metrics();
    return reply.type(deps.metrics.registry.contentType).send(text);
  });

  app.get('/openapi.json', { config: { auth: 'none', doc: { summary: 'this contract as OpenAPI 3.1', answers: { 200: Type.Object({}, { additionalProperties: true }) } } } },
    async () => openApiDocument(app as unknown as FastifyInstance));

  app.get('/v1/clock', { config: { auth: 'admin', doc: { summary: 'virtual time (only with --virtual-clock)', answers: { 200: NowAnswer } } } },
    async () => {
      requireVirtualClock(context);
      return { now: iso(deps.clock.nowMs()) };
    });

  app.post('/v1/clock/advance', {
    schema: { body: ClockAdvanceBody },
    config: { auth: 'admin', doc: { summary: 'move virtual time; answers once everything due has happened', answers: { 200: NowAnswer } } },
  }, async (request) => {
    const clock = requireVirtualClock(context);
    const nowMs = await clock.advance(Math.round(request.body.seconds * 1000));
    return { now: iso(nowMs) };
  });
}

function requireVirtualClock(context: ApiContext) {
  const clock = context.deps.virtualClock;
  // Without --virtual-clock these routes do not exist (API.md "Virtual clock").
  if (clock === null) throw new TicklerError('not_found', 'the clock routes exist only with --virtual-clock');
  return clock;
}
