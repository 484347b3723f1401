// What only the PostgreSQL store has: migrations racing from several nodes, timer
// partitions created ahead and dropped when past and empty, notifications across store
// instances, shard-lease expiry by the database's clock, and outages that answer
// `unavailable` fast and heal without a restart (a TCP proxy we control stands between the
// store and the server, so "PostgreSQL went away" is real and local to the test).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import { describe, it } from 'node:test';
import pg from 'pg';
import { isTicklerError } from '../../src/errors.js';
import { FatalError } from '../../src/fatal-error.js';
import { booleanArray, jsonTextArray, numberArray, textArray } from '../../src/store/postgres/array-literals.js';
import { beginSql, preparedStatements, withClient, withDefaultUser } from '../../src/store/postgres/connection.js';
import { shardFenceSql } from '../../src/store/postgres/dispatch.js';
import { openPostgresStore } from '../../src/store/postgres/index.js';
import { listPartitions, partitionDurationMs } from '../../src/store/postgres/partitions.js';
import { migrate, schemaVersion } from '../../src/store/postgres/schema.js';
import type { LeasedRun, LoadedTimer } from '../../src/store/store.js';
import {
  assertOnlyWatchedAfterUpgrade, createJob, dispatchItem, firePending, jobRecord, jobSpec, leaseOne, minuteMs, ownShard,
  pendingTimerOf, t0Ms, timerAt,
} from './conformance-fixtures.js';
import {
  assertActiveRunsQueued, dropSchema, freshSchemaName, openTestStore, openTestStoreBehindProxy, postgresSkipReason, testPgUrl,
} from './postgres-harness.js';

const skip = await postgresSkipReason();

/** Resolves with the first value `subscribe` delivers that satisfies `accept`. */
function nextEvent<T>(subscribe: (listener: (value: T) => void) => () => void, accept: (value: T) => boolean = () => true):
  Promise<T> {
  return new Promise((resolve) => {
    const unsubscribe = subscribe((value) => {
      if (!accept(value)) return;
      unsubscribe();
      resolve(value);
    });
  });
}

async function expectUnavailable(call: Promise<unknown>, withinMs: number): Promise<void> {
  const startedMs = performance.now();
  await assert.rejects(call, (error: unknown) => isTicklerError(error) && error.code === 'unavailable');
  assert.ok(performance.now() - startedMs < withinMs, `rejected within ${withinMs} ms`);
}

