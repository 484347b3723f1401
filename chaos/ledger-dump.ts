/**
 * Dumps the system's own record after the drain: every run of the team (`GET /v1/runs`, paged)
 * with its events (`GET /v1/runs/{run_id}`), and each of the run's jobs (`GET /v1/jobs/{id}`),
 * into the history as `ledger_run` and `ledger_job` lines, times converted to epoch ms.
 */
import pg from 'pg';
import type { TicklerClient } from '../src/worker/client.js';
import type { Run } from '../src/worker/wire.js';
import type { LedgerRunEvent } from './history.js';
import type { HistoryRecorder } from './recorder.js';

const pageLimit = 1_000;
const concurrency = 16;

function msOf(text: string | null | undefined): number | null {
  return text === null || text === undefined ? null : Date.parse(text);
}

async function forEachLimited<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const item = items[next] as T;
      next += 1;
      await work(item);
    }
  });
  await Promise.all(lanes);
}

function eventsOf(run: Run): LedgerRunEvent[] {
  return (run.events ?? []).map((event) => {
    const attempt = event.detail?.['attempt'];
    return {
      atMs: Date.parse(event.at),
      type: event.type,
      toStatus: event.to_status ?? null,
      ...(typeof attempt === 'number' ? { attempt } : {}),
      ...(event.type === 'dispatched' && event.detail?.['ahead'] === true ? { ahead: true as const } : {}),
      ...(event.type === 'dispatched' && event.detail?.['at_create'] === true ? { atCreate: true as const } : {}),
    };
  });
}

/**
 * Every `dispatched` event carrying a shard token, in event-sequence order, straight from the
 * run's database (the API does not expose the sequence): the evidence for the checker's
 * "no stale shard token accepted".
 */
export async function dumpDispatchTokens(storeUrl: string, recorder: HistoryRecorder): Promise<number> {
  const client = new pg.Client({ connectionString: storeUrl, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    const result = await client.query<{ run_id: string; sequence: string; token: string }>(
      `SELECT run_id, event_id::text AS sequence, detail->>'shard_token' AS token FROM run_events
        WHERE type = 'dispatched' AND detail->>'shard_token' IS NOT NULL ORDER BY event_id`);
    for (const row of result.rows) {
      recorder.record({ type: 'ledger_dispatch', runId: row.run_id, sequence: Number(row.sequence), shardToken: row.token });
    }
    return result.rows.length;
  } finally {
    await client.end();
  }
}

export async function dumpLedger(client: TicklerClient, recorder: HistoryRecorder, jobIds: Iterable<string>):
  Promise<{ runs: number; jobs: number }> {
  const runIds: string[] = [];
  let cursor: string | null = null;
  do {
    const page = await client.listRuns({ limit: pageLimit, ...(cursor === null ? {} : { cursor }) });
    runIds.push(...page.items.map((run) => run.run_id));
    cursor = page.next_cursor;
  } while (cursor !== null);
  await forEachLimited(runIds, concurrency, async (runId) => {
    const run = await client.getRun(runId);
    recorder.record({
      type: 'ledger_run', runId: run.run_id, jobId: run.job_id, scheduledAtMs: Date.parse(run.scheduled_at),
      fireAtMs: Date.parse(run.fire_at), dispatchedAtMs: msOf(run.dispatched_at), attempt: run.attempt,
      status: run.status, events: eventsOf(run),
    });
  });
  const jobs = [...jobIds];
  await forEachLimited(jobs, concurrency, async (jobId) => {
    const job = await client.getJob(jobId);
    recorder.record({ type: 'ledger_job', jobId, state: job.state, nextScheduledAtMs: msOf(job.next_scheduled_at) });
  });
  return { runs: runIds.length, jobs: jobs.length };
}
