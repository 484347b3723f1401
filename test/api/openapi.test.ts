// /openapi.json, generated from the routes by @fastify/swagger: every route docs/API.md names
// is in it, every operation has an operationId (unique), a documented 2xx answer and its
// error answers, and `redocly lint` (the recommended rules) finds nothing.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startHarness, type Harness } from './harness.js';

const root = join(import.meta.dirname, '..', '..');
const methods = ['get', 'post', 'put', 'patch', 'delete'] as const;

interface Operation {
  operationId?: string;
  responses?: Record<string, { content?: Record<string, { schema?: unknown }> }>;
  security?: unknown[];
}

/** Every `METHOD /path` docs/API.md names (a `, \`/resume\`` after one names a sibling). */
function routesOfApiMd(): [method: string, path: string][] {
  const text = readFileSync(join(root, 'docs', 'API.md'), 'utf8');
  const routes: [string, string][] = [];
  for (const match of text.matchAll(/`(GET|POST|PUT|PATCH|DELETE)\s+(\/[^`?\s]*)[^`]*`(?:, `(\/[a-z_]+)`)?/g)) {
    const method = match[1]!.toLowerCase();
    routes.push([method, match[2]!]);
    if (match[3] !== undefined) routes.push([method, match[2]!.replace(/\/[^/]+$/, match[3])]);
  }
  return routes;
}

describe('the OpenAPI document', () => {
  let h: Harness;
  let document: { paths: Record<string, Partial<Record<(typeof methods)[number], Operation>>> };
  before(async () => {
    h = await startHarness();
    const answer = await h.call('GET', '/openapi.json');
    assert.equal(answer.status, 200);
    document = answer.json;
  });
  after(async () => {
    await h.close();
  });

  it('has every route docs/API.md names', () => {
    const named = routesOfApiMd();
    assert.ok(named.length >= 30, `docs/API.md names ${named.length} routes`);
    for (const [method, path] of named) {
      assert.ok(document.paths[path]?.[method as (typeof methods)[number]] !== undefined, `${method.toUpperCase()} ${path}`);
    }
  });

  it('gives every operation a unique operationId, a 2xx answer with content, and its error answers', () => {
    const ids = new Set<string>();
    for (const [path, item] of Object.entries(document.paths)) {
      for (const method of methods) {
        const operation = item[method];
        if (operation === undefined) continue;
        const where = `${method.toUpperCase()} ${path}`;
        assert.match(operation.operationId ?? '', /^[a-z]+[A-Za-z]*$/, where);
        assert.ok(!ids.has(operation.operationId!), `${where}: operationId ${operation.operationId} twice`);
        ids.add(operation.operationId!);
        const statuses = Object.keys(operation.responses ?? {});
        const ok = statuses.filter((status) => status.startsWith('2'));
        assert.ok(ok.length > 0, `${where} documents no 2xx answer`);
        for (const status of ok) assert.ok(operation.responses![status]!.content !== undefined, `${where} ${status} has no content`);
        assert.ok(statuses.some((status) => status.startsWith('4')), `${where} documents no 4xx answer`);
        if (operation.security?.length !== 0) {
          assert.ok(statuses.includes('401') && statuses.includes('403'), `${where}: behind auth, 401 and 403`);
        }
      }
    }
    assert.ok(ids.has('postWorkersLease') && ids.has('postRunsComplete') && ids.has('postJobsBatch'));
  });

  it('passes redocly lint with the recommended rules', () => {
    const directory = mkdtempSync(join(tmpdir(), 'tickler-openapi-'));
    try {
      const path = join(directory, 'openapi.json');
      writeFileSync(path, JSON.stringify(document));
      const lint = spawnSync(process.execPath, [join(root, 'node_modules', '@redocly', 'cli', 'bin', 'cli.js'), 'lint', path,
        '--config', join(root, 'redocly.yaml'), '--format', 'summary'], { encoding: 'utf8', env: { ...process.env, REDOCLY_TELEMETRY: 'off' } });
      assert.equal(lint.status, 0, `${lint.stdout}${lint.stderr}`);
      // The summary lists each rule that fired as `error <rule>: n` or `warning <rule>: n`.
      assert.doesNotMatch(`${lint.stdout}${lint.stderr}`, /^(error|warning)\s+[a-z0-9-]+: \d+/m);
      assert.match(lint.stdout + lint.stderr, /valid/);
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });
});
