/**
 * The statements whose plans followed stale statistics (bench/probes/pg-plan-audit.ts), timed through
 * the Store API on a schema analyzed while empty and then filled (`--jobs` jobs of one team, a
 * hundred watched by the dead man's switch, half of them fired and leased): the reconciler's
 * silent-jobs pass, a job's run list, a cancel by key prefix naming two of the team's keyed jobs
 * (cancelled by the first round), the reconciler's pass over held runs with `--held` runs held
 * (a second occurrence of a buffer_one job whose first is still active; none stranded), and a
 * lease sweep expiring every lease in batches of 1,000 as run-lease-sweeper.ts does. Prints the
 * median of `--rounds` for all but the sweep, then, with `--fresh`, those again after ANALYZE.
 *
 *   node --import tsx bench/probes/pg-stale-plan-cost.ts [--jobs 50000] [--held 100] [--rounds 9] [--fresh] [--store-root DIR]
 *
 * `--store-root` loads src/store/postgres from another tree (a worktree of an older commit)
 * for an A/B on the same machine; run the two alternately.
 */
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { withDefaultUser } from '../../src/store/postgres/connection.js';
import type { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { analyzeSchema, fill } from './pg-plan-audit-setup.js';
import { minuteMs, t0Ms, timerAt } from '../../test/store/conformance-fixtures.js';

const { values: options } = parseArgs({
  options: {
    jobs: { type: 'string', default: '50000' },
    rounds: { type: 'string', default: '9' },
    held: { type: 'string', default: '100' },
    fresh: { type: 'boolean', default: false },
    'store-root': { type: 'string', default: resolve(import.meta.dirname, '../..') },
  },
});
const jobCount = Number(options.jobs);
const url = withDefaultUser(process.env['TICKLER_TEST_PG'] ?? 'postgres://127.0.0.1:5432/test');
const schema = `stale_plan_${process.pid}`;
const storeModule = (await import(resolve(options['store-root'], 'src/store/postgres/index.ts'))) as
  { openPostgresStore: (options: { url: string; schema: string; useDatabaseClock: boolean; poolSize: number }) => Promise<PostgresStore> };
const store = await storeModule.openPostgresStore({ url, schema, useDatabaseClock: false, poolSize: 4 });
const admin = new pg.Client({ connectionString: url });
await admin.connect();

async function medianMs(body: () => Promise<unknown>): Promise<number> {
  const times: number[] = [];
  for (let round = 0; round < Number(options.rounds); round++) {
    const startedMs = performance.now();
    await body();
    times.push(performance.now() - startedMs);
  }
  times.sort((left, right) => left - right);
  return times[Math.floor(times.length / 2)]!;
}

/**
 * Dispatches the next occurrence of `count` buffer_one jobs whose first run is still active,
 * which holds it: the held runs the reconciler's pass looks for.
 */
async function holdRuns(count: number): Promise<void> {
  const timers = await admin.query<{ timer_id: string; job_id: string; shard: number; fire_at: number; scheduled_at: number }>(
    `SELECT t.timer_id, t.job_id, t.shard, t.fire_at::float8 AS fire_at, t.scheduled_at::float8 AS scheduled_at
       FROM "${schema}".jobs j JOIN "${schema}".timers t ON t.timer_id = j.timer_id AND t.fire_at = j.next_fire_at
      WHERE j.spec->>'overlap' = 'buffer_one' AND EXISTS (SELECT 1 FROM "${schema}".active_runs q WHERE q.job_id = j.job_id)
      ORDER BY j.job_id LIMIT $1`, [count]);
  const tokens = new Map((await admin.query<{ shard: number; token: string }>(
    `SELECT shard, token::text AS token FROM "${schema}".shard_leases`)).rows.map((row) => [row.shard, row.token]));
  await store.dispatch(timers.rows.map((timer) => ({
    shard: timer.shard, shardToken: tokens.get(timer.shard)!, timerId: timer.timer_id, jobId: timer.job_id,
    occurrences: [{ scheduledAtMs: timer.scheduled_at, fireAtMs: timer.fire_at, status: 'ready' as const }],
    nextTimer: timerAt(timer.scheduled_at + minuteMs),
  })), t0Ms + 2 * minuteMs);
}

try {
  await analyzeSchema(admin, schema);
  await fill(store, jobCount, jobCount / 2);
  const { job_id: jobId } = (await admin.query<{ job_id: string }>(
    `SELECT job_id FROM "${schema}".runs ORDER BY run_id LIMIT 1`)).rows[0]!;
  await holdRuns(Number(options.held));
  const queued = (await admin.query<{ count: number; held: number }>(
    `SELECT count(*)::int AS count, (count(*) FILTER (WHERE held))::int AS held FROM "${schema}".active_runs`)).rows[0]!;
  // Every fifth job is keyed k-n: this prefix names two of them (n = jobCount / 2 - 10 and - 5).
  const prefix = `k-${jobCount / 20 - 1}`;
  const measure = async (): Promise<string> => {
    const silentMs = await medianMs(() => store.findSilentJobs(null, t0Ms + 7_200_000, 1_000));
    const silentTeamMs = await medianMs(() => store.findSilentJobs('team-a', t0Ms + 7_200_000, 1_000));
    const runsMs = await medianMs(() => store.listRuns({ team: 'team-a', jobId, limit: 50 }));
    let cancelled = 0;
    const prefixMs = await medianMs(async () => {
      cancelled += await store.cancelJobsByKeyPrefix('team-a', prefix, t0Ms + 3 * minuteMs);
    });
    let released = 0;
    const heldMs = await medianMs(async () => {
      released += (await store.releaseStrandedHeldRuns(t0Ms + 3 * minuteMs, 100)).length;
    });
    return `findSilentJobs ${silentMs.toFixed(1)} ms (team ${silentTeamMs.toFixed(1)} ms), `
      + `listRuns by job ${runsMs.toFixed(2)} ms, cancelJobsByKeyPrefix('${prefix}') ${prefixMs.toFixed(2)} ms (${cancelled} cancelled), `
      + `releaseStrandedHeldRuns ${heldMs.toFixed(2)} ms (${released} released) (medians of ${options.rounds})`;
  };
  const stale = await measure();
  const sweepStartedMs = performance.now();
  let expired = 0;
  for (;;) {
    const batch = await store.expireRunLeases(t0Ms + 2 * minuteMs + 600_000, 1_000);
    expired += batch.length;
    if (batch.length < 1_000) break;
  }
  const sweepMs = performance.now() - sweepStartedMs;
  console.log(`${options['store-root']}: ${jobCount} jobs, ${queued.count} queued runs (${queued.held} held); ${stale}; `
    + `${expired} leases expired in ${sweepMs.toFixed(0)} ms`);
  if (options.fresh) {
    await analyzeSchema(admin, schema);
    console.log(`  after ANALYZE: ${await measure()}`);
  }
} finally {
  await store.close();
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
}