void describe('postgres store', { skip: skip ?? false }, () => {
  void it('migrates once when several nodes start at once', async () => {
    const schema = freshSchemaName();
    try {
      const stores = await Promise.all(Array.from({ length: 4 }, () =>
        openPostgresStore({ url: testPgUrl, schema, useDatabaseClock: false, poolSize: 2 })));
      const versions = await stores[0]!.pool.query<{ version: number }>('SELECT version FROM tickler_migrations');
      assert.deepEqual(versions.rows.map((row) => row.version), Array.from({ length: schemaVersion }, (_, index) => index + 1));
      await Promise.all(stores.map((store) => store.close()));
    } finally {
      await dropSchema(schema);
    }
  });

  void it('refuses a schema a newer build migrated, with a FatalError saying so', async () => {
    const schema = freshSchemaName();
    try {
      const store = await openPostgresStore({ url: testPgUrl, schema, useDatabaseClock: false, poolSize: 2 });
      await store.pool.query('INSERT INTO tickler_migrations (version) VALUES ($1)', [schemaVersion + 1]);
      await store.close();
      await assert.rejects(openPostgresStore({ url: testPgUrl, schema, useDatabaseClock: false, poolSize: 2 }), (error: unknown) =>
        error instanceof FatalError && error.message === `the PostgreSQL schema ${schema} has migration ${schemaVersion + 1}, ` +
          `newer than this build understands (${schemaVersion}): a newer tickler upgraded it; run that version or a later one on it`);
    } finally {
      await dropSchema(schema);
    }
  });

  void it('refuses a database that does not exist with a FatalError naming it, the password hidden', async () => {
    const url = new URL(testPgUrl);
    url.pathname = `/no_such_database_${freshSchemaName()}`;
    url.password = 'secret-password';
    await assert.rejects(openPostgresStore({ url: url.toString(), useDatabaseClock: false, poolSize: 1 }), (error: unknown) =>
      error instanceof FatalError && error.message.includes(`${url.pathname.slice(1)}" does not exist (SQLSTATE 3D000)`) &&
        !error.message.includes('secret-password'));
  });

  void it('upgrades a version 5 database: max_silence_s is filled from each job\'s spec, so its jobs are watched', async () => {
    const schema = freshSchemaName();
    try {
      const store = await openPostgresStore({ url: testPgUrl, schema, useDatabaseClock: false, poolSize: 2 });
      const watched = await createJob(store, { spec: { max_silence_s: 60 } });
      await createJob(store, { spec: { max_silence_s: null } });
      // Back to version 5 as a version 5 build left it: no column, no index.
      await store.pool.query('DROP INDEX jobs_watched');
      await store.pool.query('ALTER TABLE jobs DROP COLUMN max_silence_s');
      await store.pool.query('DELETE FROM tickler_migrations WHERE version = 6');
      await store.close();
      await assertOnlyWatchedAfterUpgrade(
        () => openPostgresStore({ url: testPgUrl, schema, useDatabaseClock: false, poolSize: 2 }), watched.jobId);
    } finally {
      await dropSchema(schema);
    }
  });

  void it('upgrades a version 6 database: its pending timers are not marked, and fire in two stages after', async () => {
    const schema = freshSchemaName();
    try {
      const store = await openPostgresStore({ url: testPgUrl, schema, useDatabaseClock: false, poolSize: 2 });
      const job = await createJob(store, { timer: timerAt(t0Ms + minuteMs) });
      // Back to version 6 as a version 6 build left it: no ahead_run_id column.
      await store.pool.query('ALTER TABLE jobs DROP COLUMN ahead_run_id');
      await store.pool.query('DELETE FROM tickler_migrations WHERE version = 7');
      await store.close();
      const upgraded = await openPostgresStore({ url: testPgUrl, schema, useDatabaseClock: false, poolSize: 2 });
      try {
        const timer = (await pendingTimerOf(upgraded, job))!;
        assert.equal(timer.dispatchedAhead, undefined);
        const lease = await ownShard(upgraded, job.shard, t0Ms);
        const [ahead] = await upgraded.writeRunsAhead([dispatchItem(lease, timer)], t0Ms + 1_000);
        assert.equal(ahead?.kind, 'written_ahead');
        assert.equal((await pendingTimerOf(upgraded, job))?.dispatchedAhead, true);
      } finally {
        await upgraded.close();
      }
    } finally {
      await dropSchema(schema);
    }
  });

  void it('upgrades a version 8 database: keys compare as "C", held runs get their index, and both serve', async () => {
    const schema = freshSchemaName();
    try {
      const store = await openPostgresStore({ url: testPgUrl, schema, useDatabaseClock: false, poolSize: 2 });
      const keys = ['cart/1', 'cart/2', 'cartX', 'Cart/3'];
      const jobs = await Promise.all(keys.map((key) => createJob(store, { spec: { key, overlap: 'buffer_one' } })));
      // A held run: the second occurrence of a buffer_one job whose first is still active.
      const [first] = jobs;
      await firePending(store, first!, t0Ms + minuteMs);
      await firePending(store, first!, t0Ms + 2 * minuteMs);
      // Back to version 8 as a version 8 build left it: keys in the database's collation, no index of held runs.
      await store.pool.query('DROP INDEX active_runs_held');
      await store.pool.query('ALTER TABLE jobs ALTER COLUMN key TYPE text COLLATE "default"');
      await store.pool.query('DELETE FROM tickler_migrations WHERE version IN (9, 10)');
      await store.close();
      const upgraded = await openPostgresStore({ url: testPgUrl, schema, useDatabaseClock: false, poolSize: 2 });
      try {
        const column = await upgraded.pool.query<{ collation: string }>(
          `SELECT collation_name AS collation FROM information_schema.columns
            WHERE table_schema = $1 AND table_name = 'jobs' AND column_name = 'key'`, [schema]);
        assert.equal(column.rows[0]?.collation, 'C');
        const held = await upgraded.pool.query<{ job_id: string }>('SELECT job_id FROM active_runs WHERE held');
        assert.deepEqual(held.rows.map((row) => row.job_id), [first!.jobId], 'the run held before the upgrade');
        const indexed = await upgraded.pool.query<{ indexdef: string }>(
          `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'active_runs_held'`, [schema]);
        assert.match(indexed.rows[0]?.indexdef ?? '', /\(job_id\) WHERE held$/);
        const [again] = await upgraded.createJobs(
          [{ job: jobRecord(jobSpec({ key: 'cart/1', overlap: 'buffer_one' }), t0Ms), timer: timerAt(t0Ms + minuteMs) }], t0Ms);
        assert.equal(again?.kind === 'existing' && again.job.jobId, first!.jobId, 'a key is still unique, and found');
        assert.equal(await upgraded.cancelJobsByKeyPrefix('team-a', 'cart/', t0Ms + 3 * minuteMs), 2);
        const active = (await upgraded.listJobs({ team: null, state: 'active', limit: 10 })).items.map((job) => job.spec.key).sort();
        assert.deepEqual(active, ['Cart/3', 'cartX']);
      } finally {
        await upgraded.close();
      }
    } finally {
      await dropSchema(schema);
    }
  });

  void it('upgrades a version 2 database: active runs are queued in active_runs, timerless jobs still found', async () => {
    const schema = freshSchemaName();
    const client = new pg.Client({ connectionString: withDefaultUser(testPgUrl) });
    await client.connect();
    try {
      await migrate(client, schema, 2);
      await client.query(`SET search_path = "${schema}"`);
      await client.query(
        `INSERT INTO runs (run_id, job_id, team, pool, lane, scheduled_at, fire_at, status, ready_at, lease_expires_at,
                           fencing_token, finished_at, held)
         VALUES ('r-ready', 'j1', 't', 'p', 'P1', 1, 1, 'ready', 10, NULL, NULL, NULL, false),
                ('r-held', 'j1', 't', 'p', 'P1', 2, 2, 'ready', 11, NULL, NULL, NULL, true),
                ('r-running', 'j2', 't', 'p', 'P0', 1, 1, 'running', NULL, 500, 7, NULL, false),
                ('r-retry', 'j3', 't', 'p', 'P2', 1, 1, 'retry_wait', 300, NULL, NULL, NULL, false),
                ('r-done', 'j4', 't', 'p', 'P1', 1, 1, 'succeeded', NULL, NULL, 8, 20, false)`);
      await client.query(
        `INSERT INTO jobs (job_id, team, state, pool, spec, request_hash, shard, version, timer_id, created_at, updated_at)
         VALUES ('j-orphan', 't', 'active', 'p', '{"schedule": {"cron": "* * * * *"}}', 'h', 0, 1, NULL, 0, 0),
                ('j-timed', 't', 'active', 'p', '{"schedule": {"cron": "* * * * *"}}', 'h', 0, 1, 'timer-1', 0, 0)`);
      const store = await openPostgresStore({ url: testPgUrl, schema, useDatabaseClock: false, poolSize: 2 });
      try {
        const queued = await client.query<{ run_id: string; status: string; held: boolean; due_at: number }>(
          'SELECT run_id, status, held, due_at::int AS due_at FROM active_runs ORDER BY run_id');
        assert.deepEqual(queued.rows, [
          { run_id: 'r-held', status: 'ready', held: true, due_at: 11 },
          { run_id: 'r-ready', status: 'ready', held: false, due_at: 10 },
          { run_id: 'r-retry', status: 'retry_wait', held: false, due_at: 300 },
          { run_id: 'r-running', status: 'running', held: false, due_at: 500 },
        ]);
        await assertActiveRunsQueued(schema);
        assert.equal(await store.nextLeaseExpiryMs(), 500, 'a retry is no lease deadline');
        assert.equal(await store.nextReadyAtMs('t', 'p'), 10, 'the held run is not leasable');
        assert.equal(await store.countJobsWithoutTimer(), 1, 'needs_timer (version 4) is computed for existing jobs');
      } finally {
        await store.close();
      }
    } finally {
      await client.end();
      await dropSchema(schema);
    }
  });

  void it('creates partitions ahead, moves rows out of the default one, drops past empty ones', async () => {
    const handle = await openTestStore();
    try {
      const { store } = handle;
      const dayMs = partitionDurationMs;
      // Far from the real date, so the partitions made at open (by the database clock) are past.
      const baseMs = t0Ms + 400 * dayMs;
      const dayName = (atMs: number): string => `timers_${new Date(atMs).toISOString().slice(0, 10).replaceAll('-', '')}`;
      const first = await store.maintainPartitions(baseMs);
      assert.deepEqual(first.created, [0, 1, 2, 3].map((day) => dayName(baseMs + day * dayMs)), 'today and three ahead');
      const farJob = await createJob(store, { nowMs: baseMs, timer: timerAt(baseMs + 10 * dayMs) });
      const soonJob = await createJob(store, { nowMs: baseMs, timer: timerAt(baseMs + 60_000) });
      const client = await store.pool.connect();
      try {
        const defaultRows = await client.query('SELECT timer_id FROM timers_default');
        assert.equal(defaultRows.rowCount, 1, 'only the far-future timer waits in the default partition');
        // Ten days later: the far timer's day gets its partition; the first days are past.
        const later = await store.maintainPartitions(baseMs + 10 * dayMs);
        assert.ok(later.created.includes(dayName(baseMs + 10 * dayMs)));
        assert.equal((await client.query('SELECT 1 FROM timers_default')).rowCount, 0, 'moved out of the default');
        assert.deepEqual(later.dropped.sort(), [1, 2, 3].map((day) => dayName(baseMs + day * dayMs)),
          'past empty partitions dropped; the one holding an overdue timer kept');
        assert.equal((await pendingTimerOf(store, farJob))?.fireAtMs, baseMs + 10 * dayMs);
        assert.equal((await pendingTimerOf(store, soonJob))?.fireAtMs, baseMs + 60_000, 'an overdue timer survives');
        await store.cancelJob(null, soonJob.jobId, baseMs + 10 * dayMs);
        const afterCancel = await store.maintainPartitions(baseMs + 10 * dayMs);
        assert.deepEqual(afterCancel.dropped, [dayName(baseMs)], 'its partition leaves once the cancel emptied it');
        const names = (await listPartitions(client)).map((partition) => partition.name).sort();
        assert.deepEqual(names, [...[10, 11, 12, 13].map((day) => dayName(baseMs + day * dayMs)), 'timers_default']);
      } finally {
        client.release();
      }
    } finally {
      await handle.cleanup();
    }
  });

  void it('tells listeners in another store instance about ready runs and near timers, chunked', async () => {
    const handle = await openTestStore();
    try {
      const { store } = handle;
      const peer = await handle.openPeer();
      const job = await createJob(store, { timer: null });
      const readyPool = nextEvent<string>((listener) => peer.onRunsReady(listener));
      await store.triggerJob(null, job.jobId, t0Ms);
      assert.equal(await readyPool, 'pool-a');

      // 300 near timers in one create: more than one 8000-byte NOTIFY payload.
      const jobs = Array.from({ length: 300 }, () => jobRecord(jobSpec(), t0Ms));
      const heard = new Map<string, LoadedTimer>();
      const allHeard = new Promise<void>((resolve) => {
        const unsubscribe = peer.onNearTimers((timers) => {
          for (const timer of timers) heard.set(timer.jobId, timer);
          if (heard.size === jobs.length) {
            unsubscribe();
            resolve();
          }
        });
      });
      await store.createJobs(jobs.map((record) => ({ job: record, timer: timerAt(t0Ms + 1_000) })), t0Ms);
      await allHeard;
      const sample = heard.get(jobs[0]!.jobId)!;
      assert.equal(sample.fireAtMs, t0Ms + 1_000);
      assert.deepEqual(sample.spec, jobs[0]!.spec, 'the listener gets the spec, loaded from the database');

      // A keyless job due at its create: the one statement that writes it sends the NOTIFY.
      const dueNow = jobRecord(jobSpec({ pool: 'pool-due-now' }), t0Ms);
      const readyAtCreate = nextEvent<string>((listener) => peer.onRunsReady(listener));
      await store.createJobs([{ job: dueNow, timer: null, dueNow: [{ scheduledAtMs: t0Ms, fireAtMs: t0Ms, status: 'ready' }] }], t0Ms);
      assert.equal(await readyAtCreate, 'pool-due-now');
    } finally {
      await handle.cleanup();
    }
  });

  void it('tells another store instance of a retry scheduled, so its parked waiters arm for it', async () => {
    const handle = await openTestStore();
    try {
      const { store } = handle;
      const peer = await handle.openPeer();
      const job = await createJob(store, { timer: null, spec: { pool: 'pool-retry' } });
      assert.notEqual(await store.triggerJob(null, job.jobId, t0Ms), null);
      const [leased] = await store.leaseRuns({ team: null, pool: 'pool-retry', max: 1, leaseMs: null, workerId: 'w', nowMs: t0Ms });
      assert.ok(leased !== undefined);
      const heard = nextEvent<string>((listener) => peer.onRunsReady(listener));
      const failed = await store.completeRun({ team: null, runId: leased.runId, fencingToken: leased.fencingToken,
        status: 'failed', error: 'boom', result: null, nowMs: t0Ms });
      assert.ok(failed.kind === 'completed' && failed.run.status === 'retry_wait');
      assert.equal(await heard, 'pool-retry');
      assert.equal(await peer.nextReadyAtMs(null, 'pool-retry'), failed.run.readyAtMs);
    } finally {
      await handle.cleanup();
    }
  });

  void it('judges shard-lease expiry by the database clock, whatever nowMs the caller passes', async () => {
    const handle = await openTestStore({ useDatabaseClock: true });
    try {
      const { store } = handle;
      const dbNow = await store.pool.query<{ now_ms: number }>(
        'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms');
      const ttlMs = 300;
      const [lease] = await store.acquireShardLeases('node-a', [3], ttlMs, 0);
      assert.ok(lease !== undefined);
      assert.ok(Math.abs(lease.expiresAtMs - (dbNow.rows[0]!.now_ms + ttlMs)) < 1_000, 'expiry from the database clock');
      // A caller clock far in the future does not make the lease look expired.
      assert.deepEqual(await store.acquireShardLeases('node-b', [3], ttlMs, Number.MAX_SAFE_INTEGER - ttlMs), []);
      // Real time has to pass here: the database clock is the thing under test.
      let takeover: Awaited<ReturnType<typeof store.acquireShardLeases>> = [];
      while (takeover.length === 0) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        takeover = await store.acquireShardLeases('node-b', [3], ttlMs, 0);
      }
      assert.ok(BigInt(takeover[0]!.token) > BigInt(lease.token));
      assert.deepEqual(await store.renewShardLeases('node-a', [lease], ttlMs, 0), [], 'the old holder cannot renew');
    } finally {
      await handle.cleanup();
    }
  });

  void it('renews and releases a shard lease past an open dispatch fence; only a token change waits for it', { timeout: 20_000 }, async () => {
    const handle = await openTestStore({ useDatabaseClock: false });
    const fence = await handle.store.pool.connect();
    try {
      const { store } = handle;
      const [lease] = await store.acquireShardLeases('node-a', [3], 10_000, t0Ms);
      assert.ok(lease !== undefined);
      // A dispatch in flight on shard 3, stopped between its fence and its commit.
      await fence.query('BEGIN');
      const fenced = await fence.query<{ token: string }>(shardFenceSql, [numberArray([3])]);
      assert.equal(fenced.rows[0]?.token, lease.token);
      // Renewal and release answer while the fence is held (a wait here would hang the test).
      const [renewed] = await store.renewShardLeases('node-a', [lease], 10_000, t0Ms + 1_000);
      assert.equal(renewed?.expiresAtMs, t0Ms + 11_000);
      await store.releaseShardLeases('node-a', [renewed!]);
      // A takeover, which grants a newer token, waits for the fence: the dispatch commits first.
      const takeover = store.acquireShardLeases('node-b', [3], 10_000, t0Ms + 2_000);
      const fencePid = (await fence.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const blockedByFence = async (): Promise<boolean> => ((await store.pool.query(
        'SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))', [fencePid])).rowCount ?? 0) > 0;
      while (!(await blockedByFence())) await new Promise((resolve) => setImmediate(resolve));
      await fence.query('COMMIT');
      const [granted] = await takeover;
      assert.equal(granted?.nodeId, 'node-b');
      assert.ok(BigInt(granted!.token) > BigInt(lease.token));
    } finally {
      await fence.query('ROLLBACK').catch(() => undefined);
      fence.release();
      await handle.cleanup();
    }
  });

  void it('round-trips awkward strings, NULLs and numbers through its array literals', async () => {
    const handle = await openTestStore();
    try {
      const texts = ['plain', '', 'NULL', null, 'a,b', '{braces}', 'quote " and \\ backslash', "it's", ' spaced ', 'ünï©ødé 🎉'];
      const numbers = [0, -1, 1_795_917_600_000, null, Number.MAX_SAFE_INTEGER];
      const result = await handle.store.pool.query<{ texts: (string | null)[]; numbers: (number | null)[]; flags: boolean[] }>(
        'SELECT $1::text[] AS texts, $2::bigint[]::text[]::numeric[] AS numbers, $3::bool[] AS flags',
        [textArray(texts), numberArray(numbers), booleanArray([true, false])]);
      const row = result.rows[0]!;
      assert.deepEqual(row.texts, texts);
      assert.deepEqual(row.numbers.map((value) => (value === null ? null : Number(value))), numbers);
      assert.deepEqual(row.flags, [true, false]);
    } finally {
      await handle.cleanup();
    }
  });

  void it('hands JSON texts through its JSON arrays verbatim, row by row beside unnest', async () => {
    const handle = await openTestStore();
    try {
      const values = [{ a: 1, b: 'quote " and \\ backslash, {braces}' }, 'ünï©ødé 🎉\n\u0000', null, [1, [2, { c: 'NULL' }]], 12.5];
      const texts = values.map((value) => JSON.stringify(value));
      const result = await handle.store.pool.query<{ n: number; spec: string }>(
        'SELECT n, spec::text AS spec FROM ROWS FROM (unnest($1::int[]), json_array_elements($2::json)) AS t(n, spec) ORDER BY n',
        [numberArray(values.map((_, index) => index)), jsonTextArray(texts)]);
      assert.deepEqual(result.rows.map((row) => row.n), [0, 1, 2, 3, 4]);
      assert.deepEqual(result.rows.map((row) => row.spec), texts);
    } finally {
      await handle.cleanup();
    }
  });

  void it('gives every prepared statement a generic plan without a sequential scan, even on empty tables', async () => {
    // A generic plan is built once per connection and kept while the tables grow; one built
    // on a new, empty schema must still probe indexes (connection.ts, `beginSql`).
    const handle = await openTestStore();
    const client = await handle.store.pool.connect();
    try {
      await client.query('SET plan_cache_mode = force_generic_plan');
      assert.ok(preparedStatements().length >= 10, 'the store modules registered their statements');
      for (const statement of preparedStatements()) {
        await client.query(statement.autocommit ? 'BEGIN' : beginSql);
        const parameterCount = Math.max(0, ...[...statement.text.matchAll(/\$(\d+)/g)].map((match) => Number(match[1])));
        await client.query(`PREPARE generic_plan_probe AS ${statement.text}`);
        const nulls = Array.from({ length: parameterCount }, () => 'NULL').join(', ');
        const plan = await client.query<{ 'QUERY PLAN': string }>(
          `EXPLAIN EXECUTE generic_plan_probe${parameterCount > 0 ? `(${nulls})` : ''}`);
        await client.query('ROLLBACK');
        await client.query('DEALLOCATE generic_plan_probe');
        const lines = plan.rows.map((row) => row['QUERY PLAN']);
        assert.ok(!lines.some((line) => line.includes('Seq Scan')), `${statement.text}\n${lines.join('\n')}`);
      }
    } finally {
      client.release();
      await handle.cleanup();
    }
  });

  void it('a replace dispatch waits for a transaction holding the running run, which goes on to its queue row', async () => {
    // Every writer of a run locks its runs row before its queue row (active_runs). Here a
    // transaction holds the running run's runs row, as a completion does between its two
    // writes; the replace dispatch that cancels that run must then wait without holding the
    // queue row, or the completion's next write waits for it and one of them dies a deadlock.
    const handle = await openTestStore();
    const holder = new pg.Client({ connectionString: withDefaultUser(testPgUrl) });
    await holder.connect();
    try {
      const { store } = handle;
      const job = await createJob(store, { spec: { overlap: 'replace' } });
      const { runId } = await firePending(store, job, t0Ms + minuteMs);
      assert.equal((await leaseOne(store, t0Ms + minuteMs))?.runId, runId);
      await holder.query(`SET search_path = "${handle.schema}"`);
      await holder.query('BEGIN');
      await holder.query('UPDATE runs SET worker_id = worker_id WHERE run_id = $1', [runId]);
      const fired = firePending(store, job, t0Ms + 2 * minuteMs);
      // Waits until the dispatch is blocked on a lock (the runs row the holder has). Inside a
      // transaction pg_stat_activity is a snapshot, refreshed here before each look.
      for (let polls = 0; ; polls++) {
        await holder.query('SELECT pg_stat_clear_snapshot()');
        const waiting = await holder.query(`SELECT 1 FROM pg_stat_activity
          WHERE wait_event_type = 'Lock' AND query LIKE '%cancelled%' AND pid <> pg_backend_pid()`);
        if (waiting.rows.length > 0) break;
        assert.ok(polls < 500, 'the dispatch waits for the runs row');
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      await holder.query('DELETE FROM active_runs WHERE job_id = $1 AND run_id = $2', [job.jobId, runId]);
      await holder.query('ROLLBACK');
      assert.equal((await fired).result.kind, 'dispatched');
      assert.equal((await store.getRun(null, runId))?.status, 'cancelled');
    } finally {
      await holder.end();
      await handle.cleanup();
    }
  });

  void it('answers each completion of a batch of successes on its own: the first of a pair completes, misses say why', async () => {
    const handle = await openTestStore();
    try {
      const { store } = handle;
      const leased: LeasedRun[] = [];
      for (let index = 0; index < 3; index++) {
        const job = await createJob(store, { spec: { overlap: 'allow' } });
        await firePending(store, job, t0Ms + minuteMs, { recurring: false });
        leased.push((await leaseOne(store, t0Ms + minuteMs))!);
      }
      const [first, second, third] = leased as [LeasedRun, LeasedRun, LeasedRun];
      const nowMs = t0Ms + 2 * minuteMs;
      const complete = (runId: string, fencingToken: string, team: string | null = 'team-a') =>
        store.completeRun({ team, runId, fencingToken, status: 'succeeded', error: null, result: { ok: runId }, nowMs });
      // Made in one turn, they share one commit (group commit) and so one statement.
      const outcomes = await Promise.all([
        complete(second.runId, second.fencingToken),
        complete(first.runId, first.fencingToken),
        complete(first.runId, first.fencingToken),
        complete(third.runId, 'not-a-token'),
        complete(third.runId, third.fencingToken, 'team-b'),
        complete('no-such-run', '1'),
      ]);
      assert.deepEqual(outcomes.map((outcome) => outcome.kind),
        ['completed', 'completed', 'stale_token', 'stale_token', 'not_found', 'not_found']);
      const run = outcomes[1]!.kind === 'completed' ? outcomes[1]!.run : undefined;
      assert.equal(run?.status, 'succeeded');
      assert.deepEqual(run?.result, { ok: first.runId });
      assert.equal(run?.finishedAtMs, nowMs);
      const history = await store.getRun('team-a', first.runId);
      assert.deepEqual(history?.events.map((event) => event.type), ['dispatched', 'leased', 'succeeded']);
      assert.equal((await store.getRun('team-a', third.runId))?.status, 'running');
    } finally {
      await handle.cleanup();
    }
  });

  void it('refuses text PostgreSQL cannot store (NUL) as invalid input, failing only the call that carried it', async () => {
    const handle = await openTestStore();
    try {
      const { store } = handle;
      const good = jobRecord(jobSpec({ key: 'good' }), t0Ms);
      const bad = jobRecord(jobSpec({ key: 'bad\u0000key' }), t0Ms);
      const [goodOutcome, badOutcome] = await Promise.allSettled([
        store.createJobs([{ job: good, timer: timerAt(t0Ms + 60_000) }], t0Ms),
        store.createJobs([{ job: bad, timer: timerAt(t0Ms + 60_000) }], t0Ms),
      ]);
      assert.equal(goodOutcome.status === 'fulfilled' && goodOutcome.value[0]?.kind, 'created');
      assert.ok(badOutcome.status === 'rejected' && isTicklerError(badOutcome.reason)
        && badOutcome.reason.code === 'invalid_request');
      await assert.rejects(store.getJob(null, 'j_\u0000'), (error: unknown) => isTicklerError(error) && error.code === 'invalid_request');
    } finally {
      await handle.cleanup();
    }
  });

  void it('answers unavailable when the backend dies between two statements, and the pool recovers', async () => {
    const handle = await openTestStore();
    try {
      const { store } = handle;
      await assert.rejects(withClient(store.pool, 'test', async (client) => {
        const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        // Not events.once: it also listens for 'error' and rejects when the FATAL notice arrives
        // before pg_terminate_backend's own reply, leaving a rejection nobody awaits yet.
        const ended = new Promise<void>((resolve) => client.once('end', () => resolve()));
        await store.pool.query('SELECT pg_terminate_backend($1)', [pid]);
        await ended;
        await client.query('SELECT 1');
      }), (error: unknown) => isTicklerError(error) && error.code === 'unavailable');
      await store.ping();
    } finally {
      await handle.cleanup();
    }
  });

  void it('answers unavailable when the server ended a transaction the node was too starved to continue', async () => {
    const handle = await openTestStore();
    try {
      const { store } = handle;
      let serverSaid: unknown;
      await assert.rejects(withClient(store.pool, 'test', async (client) => {
        const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        await client.query("SET idle_in_transaction_session_timeout = '50ms'");
        await client.query('BEGIN');
        // psql runs synchronously: this process is "starved" until the server has ended the
        // idle transaction, so its FATAL reply waits unread and answers the next statement.
        // pg_stat_activity is read once per transaction unless the snapshot is cleared: without
        // pg_stat_clear_snapshot the loop never saw the backend go when psql was quicker than 50 ms.
        execFileSync('psql', [withDefaultUser(testPgUrl), '-qAtc', `DO $$ BEGIN
          WHILE EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = ${pid}) LOOP
            PERFORM pg_sleep(0.01); PERFORM pg_stat_clear_snapshot();
          END LOOP;
        END $$`]);
        try {
          await client.query('SELECT 1');
        } catch (error) {
          serverSaid = error;
          throw error;
        }
      }), (error: unknown) => isTicklerError(error) && error.code === 'unavailable');
      assert.equal((serverSaid as { code?: string }).code, '25P03', 'the idle-in-transaction FATAL answered the statement');
      await store.ping();
    } finally {
      await handle.cleanup();
    }
  });

  void it('runs a transaction on a fresh connection when the pooled one died unnoticed (a paused process)', async () => {
    const handle = await openTestStore({ poolSize: 1 });
    try {
      const { store } = handle;
      const job = await createJob(store, { timer: null });
      const pid = (await store.pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      // psql runs synchronously: the backend of the one idle pooled connection dies while this
      // process cannot see it, as in a process stopped while the database restarted.
      execFileSync('psql', [withDefaultUser(testPgUrl), '-qAtc', `SELECT pg_terminate_backend(${pid})`]);
      const run = await store.triggerJob(null, job.jobId, t0Ms);
      assert.equal(run?.jobId, job.jobId, 'the trigger went through on a fresh connection');
    } finally {
      await handle.cleanup();
    }
  });

  void it('rejects with unavailable within seconds when the server is unreachable', async () => {
    const closed = net.createServer();
    closed.listen(0, '127.0.0.1');
    await once(closed, 'listening');
    const port = (closed.address() as net.AddressInfo).port;
    closed.close();
    await once(closed, 'close');
    const url = new URL(testPgUrl);
    url.port = String(port);
    await expectUnavailable(openPostgresStore({ url: url.toString(), schema: freshSchemaName() }), 5_000);
  });

  void it('answers unavailable during an outage, then carries on, listening again, once the server is back', async () => {
    const { handle, proxy } = await openTestStoreBehindProxy();
    try {
      const { store } = handle;
      const peer = await openPostgresStore({ url: testPgUrl, schema: handle.schema, useDatabaseClock: false });
      try {
        const job = await createJob(store, { timer: null });
        await proxy.stop();
        await expectUnavailable(store.getJob(null, job.jobId), 5_000);
        await expectUnavailable(store.triggerJob(null, job.jobId, t0Ms), 5_000);
        await proxy.restart();
        assert.equal((await store.getJob(null, job.jobId))?.jobId, job.jobId, 'the pool reconnects');
        await store.waitUntilListening();
        const heard = nextEvent<string>((listener) => store.onRunsReady(listener));
        await peer.triggerJob(null, job.jobId, t0Ms + 1);
        assert.equal(await heard, 'pool-a', 'the LISTEN connection came back');
      } finally {
        await peer.close();
      }
    } finally {
      await handle.cleanup();
      await proxy.stop();
    }
  });
});
