// Every statement the PostgreSQL store sends, captured while its Store methods run on a schema
// filled by pg-plan-audit-setup.ts, then explained (EXPLAIN ANALYZE, rolled back) as a custom
// plan and as a generic one, in the context it ran in (a transaction's SET LOCALs included).
// A statement is flagged when its scans read over 20 times the rows it answers, or JIT ran.
// `--empty-generic` makes the schema afresh and builds every prepared statement's generic plan
// on it while empty, on one connection, then fills it and executes those kept plans.
//   node --import tsx bench/probes/pg-plan-audit-setup.ts --schema pa_empty --stats empty
//   node --import tsx bench/probes/pg-plan-audit.ts --schema pa_empty [--only substring] [--plans]
//   node --import tsx bench/probes/pg-plan-audit.ts --schema pa_keep --empty-generic
import { parseArgs } from 'node:util';
import pg from 'pg';
import { preparedStatements } from '../../src/store/postgres/connection.js';
import { openPostgresStore } from '../../src/store/postgres/index.js';
import { loadTimersByRef } from '../../src/store/postgres/timers.js';
import type { StoreContext } from '../../src/store/postgres/context.js';
import { minuteMs, t0Ms, timerAt } from '../../test/store/conformance-fixtures.js';
// @ts-expect-error no declarations for pg's internals
import { prepareValue } from 'pg/lib/utils.js';
import { analyzeSchema, fill } from './pg-plan-audit-setup.js';

const { values: options } = parseArgs({ options: {
  schema: { type: 'string', default: 'pa_empty' },
  only: { type: 'string' },
  plans: { type: 'boolean', default: false },
  'empty-generic': { type: 'boolean', default: false },
} });
const url = 'postgres://postgres@127.0.0.1:5432/test';
const schema = options.schema;
const admin = new pg.Client({ connectionString: url });
await admin.connect();
await admin.query(`SET search_path = ${schema}`);

interface Captured { text: string; values: unknown[]; inTx: boolean; operation: string; prepared: boolean; settings: string[] }
const captured = new Map<string, Captured>();
let operation = '';
const inTx = new WeakMap<object, boolean>();
const settingsOf = new WeakMap<object, string[]>();
const preparedNames = () => new Set(preparedStatements().map((s) => s.name));
const originalQuery = pg.Client.prototype.query;
// Generic plans built on the empty schema, kept on this connection while the tables fill.
const keeper = new pg.Client({ connectionString: url });
await keeper.connect();
const keptIndex = new Map<string, number>();
if (options['empty-generic']) {
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  const empty = await openPostgresStore({ url, schema, useDatabaseClock: false, poolSize: 4 });
  await analyzeSchema(admin, schema);
  await keeper.query(`SET search_path = ${schema}; SET plan_cache_mode = force_generic_plan`);
  for (const [index, statement] of preparedStatements().entries()) {
    const parameterCount = Math.max(0, ...[...statement.text.matchAll(/\$(\d+)/g)].map((match) => Number(match[1])));
    await keeper.query(`PREPARE kept_${index} AS ${statement.text}`);
    await keeper.query(statement.autocommit ? 'BEGIN' : 'BEGIN; SET LOCAL enable_seqscan = off');
    await keeper.query(`EXPLAIN EXECUTE kept_${index}${parameterCount > 0 ? `(${Array(parameterCount).fill('NULL').join(', ')})` : ''}`);
    await keeper.query('ROLLBACK');
    keptIndex.set(statement.text, index);
  }
  await fill(empty, 100_000, 30_000);
  await empty.close();
  console.log(`filled ${schema}; ${keptIndex.size} generic plans kept from the empty schema`);
}
// eslint-disable-next-line @typescript-eslint/no-explicit-any
(pg.Client.prototype as any).query = function patched(this: pg.Client, config: any, values?: any, callback?: any) {
  const text: string = typeof config === 'string' ? config : config.text;
  const vals: unknown[] = (typeof config === 'string' ? values : config.values ?? values) ?? [];
  if (text.startsWith('BEGIN')) {
    inTx.set(this, text.includes('enable_seqscan'));
    settingsOf.set(this, []);
  } else if (text === 'COMMIT' || text === 'ROLLBACK') inTx.set(this, false);
  else if (text.startsWith('SET LOCAL')) settingsOf.get(this)?.push(text);
  else if (operation !== '' && !captured.has(`${operation}\n${text}`)) {
    captured.set(`${operation}\n${text}`, { text, values: vals, inTx: inTx.get(this) ?? false, operation,
      settings: inTx.get(this) ? [...(settingsOf.get(this) ?? [])] : [],
      prepared: typeof config === 'object' && config.name !== undefined && preparedNames().has(config.name) });
  }
  return (originalQuery as (...args: unknown[]) => unknown).call(this, config, values, callback);
};

