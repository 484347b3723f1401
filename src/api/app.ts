/**
 * The HTTP API (API.md), built by a factory that does not listen: the server wiring calls
 * `listen()`, tests call `app.inject()` (STYLE.md §5). Input is strict: unknown fields are
 * rejected, not stripped, and nothing is coerced in a body (`"5"` is not `5`); query
 * strings, which are text by nature, are converted to their declared types.
 *
 * Validation uses TypeBox's compiler rather than ajv: it checks the same JSON Schemas,
 * never removes properties and never coerces a body, which is the strictness asked of
 * ajv (`removeAdditional: false`, `coerceTypes: false`); the ajv options are still set to
 * those values in case a route ever falls back to ajv.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyReply, type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import * as limits from '../limits.js';
import { TicklerError } from '../errors.js';
import { JobService } from '../service/job-service.js';
import { RunService } from '../service/run-service.js';
import { LeaseWaiters } from '../service/lease-waiters.js';
import { LeasePlanner, p2ShareDefault } from '../service/lease-planner.js';
import { parseJsonBody } from './json-body.js';
import { validatorCompiler } from './validator.js';
import { capConnections, httpServerOptions } from './http-limits.js';
import { toTicklerError } from './http-errors.js';
import { resolveCaller } from './auth.js';
import type { ApiConfig, ApiContext, App, AppDeps } from './context.js';
import { registerJobRoutes } from './routes-jobs.js';
import { registerRunRoutes } from './routes-runs.js';
import { registerOperationRoutes } from './routes-operations.js';
import { registerOpenApi } from './openapi.js';
import { registerUiDataRoutes } from './routes-ui-data.js';
import { registerWebUi } from './web-ui.js';
import { registerCapacityRoutes } from './routes-capacity.js';
import { registerTeamRoutes } from './routes-teams.js';
import { TeamLimits, retryAfterSOf } from '../service/team-limits.js';

export type { ApiConfig, ApiContext, App, AppDeps } from './context.js';

export function defaultApiConfig(): ApiConfig {
  return { apiKeys: null, payloadBytesMax: limits.payloadBytesMax, cronToleranceDefaultS: limits.cronToleranceSecondsDefault };
}

export function buildApp(deps: AppDeps): FastifyInstance {
  const http = deps.config.http ?? limits.httpLimitsDefaults;
  limits.assertHttpLimits(http);
  const countError = (code: string): void => {
    deps.metrics.httpErrorsTotal.inc({ code });
  };
  const app: App = Fastify({
    ...httpServerOptions(http, countError),
    loggerInstance: deps.logger as FastifyBaseLogger,
    // One log line per request is too many at thousands of requests a second; errors are logged.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: limits.requestBodyBytesMax,
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    return503OnClosing: true,
    // Long ids must reach the handler and answer 404 like any unknown id, not 414.
    routerOptions: { maxParamLength: 65_536, ignoreTrailingSlash: false },
    // Malformed URLs (bad percent-encoding) answer in the error shape of every other error.
    frameworkErrors: (error, _request, reply) => {
      deps.metrics.httpErrorsTotal.inc({ code: 'not_found' });
      const body = new TicklerError('not_found', `no such resource: ${error.message.slice(0, 200)}`).toBody();
      // The reply of a request no route matched has no route generics to type it by.
      void (reply as unknown as FastifyReply).code(404).send(body);
    },
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, useDefaults: false } },
  }).withTypeProvider<TypeBoxTypeProvider>();
  app.setValidatorCompiler(validatorCompiler);
  capConnections(app.server, http.connectionsMax, countError);
  installJsonParser(app);
  app.decorateRequest('caller', null);
  app.decorateRequest('rawBody', null);

  const teamLimits = new TeamLimits({ store: deps.store, clock: deps.clock, logger: deps.logger });
  const planner = new LeasePlanner({ store: deps.store, clock: deps.clock, metrics: deps.metrics, logger: deps.logger,
    p2Share: deps.config.p2Share ?? p2ShareDefault, teamLimits, fairTeams: deps.config.fairTeams !== false });
  const context: ApiContext = {
    deps,
    teamLimits,
    jobs: new JobService({
      teamLimits,
      store: deps.store, clock: deps.clock, metrics: deps.metrics,
      cronToleranceDefaultS: deps.config.cronToleranceDefaultS, payloadBytesMax: deps.config.payloadBytesMax,
      dispatchAtCreate: deps.config.dispatchAtCreate !== false,
      silenceRequiredLabel: deps.config.silenceRequiredLabel ?? null,
    }),
    runs: new RunService({
      store: deps.store, clock: deps.clock, metrics: deps.metrics, logger: deps.logger, resultBytesMax: limits.resultBytesMax,
    }),
    waiters: new LeaseWaiters(planner.store, deps.clock, deps.logger),
    planner,
  };
  // The document generator records routes as they are added: it loads first, the routes after.
  void registerOpenApi(app as unknown as FastifyInstance);

  app.addHook('onRequest', async (request) => {
    // Node keeps the first of repeated Authorization headers and drops the rest, and a proxy
    // may fold them into one, comma-separated (no credential holds a comma): which key a
    // client meant is then a guess, so the request is refused instead.
    if (authorizationHeaders(request.raw.rawHeaders) > 1 || (request.headers.authorization ?? '').includes(',')) {
      throw new TicklerError('invalid_request', 'send one Authorization header, not several');
    }
    if (request.is404) return;
    request.caller = resolveCaller(deps.config.apiKeys, request.headers.authorization, request.routeOptions.config.auth ?? 'team');
  });
  // Exposed for observability and tests: how many workers are parked in a long-poll.
  app.decorate('leaseWaiters', context.waiters);
  installErrorHandling(app, deps);
  // A scheduler-only node (`--roles scheduler`) still answers /healthz, /readyz and /metrics.
  void app.register(async (routes) => {
    const scoped = routes as unknown as App;
    if (deps.apiRoutes ?? true) {
      registerJobRoutes(scoped, context);
      registerRunRoutes(scoped, context);
      registerUiDataRoutes(scoped, context);
      registerCapacityRoutes(scoped, context);
      registerTeamRoutes(scoped, context);
      registerWebUi(scoped);
    }
    registerOperationRoutes(scoped, context);
  });
  // preClose, not onClose: the server waits for in-flight requests before onClose runs, and
  // a parked long-poll would hold shutdown for up to wait_s.
  app.addHook('preClose', async () => {
    context.waiters.close();
  });
  // The limits are in force before the first request: the file's stored, then every entry read.
  app.addHook('onReady', async () => {
    if (deps.config.teamLimits !== undefined && deps.config.teamLimits.length > 0) await teamLimits.put(deps.config.teamLimits);
    await teamLimits.start();
  });
  app.addHook('onClose', async () => {
    teamLimits.close();
  });
  return app as unknown as FastifyInstance;
}

function authorizationHeaders(rawHeaders: readonly string[]): number {
  let count = 0;
  for (let index = 0; index < rawHeaders.length; index += 2) {
    if (rawHeaders[index]!.toLowerCase() === 'authorization') count++;
  }
  return count;
}

/** JSON bodies keep their raw text; nesting and prototype keys are checked before use. */
function installJsonParser(app: App): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string;
    request.rawBody = text;
    try {
      done(null, parseJsonBody(text, limits.jsonDepthMax));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}

