// The dead man's switch query on PostgreSQL with 50,000 jobs (100 watched): its time and its plan.
//   node --import tsx bench/probes/pg-silence-plan.mts
import pg from 'pg';
import { openPostgresStore } from '../../src/store/postgres/index.js';
import { jobRecord, jobSpec, t0Ms, timerAt } from '../../test/store/conformance-fixtures.js';
const url = 'postgres://postgres@127.0.0.1:5432/test';
const schema = 'silence_plan';
const client = new pg.Client({ connectionString: url });
await client.connect();
await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
const store = await openPostgresStore({ url, schema });
for (let start = 0; start < 50_000; start += 1_000) {
  await store.createJobs(Array.from({ length: 1_000 }, (_, i) => ({
    job: jobRecord(jobSpec({ max_silence_s: start + i < 100 ? 3_600 : null }), t0Ms), timer: timerAt(t0Ms + 60_000) })), t0Ms);
}
await client.query(`SET search_path = ${schema}`);
await client.query('ANALYZE jobs');
const startMs = performance.now();
const found = await store.findSilentJobs(null, t0Ms + 7_200_000, 1_000);
console.log(`findSilentJobs: ${found.length} found in ${(performance.now() - startMs).toFixed(1)} ms`);
const plan = await client.query(`EXPLAIN SELECT j.job_id FROM jobs j WHERE j.max_silence_s IS NOT NULL AND j.state = 'active'`);
console.log(plan.rows.map((row) => row['QUERY PLAN']).join('\n'));
await store.close();
await client.query(`DROP SCHEMA ${schema} CASCADE`);
await client.end();