const store = await openPostgresStore({ url, schema, useDatabaseClock: false, poolSize: 2, leaseNodeId: 'node-a' });
const context = (store as unknown as { context: StoreContext }).context;
const one = async <T extends pg.QueryResultRow>(sql: string): Promise<T> => (await admin.query<T>(sql)).rows[0]!;
const many = async <T extends pg.QueryResultRow>(sql: string): Promise<T[]> => (await admin.query<T>(sql)).rows;
const nowMs = t0Ms + 3 * minuteMs;
const step = async (name: string, body: () => Promise<unknown>): Promise<void> => {
  operation = name;
  try {
    await body();
  } catch (error) {
    console.log(`${name}: ${(error as Error).message}`);
  }
  operation = '';
};

const job = await one<{ job_id: string; version: number; shard: number }>(
  `SELECT job_id, version, shard FROM jobs WHERE team = 'team-a' AND state = 'active' ORDER BY job_id DESC LIMIT 1 OFFSET 500`);
const cancelIds = (await many<{ job_id: string }>(
  `SELECT job_id FROM jobs WHERE team = 'team-a' AND state = 'active' ORDER BY md5(job_id) LIMIT 64`)).map((r) => r.job_id);
const running = await many<{ run_id: string; job_id: string; token: string }>(
  `SELECT run_id, job_id, fencing_token::text AS token FROM runs WHERE status = 'running' ORDER BY run_id LIMIT 60`);
const doneRun = await one<{ run_id: string; job_id: string }>(`SELECT run_id, job_id FROM runs WHERE status = 'succeeded' LIMIT 1`);
const keyed = await one<{ key: string }>(`SELECT key FROM jobs WHERE team = 'team-a' AND key IS NOT NULL LIMIT 1 OFFSET 777`);
const leases = await store.acquireShardLeases('node-a', Array.from({ length: 1024 }, (_, i) => i), 3_600_000, nowMs, { force: true });
const tokenOf = new Map(leases.map((lease) => [lease.shard, lease.token]));

await step('getJob', () => store.getJob('team-a', job.job_id));
await step('getJob(null)', () => store.getJob(null, job.job_id));
await step('listJobs', () => store.listJobs({ team: 'team-a', limit: 50 }));
await step('listJobs state', () => store.listJobs({ team: 'team-a', state: 'paused', limit: 50 }));
await step('getRun', () => store.getRun('team-a', doneRun.run_id));
await step('listRuns job', () => store.listRuns({ team: 'team-a', jobId: doneRun.job_id, limit: 50 }));
await step('listRuns status', () => store.listRuns({ team: 'team-a', status: 'dead', limit: 50 }));
await step('findSilentJobs', () => store.findSilentJobs(null, nowMs + 7_200_000, 1000));
await step('findSilentJobs team', () => store.findSilentJobs('team-a', nowMs + 7_200_000, 1000));
await step('findJobsWithoutTimer', () => store.findJobsWithoutTimer(100));
await step('countJobsWithoutTimer', () => store.countJobsWithoutTimer());
await step('repairJobTimer', () => store.repairJobTimer(job.job_id, job.version, timerAt(nowMs + minuteMs), nowMs));
await step('loadTimers', () => store.loadTimers({ shards: [...tokenOf.keys()], untilMs: Number.MAX_SAFE_INTEGER, limit: 1000 }));
const timers = await store.loadTimers({ shards: [...tokenOf.keys()], untilMs: Number.MAX_SAFE_INTEGER, limit: 200 });
await step('loadTimersByRef', () => loadTimersByRef(context, timers.slice(0, 50).map((t) => ({ fireAtMs: t.fireAtMs, timerId: t.timerId }))));
await step('dispatch', () => store.dispatch(timers.slice(0, 100).map((timer) => ({
  shard: timer.shard, shardToken: tokenOf.get(timer.shard)!, timerId: timer.timerId, jobId: timer.jobId,
  occurrences: [{ scheduledAtMs: timer.scheduledAtMs, fireAtMs: timer.fireAtMs, status: 'ready' as const }],
  nextTimer: timerAt(timer.scheduledAtMs + minuteMs),
})), nowMs));
await step('leaseRuns', () => store.leaseRuns({ team: 'team-a', pool: 'pool-a', max: 10, leaseMs: null, workerId: 'w2', nowMs }));
await step('leaseRuns ahead', () => store.leaseRuns({ team: null, pool: 'pool-a', max: 10, readyMax: 5, aheadMs: 1000, leaseMs: null,
  workerId: 'w2', nowMs }));
