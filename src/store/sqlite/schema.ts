/**
 * The embedded store's schema, created and upgraded on open. Each migration is a step from
 * `PRAGMA user_version` n to n + 1, applied in one transaction with the version bump, so a
 * crash mid-upgrade leaves the previous version whole.
 *
 * Indexes are few on purpose: every one costs a B-tree write per create or dispatch, and the
 * create path is what the 50,000 timers/s target measures. Partial indexes carry the hot
 * queues (leasable runs, running leases, retries) so they stay as small as the queues.
 */
import type Database from 'better-sqlite3';
import { FatalError } from '../../fatal-error.js';

const migrations: readonly string[] = [
  `
  -- Rowid tables throughout: rows append, and only the small key indexes take random
  -- inserts (run ids are hashes). A job's next fire time is its pending timer's, read by a
  -- join, so dispatch never rewrites the job row. Measured: WITHOUT ROWID runs keyed by the
  -- hash made each 512-timer dispatch commit rewrite ~512 scattered 8 KiB pages.
  CREATE TABLE jobs (
    job_id TEXT NOT NULL UNIQUE,
    team TEXT NOT NULL,
    key TEXT,
    pool TEXT NOT NULL,
    state TEXT NOT NULL,
    spec TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    shard INTEGER NOT NULL,
    version INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  );
  CREATE UNIQUE INDEX jobs_team_key ON jobs (team, key) WHERE key IS NOT NULL;
  CREATE INDEX jobs_team_created ON jobs (team, created_at DESC, job_id DESC);
  CREATE INDEX jobs_created ON jobs (created_at DESC, job_id DESC);

  -- Only pending timers live here: a fired or cancelled timer is deleted. AUTOINCREMENT
  -- keeps ids from being reused, so a stale wheel entry can never name a newer timer.
  CREATE TABLE timers (
    timer_id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    shard INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    fire_at INTEGER NOT NULL,
    scheduled_at INTEGER NOT NULL
  );
  CREATE UNIQUE INDEX timers_one_pending_per_job ON timers (job_id);
  -- (fire_at) is (fire_at, timer_id) because the rowid ends every index: the loader's keyset order.
  CREATE INDEX timers_due ON timers (fire_at);

  CREATE TABLE runs (
    run_id TEXT NOT NULL UNIQUE,
    job_id TEXT NOT NULL,
    team TEXT NOT NULL,
    pool TEXT NOT NULL,
    lane TEXT NOT NULL,
    scheduled_at INTEGER NOT NULL,
    fire_at INTEGER NOT NULL,
    dispatched_at INTEGER,
    attempt INTEGER NOT NULL,
    attempt_base INTEGER NOT NULL,
    status TEXT NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    last_error TEXT,
    result TEXT,
    ready_at INTEGER,
    lease_expires_at INTEGER,
    lease_ms INTEGER,
    worker_id TEXT,
    fencing_token INTEGER,
    held INTEGER NOT NULL
  );
  CREATE INDEX runs_leasable ON runs (pool, lane, ready_at)
    WHERE status IN ('ready', 'retry_wait') AND held = 0;
  CREATE INDEX runs_running ON runs (lease_expires_at) WHERE status = 'running';
  CREATE INDEX runs_retrying ON runs (ready_at) WHERE status = 'retry_wait';
  CREATE INDEX runs_active_by_job ON runs (job_id) WHERE status IN ('ready', 'running', 'retry_wait');
  CREATE INDEX runs_job_history ON runs (job_id, scheduled_at DESC, run_id DESC);
  CREATE INDEX runs_team_history ON runs (team, scheduled_at DESC, run_id DESC);
  -- The DLQ view; other status filters walk the team's history.
  CREATE INDEX runs_dead ON runs (team, scheduled_at DESC, run_id DESC) WHERE status = 'dead';

  -- Append-only; the global id orders a run's events.
  CREATE TABLE run_events (
    event_id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    at INTEGER NOT NULL,
    type TEXT NOT NULL,
    from_status TEXT,
    to_status TEXT,
    detail TEXT
  );
  CREATE INDEX run_events_by_run ON run_events (run_id, event_id);

  -- A released lease keeps its row (expires_at = 0) so the highest token granted for the
  -- shard is never forgotten: the dispatch fence compares against it.
  CREATE TABLE shard_leases (
    shard INTEGER PRIMARY KEY,
    node_id TEXT NOT NULL,
    token INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
  );

  -- One sequence for shard tokens and worker fencing tokens: it only grows.
  CREATE TABLE token_sequence (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
  );
  INSERT INTO token_sequence (id, value) VALUES (1, 0);
  `,
  `
  -- v2: keep inserts near the right edge of every index but the run id's. In a herd every
  -- run shares its scheduled_at, so a tie broken by the run id (a hash) put each insert on a
  -- random leaf page, as did run_events keyed by the run id: each dispatch, lease and
  -- completion commit wrote hundreds of scattered pages to the WAL. Ties now fall to the
  -- rowid, which ends every SQLite index implicitly and grows in insert order. Ascending keys,
  -- read backwards for "newest first", so new rows land at the right edge.
  --
  -- runs gets an explicit INTEGER PRIMARY KEY (the rowid itself) because run_events refers
  -- to it: an implicit rowid may be renumbered by VACUUM, an INTEGER PRIMARY KEY never is.
  -- Old rows keep their rowid as run_seq, so the order of ties is insertion order throughout.
  ALTER TABLE runs RENAME TO runs_v1;
  CREATE TABLE runs (
    run_seq INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    job_id TEXT NOT NULL,
    team TEXT NOT NULL,
    pool TEXT NOT NULL,
    lane TEXT NOT NULL,
    scheduled_at INTEGER NOT NULL,
    fire_at INTEGER NOT NULL,
    dispatched_at INTEGER,
    attempt INTEGER NOT NULL,
    attempt_base INTEGER NOT NULL,
    status TEXT NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    last_error TEXT,
    result TEXT,
    ready_at INTEGER,
    lease_expires_at INTEGER,
    lease_ms INTEGER,
    worker_id TEXT,
    fencing_token INTEGER,
    held INTEGER NOT NULL
  );
  INSERT INTO runs
  SELECT rowid, run_id, job_id, team, pool, lane, scheduled_at, fire_at, dispatched_at, attempt, attempt_base, status,
    started_at, finished_at, last_error, result, ready_at, lease_expires_at, lease_ms, worker_id, fencing_token, held
  FROM runs_v1 ORDER BY rowid;
  DROP TABLE runs_v1;

  -- Events name their run by run_seq (8 bytes, in dispatch order) instead of the 32-digit run
  -- id: an event's index entry lands near the right edge, whether it is a new run's first
  -- event or a lease or completion of a run dispatched lately. An event whose run has no row
  -- was never readable (a run is read before its events) and is not carried over.
  ALTER TABLE run_events RENAME TO run_events_v1;
  CREATE TABLE run_events (
    event_id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    type TEXT NOT NULL,
    from_status TEXT,
    to_status TEXT,
    detail TEXT
  );
  INSERT INTO run_events (event_id, run_seq, at, type, from_status, to_status, detail)
  SELECT e.event_id, r.run_seq, e.at, e.type, e.from_status, e.to_status, e.detail
  FROM run_events_v1 e JOIN runs r ON r.run_id = e.run_id ORDER BY e.event_id;
  -- The id high-water mark carries over too, so no id an old event had is issued again.
  DELETE FROM sqlite_sequence WHERE name = 'run_events';
  INSERT INTO sqlite_sequence (name, seq) SELECT 'run_events', seq FROM sqlite_sequence WHERE name = 'run_events_v1';
  DROP TABLE run_events_v1;
  -- (run_seq) is (run_seq, event_id): a run's events in order.
  CREATE INDEX run_events_by_run ON run_events (run_seq);

  -- Built after the copy: a sorted build, not one insert per row.
  CREATE INDEX runs_leasable ON runs (pool, lane, ready_at)
    WHERE status IN ('ready', 'retry_wait') AND held = 0;
  CREATE INDEX runs_running ON runs (lease_expires_at) WHERE status = 'running';
  CREATE INDEX runs_retrying ON runs (ready_at) WHERE status = 'retry_wait';
  CREATE INDEX runs_active_by_job ON runs (job_id) WHERE status IN ('ready', 'running', 'retry_wait');
  -- (job_id, scheduled_at) names one run already (the run id is their hash): no tie to break.
  CREATE INDEX runs_job_history ON runs (job_id, scheduled_at);
  -- Lists order by (scheduled_at DESC, run_seq DESC): these read backwards.
  CREATE INDEX runs_team_history ON runs (team, scheduled_at);
  -- The DLQ view; other status filters walk the team's history.
  CREATE INDEX runs_dead ON runs (team, scheduled_at) WHERE status = 'dead';

  -- Job lists order by (created_at DESC, rowid DESC); job ids carry random digits. The
  -- admin-wide list (no team) needs its own index or it sorts every job per page.
  DROP INDEX jobs_team_created;
  DROP INDEX jobs_created;
  CREATE INDEX jobs_team_created ON jobs (team, created_at);
  CREATE INDEX jobs_created ON jobs (created_at);
  `,
  `
  -- v3: the index of a job's active runs stops costing a random page per lease and per
  -- completion. It was keyed by the job id (a hash) with a condition on status, so a lease
  -- (ready -> running, a status change) deleted and reinserted the run's entry, and a
  -- completion deleted it, each on a page of its own: 7 KiB of WAL and 6-8 us per run,
  -- about half of a lease's cost and a fifth of a completion's.
  --
  -- Its condition is now finished_at IS NULL, which holds exactly while a run is ready,
  -- running or waiting for a retry (every move to a final status sets finished_at; only a
  -- replay clears it), and which a lease does not write. Its key is now the job's seq: jobs
  -- get an INTEGER PRIMARY KEY (their rowid, kept: VACUUM renumbers an implicit rowid, never
  -- this one) and runs carry it. Seqs follow creation order, which for delay timers ("in 15
  -- minutes") is near firing order, so the entries a dispatch or completion batch writes
  -- share pages; a job's entries are one range either way.
  ALTER TABLE jobs RENAME TO jobs_v2;
  CREATE TABLE jobs (
    job_seq INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL UNIQUE,
    team TEXT NOT NULL,
    key TEXT,
    pool TEXT NOT NULL,
    state TEXT NOT NULL,
    spec TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    shard INTEGER NOT NULL,
    version INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  );
  INSERT INTO jobs (job_seq, job_id, team, key, pool, state, spec, request_hash, shard, version, created_at, updated_at)
  SELECT rowid, job_id, team, key, pool, state, spec, request_hash, shard, version, created_at, updated_at
  FROM jobs_v2 ORDER BY rowid;
  -- The old indexes went with the old table; built again after the copy (a sorted build).
  DROP TABLE jobs_v2;
  CREATE UNIQUE INDEX jobs_team_key ON jobs (team, key) WHERE key IS NOT NULL;
  CREATE INDEX jobs_team_created ON jobs (team, created_at);
  CREATE INDEX jobs_created ON jobs (created_at);

  ALTER TABLE runs ADD COLUMN job_seq INTEGER;
  UPDATE runs SET job_seq = (SELECT job_seq FROM jobs WHERE jobs.job_id = runs.job_id);
  DROP INDEX runs_active_by_job;
  CREATE INDEX runs_active_by_job ON runs (job_seq) WHERE finished_at IS NULL;
  -- A job's history by its seq too: the entry each dispatched run adds lands beside those of
  -- runs dispatched with it, where keyed by the job id it took a random page of its own.
  DROP INDEX runs_job_history;
  CREATE INDEX runs_job_history ON runs (job_seq, scheduled_at);
  `,
  `
  -- v4: a job's pending timer names it by its seq, not its id. timers_one_pending_per_job
  -- was keyed by the job id (a hash), so each create and each dispatch (which deletes the
  -- fired timer) wrote an entry on a random page of it. Keyed by the seq, the entries a batch
  -- of creates or a dispatch of timers created together writes share pages, as runs' did in
  -- v3. The job's id, where a read needs it, comes by a join on jobs' INTEGER PRIMARY KEY.
  --
  -- timer_id values are kept, and so is the AUTOINCREMENT high-water mark: a fired timer's id
  -- may still sit in a wheel, and no new timer may take it. A timer whose job has no row was
  -- never loaded (the loader joins jobs) nor fired, and is not carried over.
  ALTER TABLE timers RENAME TO timers_v3;
  CREATE TABLE timers (
    timer_id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_seq INTEGER NOT NULL,
    shard INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    fire_at INTEGER NOT NULL,
    scheduled_at INTEGER NOT NULL
  );
  INSERT INTO timers (timer_id, job_seq, shard, bucket, fire_at, scheduled_at)
  SELECT t.timer_id, j.job_seq, t.shard, t.bucket, t.fire_at, t.scheduled_at
  FROM timers_v3 t JOIN jobs j ON j.job_id = t.job_id ORDER BY t.timer_id;
  DELETE FROM sqlite_sequence WHERE name = 'timers';
  INSERT INTO sqlite_sequence (name, seq) SELECT 'timers', seq FROM sqlite_sequence WHERE name = 'timers_v3';
  DROP TABLE timers_v3;
  -- Built after the copy (a sorted build), under the old names.
  CREATE UNIQUE INDEX timers_one_pending_per_job ON timers (job_seq);
  -- (fire_at) is (fire_at, timer_id) because the rowid ends every index: the loader's keyset order.
  CREATE INDEX timers_due ON timers (fire_at);
  `,
  `
  -- v5: the jobs the dead man's switch watches, so the reconciler's pass (reads.ts
  -- findSilentJobs) reads these rows instead of scanning every job: 381 ms a minute on the
  -- event loop with 1,000,000 active jobs (bench/probes/silence-scan-cost.ts). A column the writes
  -- set, not an index on json_extract(spec, ...): that parsed every job's spec on insert,
  -- ~0.85 us more per create (~6 %).
  ALTER TABLE jobs ADD COLUMN max_silence_s INTEGER;
  UPDATE jobs SET max_silence_s = json_extract(spec, '$.max_silence_s')
    WHERE json_extract(spec, '$.max_silence_s') IS NOT NULL;
  CREATE INDEX jobs_watched ON jobs (job_seq) WHERE max_silence_s IS NOT NULL;
  `,
  `
  -- v6: run_events without AUTOINCREMENT. Every dispatch, lease and completion appends an
  -- event, and AUTOINCREMENT made each of those inserts read and rewrite the table's row in
  -- sqlite_sequence too: a page more in the WAL per transaction, and measured (alternated,
  -- bench/probes/sqlite-store-cost.ts) ~0.5 us per lease, ~1 us per completion, ~0.4 us per
  -- dispatched run. A plain INTEGER PRIMARY KEY takes one more than the largest id; events
  -- are never deleted, so no id a reader has seen is issued again. The ids are kept.
  ALTER TABLE run_events RENAME TO run_events_v5;
  CREATE TABLE run_events (
    event_id INTEGER PRIMARY KEY,
    run_seq INTEGER NOT NULL,
    at INTEGER NOT NULL,
    type TEXT NOT NULL,
    from_status TEXT,
    to_status TEXT,
    detail TEXT
  );
  INSERT INTO run_events (event_id, run_seq, at, type, from_status, to_status, detail)
  SELECT event_id, run_seq, at, type, from_status, to_status, detail FROM run_events_v5 ORDER BY event_id;
  DROP TABLE run_events_v5;
  DELETE FROM sqlite_sequence WHERE name IN ('run_events', 'run_events_v5');
  -- Built after the copy (a sorted build), under the old name.
  CREATE INDEX run_events_by_run ON run_events (run_seq);
  `,
  `
  -- v7: a one-shot job's run may be written ahead of its fire time (dispatch.ts, stage
  -- 'ahead'). Its timer then stays pending until the fire time, marked here, and the job stays
  -- active: a change to the job before then takes the run back or moves it (job-writes.ts),
  -- and the fire time only consumes the timer and finishes the job (stage 'finish').
  ALTER TABLE timers ADD COLUMN dispatched_ahead INTEGER NOT NULL DEFAULT 0;
  `,
  `
  -- v8: the silence a webhook alert announced for a job (its silent_since), until the alert
  -- of its end: the announcement survives a restart, so each is sent once, not once a process.
  ALTER TABLE jobs ADD COLUMN silence_announced_since INTEGER;
  CREATE INDEX jobs_silence_announced ON jobs (job_seq) WHERE silence_announced_since IS NOT NULL;
  `,
  `
  -- v9: team limits (docs/API.md "Team limits") and the bucket row each limited team's creates
  -- take from (team-limits.ts): its tokens for create_per_s, and its pending count, kept
  -- between two counts. The count reads two partial indexes: the active jobs a limited team's
  -- creates marked (quota_counted; NULL on every other job, which then costs no entry), and
  -- every team's ready runs (an entry from dispatch until lease; its predicate names team <> '',
  -- which only the pending count states, so no other read of ready runs takes it instead).
  CREATE TABLE team_limits (
    team TEXT PRIMARY KEY,
    create_per_s REAL,
    pending_max INTEGER,
    dispatch_per_s REAL,
    weight REAL NOT NULL,
    updated_at INTEGER NOT NULL
  );
  CREATE TABLE team_buckets (
    team TEXT PRIMARY KEY,
    tokens REAL NOT NULL,
    at_ms INTEGER NOT NULL,
    pending INTEGER,
    pending_at_ms INTEGER
  );
  ALTER TABLE jobs ADD COLUMN quota_counted INTEGER;
  CREATE INDEX jobs_quota_pending ON jobs (team) WHERE quota_counted = 1 AND state = 'active';
  CREATE INDEX runs_team_ready ON runs (team) WHERE status = 'ready' AND team <> '';
  `,
  `
  -- v10: capacity (lease-gates.ts). A lease for one team within a lane reads its runs by
  -- (pool, lane, team): a team's trickle is found without walking another team's backlog.
  CREATE INDEX runs_leasable_by_team ON runs (pool, lane, team, ready_at)
    WHERE status IN ('ready', 'retry_wait') AND held = 0;
  CREATE TABLE resource_caps (
    name TEXT PRIMARY KEY,
    max_concurrency INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  ) WITHOUT ROWID;
  -- A slot is held while its run is running under the attempt (token) that took it.
  CREATE TABLE resource_slots (
    name TEXT NOT NULL,
    run_id TEXT NOT NULL,
    token INTEGER NOT NULL,
    PRIMARY KEY (name, run_id)
  ) WITHOUT ROWID;
  CREATE TABLE pool_pauses (
    pool TEXT NOT NULL,
    team TEXT NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (pool, team)
  ) WITHOUT ROWID;
  CREATE TABLE lane_caps (
    lane TEXT PRIMARY KEY,
    dispatch_per_s REAL NOT NULL
  ) WITHOUT ROWID;
  CREATE TABLE dispatch_buckets (
    key TEXT PRIMARY KEY,
    tokens REAL NOT NULL,
    at INTEGER NOT NULL
  ) WITHOUT ROWID;
  `,
];

export const schemaVersion = migrations.length;

/** Upgrades to `targetVersion` (the latest unless a test asks for an older file). */
export function migrate(db: Database.Database, targetVersion = schemaVersion): void {
  // The version is read inside the write transaction: two processes opening a fresh file at
  // once must not both run the same step.
  const upgrade = db.transaction(() => {
    const currentVersion = db.pragma('user_version', { simple: true }) as number;
    if (currentVersion > schemaVersion) {
      throw new FatalError(`the database ${db.name} has schema version ${currentVersion}, newer than this build ` +
        `understands (${schemaVersion}): a newer tickler wrote it; run that version or a later one on it`);
    }
    for (let version = currentVersion; version < targetVersion; version++) {
      db.exec(migrations[version]!);
    }
    if (currentVersion < targetVersion) db.pragma(`user_version = ${targetVersion}`);
  });
  upgrade.immediate();
}
