/**
 * Cancels by id on the PostgreSQL store through the Store API (no HTTP, no scheduler), as
 * bench:peers W5 makes them: jobs created in batches of 1,000 while callers cancel four in
 * five of each batch right after it, `--batch` ids per `cancelJobs` call (the SDK's
 * `coalesceCancels` sends what 64 callers have queued: about 64). Prints cancels a second
 * over the whole run. The table's statistics lag the bulk create, as they do in W5, which is
 * what made a plan read a team's every job for each cancel (src/store/postgres/jobs.ts).
 *
 *   node --import tsx bench/probes/pg-cancel-cost.ts [--jobs 50000] [--batch 64] [--callers 2]
 *     [--team team-a] [--store-root DIR]
 *
 * `--store-root` loads src/store/postgres from another tree (a worktree of an older commit)
 * for an A/B on the same machine; run the two alternately.
 */
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { withDefaultUser } from '../../src/store/postgres/connection.js';
import type { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { createJob, minuteMs, t0Ms } from '../../test/store/conformance-fixtures.js';

const { values: options } = parseArgs({
  options: {
    jobs: { type: 'string', default: '50000' },
    batch: { type: 'string', default: '64' },
    callers: { type: 'string', default: '2' },
    team: { type: 'string', default: 'team-a' },
    'store-root': { type: 'string', default: resolve(import.meta.dirname, '../..') },
  },
});
const jobCount = Number(options.jobs);
const batchSize = Number(options.batch);
const url = withDefaultUser(process.env['TICKLER_TEST_PG'] ?? 'postgres://127.0.0.1:5432/test');
const schema = `cancel_cost_${process.pid}`;
const storeModule = (await import(resolve(options['store-root'], 'src/store/postgres/index.ts'))) as
  { openPostgresStore: (options: { url: string; schema: string; useDatabaseClock: boolean; poolSize: number; leaseNodeId: string }) =>
    Promise<PostgresStore> };
const store = await storeModule.openPostgresStore({ url, schema, useDatabaseClock: false, poolSize: 10, leaseNodeId: 'bench-node' });

const dueMs = t0Ms + 30 * minuteMs;
const queued: string[] = [];
let createdAll = false;
let cancelled = 0;
const startedMs = performance.now();
try {
  const creating = (async () => {
    for (let created = 0; created < jobCount; created += 1_000) {
      const batch = await Promise.all(Array.from({ length: Math.min(1_000, jobCount - created) }, () =>
        createJob(store, { team: options.team, timer: { fireAtMs: dueMs, scheduledAtMs: dueMs } })));
      batch.forEach((job, index) => {
        if (index % 5 !== 0) queued.push(job.jobId);
      });
    }
    createdAll = true;
  })();
  const caller = async (): Promise<void> => {
    for (;;) {
      const ids = queued.splice(0, batchSize);
      if (ids.length === 0) {
        if (createdAll) return;
        await new Promise((settle) => setTimeout(settle, 1)); // waiting for the next created batch
        continue;
      }
      await store.cancelJobs(options.team, ids, t0Ms + minuteMs);
      cancelled += ids.length;
    }
  };
  await Promise.all([creating, ...Array.from({ length: Number(options.callers) }, caller)]);
  const seconds = (performance.now() - startedMs) / 1_000;
  console.log(`${options['store-root']}: ${jobCount} jobs created, ${cancelled} cancelled in batches of ${batchSize}, `
    + `${Math.round(cancelled / seconds)} cancels/s over the run`);
} finally {
  await store.close();
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
}
