/**
 * What one run costs the PostgreSQL store, phase by phase, through the Store API alone (no
 * HTTP, no scheduler): create N one-shot jobs, dispatch their timers, lease the runs, complete
 * them. For each phase: wall time, CPU of this process, CPU of the PostgreSQL backends
 * serving it (from /proc, so PostgreSQL must run on this machine) and WAL bytes, all per run.
 * Background work (autovacuum, the WAL writer, checkpoints) is not counted.
 *
 *   node --import tsx bench/probes/pg-store-cost.ts [--runs 20000] [--lease-max 50]
 *     [--dispatch-batch 500] [--complete-batch 1000] [--leasers 4] [--payload-pad 0] [--store-root DIR] [--lsn]
 *
 * `--lsn` prints each phase's WAL range, so that `pg_waldump --stats=record -s A -e B` can say
 * which records (heap updates, index inserts, full-page images) made up its WAL.
 * `--store-root` loads src/store/postgres from another tree (e.g. a `git archive` of an
 * older commit) for an A/B on the same machine; run the two alternately, as the load of a
 * shared machine moves every figure. Cluster benchmarks batch differently: compare batch
 * sizes, not only totals.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { withDefaultUser } from '../../src/store/postgres/connection.js';
import type { PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { runStoreCostPhases } from './store-cost-phases.js';

const { values: options } = parseArgs({
  options: {
    runs: { type: 'string', default: '20000' },
    'lease-max': { type: 'string', default: '50' },
    'dispatch-batch': { type: 'string', default: '500' },
    'payload-pad': { type: 'string', default: '0' },
    'complete-batch': { type: 'string', default: '1000' },
    leasers: { type: 'string', default: '4' },
    'store-root': { type: 'string', default: resolve(import.meta.dirname, '../..') },
    lsn: { type: 'boolean', default: false },
  },
});
const runCount = Number(options.runs);
const url = withDefaultUser(process.env['TICKLER_TEST_PG'] ?? 'postgres://127.0.0.1:5432/test');
const applicationName = `pg-store-cost-${process.pid}`;
// node-postgres names its connections after PGAPPNAME, which is how the backends are found.
process.env['PGAPPNAME'] = applicationName;
const schema = `cost_${process.pid}`;
const storeModule = (await import(resolve(options['store-root'], 'src/store/postgres/index.ts'))) as
  { openPostgresStore: (options: { url: string; schema: string; useDatabaseClock: boolean; poolSize: number; leaseNodeId: string }) =>
    Promise<PostgresStore> };
// Leases record their granting node, as on a `tickler serve` with the scheduler role (the default).
const store = await storeModule.openPostgresStore({ url, schema, useDatabaseClock: false, poolSize: 10, leaseNodeId: 'bench-node' });
const admin = new pg.Client({ connectionString: url, application_name: 'pg-store-cost-admin' });
await admin.connect();

/** CPU ticks per backend pid, last seen; a backend that exits keeps its last reading. */
const backendTicks = new Map<number, number>();
const clockTicksPerS = 100;
async function sampleBackends(): Promise<void> {
  const result = await admin.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1',
    [applicationName]);
  for (const { pid } of result.rows) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      backendTicks.set(pid, Number(fields[11]) + Number(fields[12]));
    } catch {
      // The backend exited between the query and the read; its last reading stands.
    }
  }
}
const sampler = setInterval(() => void sampleBackends(), 50);

async function phase(name: string, body: () => Promise<void>): Promise<void> {
  await sampleBackends();
  const ticksBefore = new Map(backendTicks);
  const walBefore = (await admin.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
  const cpuBefore = process.cpuUsage();
  const startedMs = performance.now();
  await body();
  const wallMs = performance.now() - startedMs;
  const cpu = process.cpuUsage(cpuBefore);
  await sampleBackends();
  let ticks = 0;
  for (const [pid, value] of backendTicks) ticks += value - (ticksBefore.get(pid) ?? 0);
  const walBytes = Number((await admin.query<{ bytes: string }>(
    'SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text AS bytes', [walBefore])).rows[0]!.bytes);
  const perRun = (value: number): string => (value / runCount).toFixed(0);
  console.log(`${name.padEnd(9)} ${(wallMs / 1_000).toFixed(2)} s, ${Math.round((runCount * 1_000) / wallMs)} runs/s; per run: `
    + `PostgreSQL backends ${perRun((ticks / clockTicksPerS) * 1e6)} us CPU, this process ${perRun(cpu.user + cpu.system)} us CPU, `
    + `WAL ${perRun(walBytes)} B${options.lsn ? ` (LSN ${walBefore} to ${(await admin.query<{ lsn: string }>(
      'SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn}, for pg_waldump --stats=record)` : ''}`);
}

try {
  console.log(`${runCount} runs; lease max ${options['lease-max']} x ${options.leasers} leasers, dispatch batch `
    + `${options['dispatch-batch']}, completions ${options['complete-batch']} at a time; store from ${options['store-root']}; `
    + `load average ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`);
  await runStoreCostPhases(store, {
    payloadPadBytes: Number(options['payload-pad']),
    runs: runCount, createBatch: 100, createInFlight: 4, dispatchBatch: Number(options['dispatch-batch']),
    leaseMax: Number(options['lease-max']), leasers: Number(options.leasers),
    completeBatch: Number(options['complete-batch']), completeInFlight: 1,
  }, phase);
} finally {
  clearInterval(sampler);
  await store.close();
  // The store's backends flush their table statistics as they exit, so after close the
  // counters are whole: an UPDATE that is not HOT writes a new entry into every index of runs.
  // (Without pg_stat_force_next_flush in each backend, the counters may still lag by a moment.)
  await new Promise((resolve) => setTimeout(resolve, 200));
  const updates = (await admin.query<{ relname: string; n_tup_upd: string; n_tup_hot_upd: string }>(
    `SELECT relname, n_tup_upd::text, n_tup_hot_upd::text FROM pg_stat_user_tables
      WHERE schemaname = $1 AND n_tup_upd > 0 ORDER BY relname`, [schema])).rows;
  console.log(`updates (HOT of all): ${updates.map((row) => `${row.relname} ${row.n_tup_hot_upd} of ${row.n_tup_upd}`).join(', ')}`);
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
}