function installErrorHandling(app: App, deps: AppDeps): void {
  app.setErrorHandler((error, request, reply) => {
    const known = toTicklerError(error);
    if (known === null) {
      deps.metrics.httpErrorsTotal.inc({ code: 'internal' });
      request.log.error({ err: error, method: request.method, url: request.url }, 'request failed');
      return reply.code(500).send({ error: { code: 'internal', message: 'internal error; see the server log' } });
    }
    deps.metrics.httpErrorsTotal.inc({ code: known.code });
    if (known.status >= 500) request.log.warn({ err: error, url: request.url }, 'request answered %d', known.status);
    if (known.code === 'unauthorized') void reply.header('www-authenticate', 'Bearer');
    // An outage is worth retrying soon; say when, as a 429 would.
    if (known.code === 'unavailable') void reply.header('retry-after', '1');
    const retryAfterS = retryAfterSOf(known);
    if (retryAfterS !== null) void reply.header('retry-after', String(retryAfterS));
    return reply.code(known.status).send(known.toBody());
  });
  app.setNotFoundHandler((request, reply) => {
    deps.metrics.httpErrorsTotal.inc({ code: 'not_found' });
    const error = new TicklerError('not_found', `no route ${request.method} ${request.url.slice(0, 200)}`);
    return reply.code(404).send(error.toBody());
  });
}
