// A schema filled through the Store API for bench/probes/pg-plan-audit.ts, with statistics as a new
// cluster has them: `--stats empty` analyzes the tables while empty, `none` never, `fresh` after
// the fill. 100,000 jobs of team-a (a fifth keyed, 100 watched by max_silence_s, a tenth
// buffer_one), 1,000 of team-b, `--dispatch` of them fired, 10,000 leased, 5,000 completed.
//   node --import tsx bench/probes/pg-plan-audit-setup.ts --schema pa_empty --stats empty|none|fresh [--jobs 100000]
import { parseArgs } from 'node:util';
import pg from 'pg';
import { openPostgresStore, type PostgresStore } from '../../src/store/postgres/index.js';
import type { LeasedRun } from '../../src/store/store.js';
import { fireTimersInBulk, jobRecord, jobSpec, minuteMs, t0Ms, timerAt } from '../../test/store/conformance-fixtures.js';

/** ANALYZE of this schema's tables only (a bare ANALYZE would take every table of the database). */
export async function analyzeSchema(client: pg.Client, schema: string): Promise<void> {
  const tables = await client.query<{ name: string }>(
    `SELECT relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')`, [schema]);
  for (const { name } of tables.rows) await client.query(`ANALYZE "${schema}"."${name}"`);
}

export async function fill(store: PostgresStore, jobCount: number, dispatchCount: number): Promise<void> {
  for (let created = 0; created < jobCount; created += 1_000) {
    await store.createJobs(Array.from({ length: 1_000 }, (_, i) => {
      const n = created + i;
      const spec = jobSpec({ key: n % 5 === 0 ? `k-${n}` : null, max_silence_s: n < 100 ? 3_600 : null,
        overlap: n % 10 === 0 ? 'buffer_one' : 'allow' });
      return { job: jobRecord(spec, t0Ms), timer: timerAt(t0Ms + minuteMs) };
    }), t0Ms);
  }
  for (let created = 0; created < 1_000; created += 100) {
    await store.createJobs(Array.from({ length: 100 }, () => ({
      job: jobRecord(jobSpec({ pool: 'pool-b' }), t0Ms, 'team-b'), timer: timerAt(t0Ms + minuteMs) })), t0Ms);
  }
  const fireMs = t0Ms + minuteMs;
  await fireTimersInBulk(store, dispatchCount, fireMs);
  const leased: LeasedRun[] = [];
  for (let i = 0; i < 20; i++) {
    leased.push(...await store.leaseRuns({ team: null, pool: 'pool-a', max: 500, leaseMs: 600_000, workerId: 'w', nowMs: fireMs }));
  }
  await Promise.all(leased.slice(0, 5_000).map((run) => store.completeRun({
    team: null, runId: run.runId, fencingToken: run.fencingToken, status: 'succeeded', error: null, result: null, nowMs: fireMs + 1_000,
  })));
}

if (process.argv[1]?.endsWith('pg-plan-audit-setup.ts')) {
const { values: options } = parseArgs({ options: {
  schema: { type: 'string', default: 'plan_audit' },
  stats: { type: 'string', default: 'empty' },
  jobs: { type: 'string', default: '100000' },
  dispatch: { type: 'string', default: '30000' },
} });
const url = 'postgres://postgres@127.0.0.1:5432/test';
const schema = options.schema;
const admin = new pg.Client({ connectionString: url });
await admin.connect();
await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
const store = await openPostgresStore({ url, schema, useDatabaseClock: false, poolSize: 4 });
await admin.query(`SET search_path = ${schema}`);
if (options.stats === 'empty') await analyzeSchema(admin, schema);
const started = performance.now();
await fill(store, Number(options.jobs), Number(options.dispatch));
console.log(`filled ${schema} in ${((performance.now() - started) / 1000).toFixed(1)} s: ${options.jobs} + 1000 jobs, `
  + `${options.dispatch} dispatched, 10000 leased, 5000 completed`);
if (options.stats === 'fresh') await analyzeSchema(admin, schema);
await store.close();
await admin.end();
}