await step('heartbeatRun', () => store.heartbeatRun('team-a', running[0]!.run_id, running[0]!.token, nowMs));
await step('heartbeatRun miss', () => store.heartbeatRun('team-a', running[1]!.run_id, '1', nowMs));
await step('completeRun ok', () => Promise.all(running.slice(2, 22).map((run) => store.completeRun({
  team: 'team-a', runId: run.run_id, fencingToken: run.token, status: 'succeeded', error: null, result: null, nowMs }))));
await step('completeRun failed', () => Promise.all(running.slice(22, 42).map((run) => store.completeRun({
  team: 'team-a', runId: run.run_id, fencingToken: run.token, status: 'failed', error: 'x', result: null, nowMs }))));
await step('expireRunLeases', () => store.expireRunLeases(nowMs + 700_000, 50));
await step('releaseStrandedHeldRuns', () => store.releaseStrandedHeldRuns(nowMs, 100));
await step('shortenLeasesOfGoneNodes', () => store.shortenLeasesOfGoneNodes(['node-b'], nowMs, 1000));
await step('nextLeaseExpiryMs', () => store.nextLeaseExpiryMs());
await step('nextReadyAtMs', () => store.nextReadyAtMs('team-a', 'pool-a'));
await step('replayRun', () => store.replayRun('team-a', doneRun.run_id, nowMs));
await step('triggerJob', () => store.triggerJob('team-a', job.job_id, nowMs));
const fresh = await one<{ job_id: string; version: number }>(
  `SELECT job_id, version FROM jobs WHERE team = 'team-a' AND state = 'active' ORDER BY job_id LIMIT 1 OFFSET 900`);
const aheadTimers = (await store.loadTimers({ shards: [...tokenOf.keys()], untilMs: Number.MAX_SAFE_INTEGER, limit: 400 })).slice(300, 400);
await step('writeRunsAhead', () => store.writeRunsAhead(aheadTimers.map((timer) => ({
  shard: timer.shard, shardToken: tokenOf.get(timer.shard)!, timerId: timer.timerId, jobId: timer.jobId,
  occurrences: [{ scheduledAtMs: timer.scheduledAtMs, fireAtMs: timer.fireAtMs + 3_600_000, status: 'ready' as const }],
})), nowMs));
await step('changeJob ahead', async () => {
  const current = (await store.getJob('team-a', aheadTimers[0]!.jobId))!;
  return store.changeJob({ team: 'team-a', jobId: current.jobId, expectedVersion: current.version, timer: null, nowMs, state: 'paused' });
});
await step('cancelJobs ahead', () => store.cancelJobs('team-a', aheadTimers.slice(1, 65).map((t) => t.jobId), nowMs));
await step('changeJob', async () => {
  const current = (await store.getJob('team-a', fresh.job_id))!;
  return store.changeJob({ team: 'team-a', jobId: fresh.job_id, expectedVersion: current.version, spec: null, state: 'paused',
    timer: null, nowMs, requestHash: null } as unknown as Parameters<typeof store.changeJob>[0]);
});
await step('cancelJob', () => store.cancelJob('team-a', cancelIds[0]!, nowMs));
await step('cancelJobs', () => store.cancelJobs('team-a', cancelIds.slice(1), nowMs));
await step('cancelJobsByKeyPrefix', () => store.cancelJobsByKeyPrefix('team-a', keyed.key, nowMs));
await step('renewShardLeases', () => store.renewShardLeases('node-a', leases.slice(0, 10), 3_600_000, nowMs));
await step('releaseShardLeases', () => store.releaseShardLeases('node-a', leases.slice(0, 2)));
await store.close();

interface PlanNode {
  'Node Type': string; 'Relation Name'?: string; 'Index Name'?: string; 'Plan Rows': number; 'Actual Rows': number;
  'Actual Loops': number; 'Rows Removed by Filter'?: number; 'Rows Removed by Index Recheck'?: number;
  'Index Cond'?: string; 'Shared Hit Blocks': number; 'Shared Read Blocks': number; Plans?: PlanNode[];
  'Subplan Name'?: string; 'CTE Name'?: string;
}
const scanTypes = /Scan$/;
function walk(node: PlanNode, depth: number, lines: string[], totals: { scanned: number }): void {
  const loops = node['Actual Loops'];
  const removed = (node['Rows Removed by Filter'] ?? 0) + (node['Rows Removed by Index Recheck'] ?? 0);
  if (scanTypes.test(node['Node Type']) && node['Node Type'] !== 'CTE Scan' && node['Node Type'] !== 'Function Scan') {
    totals.scanned += (node['Actual Rows'] + removed) * loops;
  }
  const target = [node['Relation Name'], node['Index Name'] && `idx ${node['Index Name']}`, node['CTE Name'] && `cte ${node['CTE Name']}`]
    .filter(Boolean).join(' ');
  const cond = node['Index Cond'] ? ` cond=${node['Index Cond'].slice(0, 60)}` : (node['Index Name'] ? ' (NO INDEX COND)' : '');
  lines.push(`${'  '.repeat(depth)}${node['Node Type']} ${target} est=${node['Plan Rows']} act=${node['Actual Rows']}x${loops}`
    + `${removed > 0 ? ` removed=${removed}` : ''}${cond}`);
  for (const child of node.Plans ?? []) walk(child, depth + 1, lines, totals);
}

