/**
 * The statements whose plans followed stale statistics (bench/pg-plan-audit.ts), timed through
 * the Store API on a schema analyzed while empty and then filled (`--jobs` jobs of one team, a
 * hundred watched by the dead man's switch, half of them fired and leased): the reconciler's
 * silent-jobs pass, a job's run list, and a lease sweep expiring every lease in batches of
 * 1,000 as run-lease-sweeper.ts does. Prints the median of `--rounds` for the first two.
 *
 *   node --import tsx bench/pg-stale-plan-cost.ts [--jobs 50000] [--rounds 9] [--store-root DIR]
 *
 * `--store-root` loads src/store/postgres from another tree (a worktree of an older commit)
 * for an A/B on the same machine; run the two alternately.
 */
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { withDefaultUser } from '../src/store/postgres/connection.js';
import type { PostgresStore } from '../src/store/postgres/postgres-store.js';
import { analyzeSchema, fill } from './pg-plan-audit-setup.js';
import { minuteMs, t0Ms } from '../test/store/conformance-fixtures.js';

const { values: options } = parseArgs({
  options: {
    jobs: { type: 'string', default: '50000' },
    rounds: { type: 'string', default: '9' },
    'store-root': { type: 'string', default: resolve(import.meta.dirname, '..') },
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

try {
  await analyzeSchema(admin, schema);
  await fill(store, jobCount, jobCount / 2);
  const { job_id: jobId } = (await admin.query<{ job_id: string }>(
    `SELECT job_id FROM "${schema}".runs ORDER BY run_id LIMIT 1`)).rows[0]!;
  const silentMs = await medianMs(() => store.findSilentJobs(null, t0Ms + 7_200_000, 1_000));
  const silentTeamMs = await medianMs(() => store.findSilentJobs('team-a', t0Ms + 7_200_000, 1_000));
  const runsMs = await medianMs(() => store.listRuns({ team: 'team-a', jobId, limit: 50 }));
  const sweepStartedMs = performance.now();
  let expired = 0;
  for (;;) {
    const batch = await store.expireRunLeases(t0Ms + 2 * minuteMs + 600_000, 1_000);
    expired += batch.length;
    if (batch.length < 1_000) break;
  }
  const sweepMs = performance.now() - sweepStartedMs;
  console.log(`${options['store-root']}: ${jobCount} jobs; findSilentJobs ${silentMs.toFixed(1)} ms (team ${silentTeamMs.toFixed(1)} ms), `
    + `listRuns by job ${runsMs.toFixed(2)} ms (medians of ${options.rounds}); ${expired} leases expired in ${sweepMs.toFixed(0)} ms`);
} finally {
  await store.close();
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
}
