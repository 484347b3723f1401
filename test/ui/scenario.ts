/**
 * A simulated weekend for the web UI's browser test and the README's screenshots: a real
 * server (startServer: SQLite file, virtual clock, API keys) on 127.0.0.1, a nightly
 * `0 2 * * *` Europe/Berlin job that skips a DST gap, a `*` + `/2` job whose runs a worker
 * completes, an hourly job, a job that fails and is retried, and a paused one. The clock
 * starts on Friday 27 March 2026 at 23:30 UTC; the nightly run of Saturday fails for good (max_attempts 1), and
 * Sunday 29 March has no 02:00 in Berlin (the clocks go from 02:00 to 03:00), so its
 * occurrence is `skipped_dst`. The clock ends on Sunday at 09:00 Berlin time (07:00 UTC).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, type RunningServer } from '../../src/server.js';

export const keys = { team: 'key-ops-7f3a', admin: 'key-admin-91c2', other: 'key-web-55d0' } as const;
export const startAt = '2026-03-27T23:30:00.000Z';
export const endAt = '2026-03-29T07:00:00.000Z';
export const nightlyError = 'connection refused: reporting-db:5432 (ECONNREFUSED)';

export interface Scenario {
  server: RunningServer;
  url: string;
  ids: { nightly: string; sync: string; hourly: string; invoices: string; paused: string };
  close(): Promise<void>;
}

export async function call(url: string, method: string, path: string, body?: unknown, key: string = keys.team): Promise<{ status: number;
  // Test code reads answers loosely.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any; }> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  return { status: response.status, json: text === '' ? null : JSON.parse(text) };
}

async function must(url: string, method: string, path: string, body?: unknown, key?: string) {
  const answer = await call(url, method, path, body, key);
  if (answer.status >= 300) throw new Error(`${method} ${path} answered ${answer.status}: ${JSON.stringify(answer.json)}`);
  return answer.json;
}

/** A worker's pass over a pool: lease what is ready and complete each as `outcome` says, in one batch. */
async function work(url: string, pool: string, outcome: (run: { job_id: string; attempt: number }) => { status: string; error?: string }) {
  for (;;) {
    const leased = await must(url, 'POST', '/v1/workers/lease', { pool, max: 200, wait_s: 0, worker_id: `${pool}-worker-1` });
    if (leased.runs.length === 0) return;
    await must(url, 'POST', '/v1/runs:complete', { answer: 'status', completions: leased.runs.map(
      (run: { run_id: string; fencing_token: string; job_id: string; attempt: number }) =>
        ({ run_id: run.run_id, fencing_token: run.fencing_token, ...outcome(run) })) });
  }
}

export async function startScenario(): Promise<Scenario> {
  const dataDir = mkdtempSync(join(tmpdir(), 'tickler-ui-'));
  const server = await startServer({
    host: '127.0.0.1', port: 0, dataDir, storeUrl: null, roles: ['api', 'scheduler'], nodeId: null,
    apiKeys: new Map([[keys.team, 'ops'], [keys.admin, 'admin'], [keys.other, 'web']]),
    virtualClock: true, startAtMs: Date.parse(startAt), logLevel: 'silent',
  });
  const url = server.url;
  try {
    const create = (body: Record<string, unknown>) => must(url, 'POST', '/v1/jobs', body);
    const nightly = await create({
      key: 'nightly-report', schedule: { cron: '0 2 * * *', tz: 'Europe/Berlin' }, pool: 'reports', tolerance_s: 0,
      dst: { gap: 'skip', repeat: 'first' }, retry: { max_attempts: 1, base_s: 30, max_s: 3600 }, max_silence_s: 93_600,
      labels: { owner: 'finance' }, payload: { report: 'daily-revenue' },
    });
    const sync = await create({
      key: 'sync-inventory', schedule: { cron: '*/2 * * * *', tz: 'UTC' }, pool: 'sync', tolerance_s: 0, overlap: 'allow',
      labels: { owner: 'warehouse' },
    });
    const hourly = await create({ key: 'cleanup-tmp', schedule: { cron: '15 * * * *', tz: 'UTC' }, pool: 'maintenance', tolerance_s: 30 });
    const invoices = await create({
      key: 'invoice-export', schedule: { cron: '30 1 * * *', tz: 'Europe/Berlin' }, pool: 'billing', tolerance_s: 0,
      retry: { max_attempts: 3, base_s: 60, max_s: 600 }, labels: { compliance: 'gdpr' },
    });
    const paused = await create({ key: 'weekly-digest', schedule: { cron: '0 8 * * 1', tz: 'Europe/Berlin' }, pool: 'mail' });
    await must(url, 'POST', `/v1/jobs/${paused.job_id}/pause`);
    // Another team's job, which team ops must never see.
    await must(url, 'POST', '/v1/jobs', { key: 'web-secret-job', schedule: { cron: '0 3 * * *', tz: 'UTC' }, pool: 'web' }, keys.other);

    // Three webhook deliveries, due in the night, that their worker rejects for good.
    for (const [index, customer] of ['acme', 'globex', 'initech'].entries()) {
      await create({ key: `webhook-${customer}`, schedule: { at: `2026-03-29T0${3 + index}:10:00.000Z` }, pool: 'webhooks',
        payload: { customer } });
    }
    const end = Date.parse(endAt);
    for (let now = Date.parse(startAt); now < end;) {
      const stepS = Math.min(3600, (end - now) / 1000);
      now = Date.parse((await must(url, 'POST', '/v1/clock/advance', { seconds: stepS }, keys.admin)).now);
      await work(url, 'sync', () => ({ status: 'succeeded' }));
      await work(url, 'maintenance', () => ({ status: 'succeeded' }));
      await work(url, 'billing', (run) => (run.attempt === 1
        ? { status: 'failed', error: 'HTTP 503 from ledger-api: upstream timeout' } : { status: 'succeeded' }));
      await work(url, 'reports', () => ({ status: 'failed', error: nightlyError }));
      await work(url, 'webhooks', () => ({ status: 'failed_permanent', error: 'HTTP 410 Gone from the customer endpoint: subscription removed' }));
    }
    return {
      server, url,
      ids: { nightly: nightly.job_id, sync: sync.job_id, hourly: hourly.job_id, invoices: invoices.job_id, paused: paused.job_id },
      async close() {
        await server.close();
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
    throw error;
  }
}
