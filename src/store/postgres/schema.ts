/**
 * The PostgreSQL schema and its versioned migrations. Every node migrates on start; the
 * migration runs in one transaction under a database-wide advisory lock, so several nodes
 * starting at once apply each version exactly once and the others wait, then see it done.
 *
 * Times are epoch milliseconds in bigint columns; tokens come from one sequence that only
 * grows (shard leases and worker fencing tokens alike). Timers are range-partitioned by
 * `fire_at` (see partitions.ts); one pending timer per job is enforced by the job row,
 * whose `timer_id` names it (a unique index on `job_id` is impossible across partitions).
 *
 * Documents (spec, result, event detail) are `json`, not `jsonb`: building jsonb made a
 * 20,000-job insert take ~850 ms against ~310 ms for json on this 2-core machine (psql,
 * 2026-11-29), and nothing looks inside them except the label filter, which casts.
 */
import type pg from 'pg';
import { FatalError } from '../../fatal-error.js';
import { quoteIdentifier } from './connection.js';

/** A fixed advisory-lock key: "tickler migrate". */
const migrationLockKey = 0x7469636b;

const migrations: readonly { version: number; statements: readonly string[] }[] = [
  {
    version: 1,
    statements: [
      'CREATE SEQUENCE tickler_tokens AS bigint',
      `CREATE TABLE jobs (
        job_id text PRIMARY KEY,
        team text NOT NULL,
        key text,
        state text NOT NULL,
        pool text NOT NULL,
        spec json NOT NULL,
        request_hash text NOT NULL,
        shard integer NOT NULL,
        version integer NOT NULL,
        timer_id text,
        next_fire_at bigint,
        next_scheduled_at bigint,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL
      )`,
      'CREATE UNIQUE INDEX jobs_team_key ON jobs (team, key) WHERE key IS NOT NULL',
      'CREATE INDEX jobs_team_created ON jobs (team, created_at DESC, job_id DESC)',
      // Small by construction: only jobs missing their timer, which the reconciler repairs.
      `CREATE INDEX jobs_without_timer ON jobs (job_id) WHERE state = 'active' AND timer_id IS NULL`,
      `CREATE TABLE timers (
        timer_id text NOT NULL,
        job_id text NOT NULL,
        shard integer NOT NULL,
        bucket bigint NOT NULL,
        fire_at bigint NOT NULL,
        scheduled_at bigint NOT NULL
      ) PARTITION BY RANGE (fire_at)`,
      'CREATE UNIQUE INDEX timers_fire_at ON timers (fire_at, timer_id)',
      'CREATE TABLE timers_default PARTITION OF timers DEFAULT',
      `CREATE TABLE runs (
        run_id text PRIMARY KEY,
        job_id text NOT NULL,
        team text NOT NULL,
        pool text NOT NULL,
        lane text NOT NULL,
        scheduled_at bigint NOT NULL,
        fire_at bigint NOT NULL,
        dispatched_at bigint,
        attempt integer NOT NULL DEFAULT 0,
        attempt_base integer NOT NULL DEFAULT 0,
        status text NOT NULL,
        started_at bigint,
        finished_at bigint,
        last_error text,
        result json,
        ready_at bigint,
        lease_expires_at bigint,
        worker_id text,
        lease_ms integer,
        fencing_token bigint,
        held boolean NOT NULL DEFAULT false
      )`,
      // The SKIP LOCKED claim walks this partial index in lane, then ready_at order.
      `CREATE INDEX runs_leasable ON runs (pool, lane, ready_at) WHERE status IN ('ready', 'retry_wait') AND NOT held`,
      `CREATE INDEX runs_running ON runs (lease_expires_at) WHERE status = 'running'`,
      `CREATE INDEX runs_retry ON runs (ready_at) WHERE status = 'retry_wait'`,
      `CREATE INDEX runs_active ON runs (job_id) WHERE status IN ('ready', 'running', 'retry_wait')`,
      'CREATE INDEX runs_job ON runs (job_id, scheduled_at DESC, run_id DESC)',
      'CREATE INDEX runs_team ON runs (team, scheduled_at DESC, run_id DESC)',
      `CREATE TABLE run_events (
        run_id text NOT NULL,
        event_id bigint GENERATED ALWAYS AS IDENTITY,
        at_ms bigint NOT NULL,
        type text NOT NULL,
        from_status text,
        to_status text,
        detail json,
        PRIMARY KEY (run_id, event_id)
      )`,
      `CREATE TABLE shard_leases (
        shard integer PRIMARY KEY,
        node_id text,
        token bigint NOT NULL,
        expires_at bigint NOT NULL
      )`,
    ],
  },
  {
    // Makes `token` a key, so that the dispatch fence (FOR KEY SHARE) conflicts with an
    // acquire's token change and not with a renewal's new expiry (dispatch.ts shardFenceSql).
    // Tokens come from one sequence, so they are unique already.
    version: 2,
    statements: ['CREATE UNIQUE INDEX shard_leases_token ON shard_leases (token)'],
  },
  {
    // The queue state moves to a narrow side table, active_runs, so that `runs` takes HOT
    // updates. An UPDATE that changes a column any index of its table references (partial
    // index predicates included) writes a new entry into every index of that table; the
    // indexes of runs keyed on status, ready_at and lease_expires_at made every lease and
    // completion rewrite all six (run_id, job, team, active, running, leasable): 0 HOT of
    // 40,000 run updates in bench/probes/pg-store-cost.ts. Now runs is indexed only on columns that
    // never change (run_id, job_id, team, scheduled_at); active_runs holds one row per ready,
    // running or waiting run (exactly the runs whose finished_at is NULL) with its due time
    // (ready_at, or the lease's expiry while running), and a run leaves it when it ends.
    // fillfactor leaves each runs page room for the new versions of its rows: a lease batch
    // updates neighbouring rows (claimed in insertion order) in one transaction, before any
    // old version can be pruned, so a page needs room for a second copy of every row. HOT
    // run updates of 40,000 in the bench: 7,300 at fillfactor 90, 21,700 at 70, 35,500 at 50
    // (lease 61, 54, 47 us of backend CPU per run). The price: the run ledger takes about
    // twice the pages.
    version: 3,
    statements: [
      // No primary key: each write finds its row by (job_id, run_id) through active_runs_job
      // (or by ctid), and a key on run_id alone was one more index entry per dispatch, lease
      // and retry (measured: ~120 B of WAL per dispatched and per leased run). runs_pkey keeps
      // run ids unique; a row is inserted only with its run, or by a replay of a dead run.
      `CREATE TABLE active_runs (
        run_id text NOT NULL,
        job_id text NOT NULL,
        team text NOT NULL,
        pool text NOT NULL,
        lane text NOT NULL,
        status text NOT NULL,
        held boolean NOT NULL,
        due_at bigint
      )`,
      `INSERT INTO active_runs (run_id, job_id, team, pool, lane, status, held, due_at)
       SELECT run_id, job_id, team, pool, lane, status, held,
              CASE WHEN status = 'running' THEN lease_expires_at ELSE ready_at END
         FROM runs WHERE status IN ('ready', 'running', 'retry_wait')`,
      // The SKIP LOCKED claim walks this partial index in lane, then due order.
      `CREATE INDEX active_runs_leasable ON active_runs (pool, lane, due_at)
        WHERE status IN ('ready', 'retry_wait') AND NOT held`,
      // Lease expiry and the next deadline (a lease's expiry or a retry's due time).
      `CREATE INDEX active_runs_deadline ON active_runs (status, due_at) WHERE status IN ('running', 'retry_wait')`,
      // Dispatch reads a job's active runs by its prefix; run_id makes each lookup exact even
      // for a job with many active runs (overlap allow).
      'CREATE INDEX active_runs_job ON active_runs (job_id, run_id)',
      'DROP INDEX runs_leasable',
      'DROP INDEX runs_running',
      'DROP INDEX runs_retry',
      'DROP INDEX runs_active',
      'ALTER TABLE runs SET (fillfactor = 50)',
    ],
  },
  {
    // Dispatch updates each job it fires (its next timer, or done for a one-shot), and
    // jobs_without_timer's predicate named state and timer_id, which that update changes, so
    // no such update was HOT: each wrote a new copy of the job, spec included, into a new
    // page and an entry into every index of jobs (0 HOT of 20,000 in bench/probes/pg-store-cost.ts).
    // The predicate now reads a stored generated column whose value such an update leaves
    // alone (false before and after); fillfactor leaves room on each page for a job's next
    // version. Adding the column rewrites the table once, under the migration's lock.
    version: 4,
    statements: [
      `ALTER TABLE jobs ADD COLUMN needs_timer boolean
         GENERATED ALWAYS AS (state = 'active' AND timer_id IS NULL) STORED`,
      'DROP INDEX jobs_without_timer',
      'CREATE INDEX jobs_without_timer ON jobs (job_id) WHERE needs_timer',
      'ALTER TABLE jobs SET (fillfactor = 90)',
    ],
  },
  {
    // A lease rewrites each queue row it claims, and a full page sends the new version to
    // another page: PostgreSQL then locks the old version first, in a WAL record of its own,
    // before it writes the update (heap_update). Room on the page saves that record, and the
    // table holds only the active runs, so the space is small.
    version: 5,
    statements: ['ALTER TABLE active_runs SET (fillfactor = 50)'],
  },
  {
    // The jobs the dead man's switch watches, so the reconciler's pass (timers.ts
    // findSilentJobs) reads them instead of scanning every job each minute. A column the
    // writes set, with statistics: on a partial index over (spec->>'max_silence_s') the
    // planner guessed 99.5 % of jobs watched and scanned the table (50,000 jobs, 100 watched).
    version: 6,
    statements: [
      'ALTER TABLE jobs ADD COLUMN max_silence_s integer',
      `UPDATE jobs SET max_silence_s = (spec->>'max_silence_s')::integer WHERE spec->>'max_silence_s' IS NOT NULL`,
      'CREATE INDEX jobs_watched ON jobs (job_id) WHERE max_silence_s IS NOT NULL',
    ],
  },
  {
    // A one-shot herd's runs are written ahead of their instant (`Store.writeRunsAhead`)
    // while the job's timer stays pending: the job names that run until the timer is consumed
    // (`Store.finishAhead`) or replaced, so a cancel or change in between finds the run to take back
    // or move by its key. NULL for every other job; no index reads it, so the dispatch's update
    // of the job stays HOT. Adding a nullable column without a default rewrites nothing.
    version: 7,
    statements: ['ALTER TABLE jobs ADD COLUMN ahead_run_id text'],
  },
  {
    // The node that granted a run's current lease, until the worker heartbeats (which proves
    // it got the answer) or the lease ends: when that node dies, the leases it granted are cut
    // to a third of a lease plus a margin (orphaned-leases.ts), so an answer that died with it
    // is offered again in seconds, not after the whole lease_s. NULL when the granting store
    // was opened without a node id (a library user's). No index reads it: the cut scans the
    // queue table, and only when a node has gone. A nullable column without a default
    // rewrites nothing.
    version: 8,
    statements: ['ALTER TABLE active_runs ADD COLUMN lease_node text'],
  },
  {
    // Keys compare as "C" (code point order in UTF-8), so that the keys starting with a prefix
    // are one range of jobs_team_key, which a cancel by key prefix reads (jobs.ts
    // cancelJobsByKeyPrefix) instead of every job of the team. Under any other collation
    // (C.UTF-8 here, en_US elsewhere) that range need not hold them, and PostgreSQL 15 makes no
    // index condition of a prefix match. Equality, all else that compares keys, is the same
    // under any deterministic collation. The table is not rewritten; jobs_team_key is rebuilt
    // (82 ms at 101,000 jobs, under the migration's lock).
    version: 9,
    statements: ['ALTER TABLE jobs ALTER COLUMN key TYPE text COLLATE "C"'],
  },
  {
    // The held runs, which the reconciler's pass (worker-runs.ts releaseStrandedHeldRuns) reads
    // every time: without it the pass walked every queue row (17-32 ms at 25,000, with fresh
    // statistics as well; bench/probes/pg-stale-plan-cost.ts). Few: a buffer_one job's next occurrence
    // while its run is active. Every update of a queue row already changes an indexed column
    // (status or due_at), so none was HOT to lose, and a row has an entry only while held.
    // Built in 14 ms at 25,000 queue rows.
    version: 10,
    statements: ['CREATE INDEX active_runs_held ON active_runs (job_id) WHERE held'],
  },
  {
    // The silence a webhook alert announced for a job (its silent_since), until the alert of
    // its end: the announcement survives a restart and a new leader, so each is sent once.
    version: 11,
    statements: [
      'ALTER TABLE jobs ADD COLUMN silence_announced_since bigint',
      'CREATE INDEX jobs_silence_announced ON jobs (job_id) WHERE silence_announced_since IS NOT NULL',
    ],
  },
  {
    // Team limits (docs/API.md "Team limits") and the bucket row every node's creates of a
    // limited team lock and take from (team-limits.ts). The pending count reads two partial
    // indexes. Jobs: a generated column that names the team only while a job a limited team's
    // create marked (quota_counted) is active; on every other job it is NULL before and after
    // each update, so a dispatch's update of such a job stays HOT (an index on state would
    // have made every one-shot's dispatch write a new entry into every index of jobs). The
    // generated column rewrites jobs once, under the migration's lock. Queue rows: the ready
    // ones by team; a lease's update leaves the predicate and writes no entry (no queue row
    // update is HOT anyway, version 10), a dispatch writes one more. Its predicate names
    // `team <> ''`, which only the pending count states: a statement that reads ready rows by
    // other keys (the held runs' pass) cannot take it instead of its own index.
    version: 12,
    statements: [
      `CREATE TABLE team_limits (
        team text PRIMARY KEY,
        create_per_s double precision,
        pending_max bigint,
        dispatch_per_s double precision,
        weight double precision NOT NULL,
        updated_at bigint NOT NULL
      )`,
      `CREATE TABLE team_buckets (
        team text PRIMARY KEY,
        tokens double precision NOT NULL,
        at_ms bigint NOT NULL,
        pending bigint,
        pending_at_ms bigint
      )`,
      'ALTER TABLE jobs ADD COLUMN quota_counted boolean',
      `ALTER TABLE jobs ADD COLUMN quota_pending_team text
         GENERATED ALWAYS AS (CASE WHEN quota_counted AND state = 'active' THEN team END) STORED`,
      'CREATE INDEX jobs_quota_pending ON jobs (quota_pending_team) WHERE quota_pending_team IS NOT NULL',
      `CREATE INDEX active_runs_team_ready ON active_runs (team) WHERE status = 'ready' AND team <> ''`,
    ],
  },
  {
    // Capacity (lease-gates.ts). A job's resources as an array, kept by the database from its
    // spec (NULL when none), with an index of the tagged jobs only: a lease finds the runs
    // under a cap through it, and an untagged job costs its create one parse of the spec.
    // A lease for one team within a lane reads active_runs_leasable_by_team, so a team's
    // trickle is found without walking another team's backlog. A resource slot is held while
    // its run is running under the token that took it: the ends of a run free it with no
    // write of their own.
    version: 13,
    statements: [
      `CREATE FUNCTION tickler_resources(spec json) RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE
         AS $$ SELECT NULLIF(ARRAY(SELECT json_array_elements_text(spec -> 'resources')), '{}') $$`,
      'ALTER TABLE jobs ADD COLUMN resources text[] GENERATED ALWAYS AS (tickler_resources(spec)) STORED',
      'CREATE INDEX jobs_resources ON jobs USING gin (resources) WHERE resources IS NOT NULL',
      `CREATE INDEX active_runs_leasable_by_team ON active_runs (pool, lane, team, due_at)
        WHERE status IN ('ready', 'retry_wait') AND NOT held`,
      'CREATE TABLE resource_caps (name text PRIMARY KEY, max_concurrency integer NOT NULL, updated_at bigint NOT NULL)',
      'CREATE TABLE resource_slots (name text NOT NULL, run_id text NOT NULL, token bigint NOT NULL, PRIMARY KEY (name, run_id))',
      'CREATE TABLE pool_pauses (pool text NOT NULL, team text NOT NULL, at_ms bigint NOT NULL, PRIMARY KEY (pool, team))',
      'CREATE TABLE lane_caps (lane text PRIMARY KEY, dispatch_per_s double precision NOT NULL)',
      'CREATE TABLE dispatch_buckets (key text PRIMARY KEY, tokens double precision NOT NULL, at_ms bigint NOT NULL)',
    ],
  },
];