const client = new pg.Client({ connectionString: url });
await client.connect();
await client.query(`SET search_path = ${schema}`);
const literal = (value: unknown): string => {
  const prepared = prepareValue(value) as string | null;
  return prepared === null ? 'NULL' : client.escapeLiteral(String(prepared));
};
async function explain(entry: Captured, generic: boolean): Promise<{ ms: number; jitMs: number; rows: number; scanned: number; buffers: number; lines: string[] }> {
  await client.query(entry.inTx ? 'BEGIN; SET LOCAL enable_seqscan = off' : 'BEGIN');
  for (const setting of entry.settings) await client.query(setting);
  try {
    let result;
    const kept = keptIndex.get(entry.text);
    if (generic && kept !== undefined) {
      await keeper.query(entry.inTx ? 'BEGIN; SET LOCAL enable_seqscan = off' : 'BEGIN');
      try {
        result = await keeper.query<{ 'QUERY PLAN': [{ Plan: PlanNode; 'Execution Time': number }] }>(
          `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE kept_${kept}(${entry.values.map(literal).join(', ')})`);
      } finally {
        await keeper.query('ROLLBACK');
      }
    } else if (generic) {
      await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
      await client.query(`PREPARE audit_probe AS ${entry.text}`);
      result = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode; 'Execution Time': number }] }>(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE audit_probe(${entry.values.map(literal).join(', ')})`);
    } else {
      result = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode; 'Execution Time': number }] }>(
        `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${entry.text}`, entry.values);
    }
    const [top] = result.rows[0]!['QUERY PLAN'] as unknown as [{ Plan: PlanNode; 'Execution Time': number; JIT?: { Timing: { Total: number } } }];
    const lines: string[] = [];
    const totals = { scanned: 0 };
    walk(top.Plan, 1, lines, totals);
    if (top.JIT !== undefined) lines.unshift(`  JIT ${top.JIT.Timing.Total.toFixed(1)} ms`);
    return { ms: top['Execution Time'], jitMs: top.JIT?.Timing.Total ?? 0, rows: top.Plan['Actual Rows'], scanned: totals.scanned,
      buffers: top.Plan['Shared Hit Blocks'] + top.Plan['Shared Read Blocks'], lines };
  } finally {
    await client.query('ROLLBACK');
    await client.query('DEALLOCATE ALL');
  }
}

for (const entry of captured.values()) {
  if (options.only !== undefined && !entry.operation.includes(options.only) && !entry.text.includes(options.only)) continue;
  if (entry.text.startsWith('SET LOCAL')) continue;
  const head = entry.text.replace(/\s+/g, ' ').slice(0, 90);
  for (const generic of options['empty-generic'] ? [true] : [false, true]) {
    if (options['empty-generic'] && !keptIndex.has(entry.text)) continue;
    try {
      const r = await explain(entry, generic);
      const flag = (r.scanned > 20 * Math.max(r.rows, 50) ? '  <<< SCANS MORE' : '') + (r.jitMs > 0 ? `  <<< JIT ${r.jitMs.toFixed(0)} ms` : '');
      console.log(`${entry.operation} [${entry.prepared ? 'prepared' : 'unnamed'}${entry.inTx ? ', tx' : ''}] ${generic ? (keptIndex.has(entry.text) ? 'KEPT-FROM-EMPTY' : 'GENERIC') : 'custom '}`
        + ` ${r.ms.toFixed(2)} ms rows=${r.rows} scanned=${r.scanned} buffers=${r.buffers}${flag} :: ${head}`);
      if (options.plans || flag !== '') console.log(r.lines.join('\n'));
    } catch (error) {
      console.log(`${entry.operation} ${generic ? 'GENERIC' : 'custom'}: explain failed: ${(error as Error).message} :: ${head}`);
    }
  }
}
await client.end();
await keeper.end();
await admin.end();
