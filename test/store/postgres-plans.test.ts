// Plans the PostgreSQL store must keep while its tables' statistics lag what is in them: a
// schema analyzed while empty, then filled through the Store API, as a new cluster is and as a
// bulk create leaves a table until autovacuum's ANALYZE. The planner then guesses with default
// selectivities (0.5 % of rows for `team = x`, 99.5 % for `x IS NOT NULL`), and a statement
// that leaves it a choice may read a team's every row for one, or sort every expired lease to
// keep fifty. Each test explains a statement as the store sends it, on its connection and in
// its transaction (settings included), just before it runs; bench/probes/pg-plan-audit.ts measures
// the same statements at 100,000 jobs.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { LeasedRun } from '../../src/store/store.js';
import { fireTimersInBulk, jobRecord, jobSpec, minuteMs, t0Ms, timerAt } from './conformance-fixtures.js';
import { openTestStore, postgresSkipReason, type PostgresHandle } from './postgres-harness.js';

const skip = await postgresSkipReason();
const team = 'team-a';
const jobCount = 6_000;
const watchedCount = 10;
const leaseMs = 60_000;
const fireMs = t0Ms + minuteMs;

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Index Cond'?: string;
  Plans?: PlanNode[];
}

interface ExplainedPlan {
  Plan: PlanNode;
  JIT?: unknown;
}

function nodesOf(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(nodesOf)];
}

function describePlan(plan: ExplainedPlan): string {
  return nodesOf(plan.Plan).map((node) => [node['Node Type'], node['Relation Name'], node['Index Name']].filter(Boolean).join(' '))
    .join('\n');
}

type QueryFunction = (this: pg.Client, config: unknown, values?: unknown, callback?: unknown) => unknown;

/**
 * The plan of the first statement matching `pattern` that `call` makes the store send, explained
 * on the same connection (inside the same transaction, after its SET LOCALs) just before it runs.
 * `jitAtAnyCost` explains it as if every plan cost enough for JIT: the tables here are too small
 * to reach `jit_above_cost`, so only a statement that turns JIT off is planned without it.
 */
async function planOf(pattern: RegExp, call: () => Promise<unknown>, options: { jitAtAnyCost?: boolean } = {}):
  Promise<ExplainedPlan> {
  const prototype = pg.Client.prototype as unknown as { query: QueryFunction };
  const original = prototype.query;
  let plan: ExplainedPlan | undefined;
  prototype.query = function explainFirst(this: pg.Client, config: unknown, values?: unknown, callback?: unknown): unknown {
    const text = typeof config === 'string' ? config : (config as { text: string }).text;
    if (plan !== undefined || !pattern.test(text)) return original.call(this, config, values, callback);
    // pg-pool calls query(config, callback); a transaction calls query(config) for a promise.
    const done = typeof values === 'function' ? values : callback;
    const parameters = typeof config === 'string' ? (typeof values === 'function' ? undefined : values)
      : (config as { values?: unknown }).values;
    const session = (sql: string): Promise<unknown> => original.call(this, sql) as Promise<unknown>;
    const running = (async () => {
      if (options.jitAtAnyCost === true) await session('SET jit_above_cost = 0');
      const explained = await (original.call(this, { text: `EXPLAIN (FORMAT JSON) ${text}`, values: parameters }) as
        Promise<pg.QueryResult<{ 'QUERY PLAN': ExplainedPlan[] }>>);
      if (options.jitAtAnyCost === true) await session('RESET jit_above_cost');
      plan = explained.rows[0]!['QUERY PLAN'][0];
      return original.call(this, config, typeof values === 'function' ? undefined : values) as Promise<unknown>;
    })();
    if (typeof done !== 'function') return running;
    running.then((result) => (done as (error: unknown, result?: unknown) => void)(null, result),
      (error: unknown) => (done as (error: unknown) => void)(error));
    return undefined;
  };
  try {
    await call();
  } finally {
    prototype.query = original;
  }
  assert.ok(plan !== undefined, `the store sent a statement matching ${String(pattern)}`);
  return plan;
}