export const schemaVersion = migrations[migrations.length - 1]!.version;

/**
 * Creates the schema if needed and applies every migration not applied yet, up to
 * `targetVersion` (tests stop early to build an older database and upgrade it).
 */
export async function migrate(client: pg.ClientBase, schema: string, targetVersion = schemaVersion): Promise<number[]> {
  const applied: number[] = [];
  await client.query('BEGIN');
  try {
    await client.query('SELECT pg_advisory_xact_lock($1)', [migrationLockKey]);
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdentifier(schema)}`);
    await client.query(`SET LOCAL search_path = ${quoteIdentifier(schema)}`);
    await client.query(`CREATE TABLE IF NOT EXISTS tickler_migrations (
      version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
    const done = await client.query<{ version: number }>('SELECT version FROM tickler_migrations');
    const doneVersions = new Set(done.rows.map((row) => row.version));
    const newestVersion = Math.max(0, ...doneVersions);
    if (newestVersion > schemaVersion) {
      throw new FatalError(`the PostgreSQL schema ${schema} has migration ${newestVersion}, newer than this build ` +
        `understands (${schemaVersion}): a newer tickler upgraded it; run that version or a later one on it`);
    }
    for (const migration of migrations) {
      if (doneVersions.has(migration.version) || migration.version > targetVersion) continue;
      for (const statement of migration.statements) await client.query(statement);
      await client.query('INSERT INTO tickler_migrations (version) VALUES ($1)', [migration.version]);
      applied.push(migration.version);
    }
    await client.query('COMMIT');
    return applied;
  } catch (error) {
    await client.query('ROLLBACK').catch((rollbackError: unknown) => {
      throw new Error('migration failed and so did its rollback', { cause: [error, rollbackError] });
    });
    throw error;
  }
}
