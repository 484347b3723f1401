/**
 * /openapi.json: the OpenAPI 3.1 document built from the schemas the routes validate with,
 * so the published contract cannot drift from the checked one. Answer schemas live in the
 * route's `config.doc` (documentation only: answers are built by wire.ts, not filtered by
 * a serializer that could drop fields).
 */
import type { TSchema } from 'typebox';
import type { FastifyInstance, RouteOptions } from 'fastify';
import type { AuthLevel } from './auth.js';
import { ErrorAnswer } from './schemas.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    doc?: RouteDocumentation;
  }
}

export interface RouteDocumentation {
  summary: string;
  /** Status → answer schema (JSON by default). */
  answers?: Record<number, TSchema | { contentType: string }>;
}

export interface RouteDoc {
  method: string;
  url: string;
  auth: AuthLevel;
  schema: { body?: unknown; querystring?: unknown; params?: unknown };
  doc: RouteDocumentation | undefined;
}

/** Records every route as it is added; call before registering routes. */
export function collectRoutes(app: { addHook: FastifyInstance['addHook'] }): RouteDoc[] {
  const routes: RouteDoc[] = [];
  app.addHook('onRoute', (route: RouteOptions) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      if (method === 'HEAD') continue;
      const config = (route.config ?? {}) as { auth?: AuthLevel; doc?: RouteDocumentation };
      routes.push({
        method: method.toLowerCase(),
        url: route.url,
        auth: config.auth ?? 'team',
        schema: (route.schema ?? {}) as RouteDoc['schema'],
        doc: config.doc,
      });
    }
  });
  return routes;
}

/** `/v1/jobs/:job_id` → `/v1/jobs/{job_id}`; `::` is fastify's escaped colon. */
function openApiPath(url: string): string {
  return url.split('::').map((part) => part.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}')).join(':');
}

function plain(schema: unknown): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema)) as Record<string, unknown>;
}

function parametersOf(schema: unknown, where: 'query' | 'path'): unknown[] {
  if (schema === undefined) return [];
  const object = plain(schema) as { properties?: Record<string, unknown>; required?: string[] };
  return Object.entries(object.properties ?? {}).map(([name, property]) => ({
    name,
    in: where,
    required: where === 'path' || (object.required ?? []).includes(name),
    schema: property,
  }));
}

export function buildOpenApiDocument(routes: readonly RouteDoc[]): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    if (route.url === '/openapi.json' || route.url === '*') continue;
    const path = openApiPath(route.url);
    const operation: Record<string, unknown> = {
      summary: route.doc?.summary ?? `${route.method.toUpperCase()} ${path}`,
      parameters: [...parametersOf(route.schema.params, 'path'), ...parametersOf(route.schema.querystring, 'query')],
      responses: answersOf(route),
    };
    if (route.schema.body !== undefined) {
      operation['requestBody'] = { required: true, content: { 'application/json': { schema: plain(route.schema.body) } } };
    }
    if (route.auth !== 'none') operation['security'] = [{ bearer: [] }];
    paths[path] = { ...(paths[path] ?? {}), [route.method]: operation };
  }
  return {
    openapi: '3.1.0',
    info: { title: 'tickler', version: '1', description: 'Durable one-shot timers and recurring jobs, dispatched at least once to pulling workers.' },
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'a team key, or an admin key (team admin)' } },
      schemas: { Error: plain(ErrorAnswer) },
    },
    paths,
  };
}

function answersOf(route: RouteDoc): Record<string, unknown> {
  const answers: Record<string, unknown> = {};
  for (const [status, answer] of Object.entries(route.doc?.answers ?? { 200: undefined })) {
    if (answer !== undefined && 'contentType' in answer) {
      answers[status] = { description: `status ${status}`, content: { [answer.contentType as string]: {} } };
    } else {
      answers[status] = {
        description: `status ${status}`,
        ...(answer === undefined ? {} : { content: { 'application/json': { schema: plain(answer) } } }),
      };
    }
  }
  answers['default'] = { description: 'an error', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } };
  return answers;
}
