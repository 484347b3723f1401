/**
 * An API under test: buildApp over a real SQLite store in a temp directory and a virtual
 * clock, driven through app.inject(). No network, no mocks.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp, type ApiConfig } from '../../src/api/app.js';
import { VirtualClock } from '../../src/clock.js';
import { Metrics } from '../../src/obs/metrics.js';
import { silentLogger } from '../../src/obs/log.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import type { Store } from '../../src/store/store.js';
import * as limits from '../../src/limits.js';

/** 2026-03-01T00:00:00.000Z: a fixed start, so schedules and DST cases are reproducible. */
export const startMs = Date.UTC(2026, 2, 1);

export interface Harness {
  app: FastifyInstance;
  store: Store;
  clock: VirtualClock;
  metrics: Metrics;
  call(method: string, url: string, options?: CallOptions): Promise<Answer>;
  close(): Promise<void>;
}

export interface CallOptions {
  /** JSON-encoded unless `raw` is given. */
  body?: unknown;
  /** The body text exactly as sent. */
  raw?: string | Buffer;
  key?: string;
  headers?: Record<string, string>;
}

export interface Answer {
  status: number;
  headers: Record<string, unknown>;
  text: string;
  // Tests read answers loosely; assertions pin what matters.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
}

export interface HarnessOptions {
  apiKeys?: Map<string, string> | null;
  virtualClockRoutes?: boolean;
  config?: Partial<ApiConfig>;
  readiness?: () => Promise<{ ready: boolean; detail: Record<string, unknown> }>;
  /** Wrap the store (fault injection). */
  wrapStore?: (store: Store) => Store;
  /** Another store than the SQLite file of a temp directory (PostgreSQL), closed with the harness. */
  store?: { store: Store; close(): Promise<void> };
}

export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-api-'));
  const opened = options.store ?? await (async () => {
    const sqlite = await openSqliteStore({ path: join(directory, 'tickler.db'), synchronous: 'NORMAL' });
    return { store: sqlite, close: () => sqlite.close() };
  })();
  const store = options.wrapStore === undefined ? opened.store : options.wrapStore(opened.store);
  const clock = new VirtualClock(startMs);
  const metrics = new Metrics();
  const app = buildApp({
    store,
    clock,
    virtualClock: options.virtualClockRoutes === false ? null : clock,
    metrics,
    logger: silentLogger(),
    config: {
      apiKeys: options.apiKeys ?? null,
      payloadBytesMax: limits.payloadBytesMax,
      cronToleranceDefaultS: limits.cronToleranceSecondsDefault,
      ...options.config,
    },
    readiness: options.readiness ?? (async () => ({ ready: true, detail: { store: 'ok' } })),
  });
  await app.ready();
  return {
    app, store, clock, metrics,
    call: (method, url, callOptions = {}) => call(app, method, url, callOptions),
    async close() {
      await app.close();
      await opened.close();
      await rm(directory, { recursive: true, force: true });
    },
  };
}

export async function call(app: FastifyInstance, method: string, url: string, options: CallOptions = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...options.headers };
  let payload: string | Buffer | undefined;
  if (options.raw !== undefined) payload = options.raw;
  else if (options.body !== undefined) payload = JSON.stringify(options.body);
  if (payload !== undefined && headers['content-type'] === undefined) headers['content-type'] = 'application/json';
  if (options.key !== undefined) headers['authorization'] = `Bearer ${options.key}`;
  const response = await app.inject({
    method: method as 'GET', url, headers, ...(payload === undefined ? {} : { payload }),
  });
  let json: unknown = null;
  try {
    json = response.body.length > 0 ? JSON.parse(response.body) : null;
  } catch {
    json = null; // HTML and Prometheus text are read through `text`.
  }
  return { status: response.statusCode, headers: response.headers, text: response.body, json };
}

/** A minimal valid cron job body. */
export function cronJob(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { schedule: { cron: '0 2 * * *', tz: 'Europe/Berlin' }, pool: 'billing', payload: { n: 1 }, ...overrides };
}

/** A minimal valid one-shot job body. */
export function delayJob(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { schedule: { delay_s: 900 }, pool: 'billing', payload: { n: 1 }, ...overrides };
}