void describe('postgres store plans with statistics behind the tables', { skip: skip ?? false }, () => {
  let handle: PostgresHandle;
  let leased: LeasedRun[] = [];

  before(async () => {
    handle = await openTestStore();
    const { store, schema } = handle;
    // Analyzed while empty (a new schema), then filled: every later estimate uses defaults.
    const tables = await store.pool.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')`, [schema]);
    for (const { name } of tables.rows) await store.pool.query(`ANALYZE "${schema}"."${name}"`);
    for (let created = 0; created < jobCount; created += 2_000) {
      await store.createJobs(Array.from({ length: 2_000 }, (_, index) => ({
        job: jobRecord(jobSpec({
          max_silence_s: created + index < watchedCount ? 3_600 : null,
          key: (created + index) % 5 === 0 ? `k-${created + index}` : null,
        }), t0Ms, team),
        timer: timerAt(fireMs),
      })), t0Ms);
    }
    const timers = await fireTimersInBulk(store, jobCount / 2, fireMs);
    for (let batch = 0; batch < timers.length / 500; batch++) {
      leased.push(...await store.leaseRuns({ team, pool: 'pool-a', max: 500, leaseMs, workerId: 'worker-1', nowMs: fireMs }));
    }
    assert.equal(leased.length, timers.length, 'every run dispatched is leased');
  });

  after(async () => {
    leased = [];
    await handle?.cleanup();
  });

  void it('lists a job\'s runs through runs_job alone, not its team\'s every run', async () => {
    const run = leased[0]!;
    const plan = await planOf(/FROM runs r WHERE/, () => handle.store.listRuns({ team, jobId: run.jobId, limit: 50 }));
    const indexes = nodesOf(plan.Plan).map((node) => node['Index Name']).filter(Boolean);
    assert.ok(indexes.includes('runs_job') && !indexes.includes('runs_team'), describePlan(plan));
  });

  void it('finds silent jobs through jobs_watched, with a team or without, and does not JIT-compile the read', async () => {
    for (const scope of [null, team]) {
      const plan = await planOf(/max_silence_s IS NOT NULL/, () => handle.store.findSilentJobs(scope, fireMs, 1_000),
        { jitAtAnyCost: true });
      const readsOfJobs = nodesOf(plan.Plan).filter((node) => node['Relation Name'] === 'jobs');
      assert.deepEqual(readsOfJobs.map((node) => `${node['Node Type']} ${node['Index Name']}`), ['Index Scan jobs_watched'],
        `${scope}:\n${describePlan(plan)}`);
      assert.equal(plan.JIT, undefined, `${scope}: no JIT`);
    }
  });

  void it('runs every statement with JIT off: a cost estimate behind the rows cannot make a key read compile', async () => {
    const client = await handle.store.pool.connect();
    try {
      assert.equal((await client.query<{ jit: string }>('SHOW jit')).rows[0]!.jit, 'off');
    } finally {
      client.release();
    }
  });

  void it('expires leases in due order down active_runs_deadline, reading no more than it takes', async () => {
    const plan = await planOf(/FOR UPDATE OF r SKIP LOCKED/, () => handle.store.expireRunLeases(fireMs + leaseMs, 50));
    const nodes = nodesOf(plan.Plan);
    // The job's other queue rows (releases_held: any held run of the job) are probed by key.
    const queueReads = nodes.filter((node) => node['Relation Name'] === 'active_runs'
      && node['Index Name'] !== 'active_runs_job' && node['Index Name'] !== 'active_runs_held');
    assert.deepEqual(queueReads.map((node) => `${node['Node Type']} ${node['Index Name']}`), ['Index Scan active_runs_deadline'],
      describePlan(plan));
    assert.ok(!nodes.some((node) => node['Node Type'] === 'Sort'), `no sort of every expired lease:\n${describePlan(plan)}`);
  });

  void it('finds held runs through active_runs_held, not by walking every queue row', async () => {
    const plan = await planOf(/SELECT DISTINCT q\.job_id FROM active_runs q/, () => handle.store.releaseStrandedHeldRuns(fireMs, 100));
    // active_runs_job serves the check for another active run of each held run's job.
    const queueReads = nodesOf(plan.Plan).filter((node) => node['Index Name']?.startsWith('active_runs') === true
      && node['Index Name'] !== 'active_runs_job' || (node['Relation Name'] === 'active_runs' && node['Node Type'] === 'Seq Scan'));
    assert.deepEqual(queueReads.map((node) => node['Index Name']), ['active_runs_held'], describePlan(plan));
  });

  void it('counts a limited team\'s pending work through jobs_quota_pending and active_runs_team_ready alone', async () => {
    await handle.store.putTeamLimits([{ team, createPerS: null, pendingMax: 100_000, dispatchPerS: null, weight: 1 }], fireMs);
    const quota = { team, createPerS: null, pendingMax: 100_000 };
    const plan = await planOf(/quota_pending_team = \$1/, () =>
      handle.store.createJobsWithinQuota([{ job: jobRecord(jobSpec(), fireMs, team), timer: timerAt(fireMs + minuteMs) }], fireMs, quota));
    const nodes = nodesOf(plan.Plan);
    assert.deepEqual([...new Set(nodes.map((node) => node['Index Name']).filter(Boolean))].sort(),
      ['active_runs_team_ready', 'jobs_quota_pending'], describePlan(plan));
    assert.ok(!nodes.some((node) => node['Node Type'] === 'Seq Scan'), describePlan(plan));
  });

  // Last: it cancels jobs (22 of them, none watched).
  void it('cancels by key prefix through a range of jobs_team_key, not its team\'s every job', async () => {
    const plan = await planOf(/starts_with/, () => handle.store.cancelJobsByKeyPrefix(team, 'k-59', fireMs));
    const jobReads = nodesOf(plan.Plan).filter((node) => node['Index Name']?.startsWith('jobs_') === true
      && node['Index Name'] !== 'jobs_pkey');
    assert.deepEqual(jobReads.map((node) => node['Index Name']), ['jobs_team_key'], describePlan(plan));
    assert.match(jobReads[0]!['Index Cond'] ?? '', /key >= .*key < /, 'the prefix is the index scan\'s range');
  });
});
