// Schema upgrades of the embedded store. v4: a pending timer names its job by the job's seq;
// a version 3 file's pending timers upgrade in place and fire as they would have, and a batch
// of creates, which writes its jobs and timers in multi-row INSERTs, gives each timer its own
// job's seq. v5: the dead man's switch column. v6: run events without AUTOINCREMENT.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { bucketOf, runIdOf } from '../../src/domain/identity.js';
import type { JobRecord } from '../../src/domain/types.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { migrate, schemaVersion } from '../../src/store/sqlite/schema.js';
import type { CreateJobInput, LoadedTimer } from '../../src/store/store.js';
import {
  assertOnlyWatchedAfterUpgrade, createJob, dispatchItem, firePending, jobRecord, jobSpec, leaseOne, minuteMs, ownShard, t0Ms, timerAt,
} from './conformance-fixtures.js';

async function tempDatabasePath(): Promise<{ path: string; removeDirectory(): Promise<void> }> {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-sqlite-v4-'));
  return { path: join(directory, 'tickler.db'), removeDirectory: () => rm(directory, { recursive: true, force: true }) };
}

const everyTimer = { untilMs: Number.MAX_SAFE_INTEGER, limit: 10_000 };

function shardsOf(jobs: readonly JobRecord[]): number[] {
  return [...new Set(jobs.map((job) => job.shard))];
}

/** Timers whose job_seq names no job, or a job on another shard: a timer given the wrong seq. */
function timersNamingNoJobOfTheirs(path: string): number {
  const raw = new Database(path, { readonly: true });
  try {
    return raw.prepare<[], number>(`
      SELECT count(*) FROM timers t LEFT JOIN jobs j ON j.job_seq = t.job_seq
      WHERE j.job_seq IS NULL OR j.shard != t.shard`).pluck().get()!;
  } finally {
    raw.close();
  }
}

void describe('sqlite store: timers keyed by the job seq (schema v4)', () => {
  void it('upgrades a version 3 file: pending timers keep their ids, fire as before, and no id is issued again', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    try {
      const raw = new Database(path);
      raw.pragma('journal_mode = WAL');
      migrate(raw, 3);
      const insertJob = raw.prepare(`INSERT INTO jobs (job_id, team, key, pool, state, spec, request_hash, shard, version,
        created_at, updated_at) VALUES (?, 'team-a', NULL, 'pool-a', ?, ?, 'hash', ?, 1, ?, ?)`);
      const insertTimer = raw.prepare(
        'INSERT INTO timers (job_id, shard, bucket, fire_at, scheduled_at) VALUES (?, ?, ?, ?, ?)');
      const recurring = jobRecord(jobSpec(), t0Ms);
      const oneShot = jobRecord(jobSpec({ schedule: { at: new Date(t0Ms + minuteMs).toISOString() } }), t0Ms);
      const finished = jobRecord(jobSpec(), t0Ms);
      for (const [job, state] of [[recurring, 'active'], [oneShot, 'active'], [finished, 'done']] as const) {
        insertJob.run(job.jobId, state, JSON.stringify(job.spec), job.shard, t0Ms, t0Ms);
      }
      // Timers in another order than their jobs, so no timer's id is its job's seq. The
      // finished job's timer has the highest id and is gone (its dispatch deleted it), but a
      // wheel may still hold it.
      const write = (job: JobRecord, atMs: number) => insertTimer.run(job.jobId, job.shard, bucketOf(atMs), atMs, atMs);
      write(oneShot, t0Ms + minuteMs);
      write(recurring, t0Ms + 2 * minuteMs);
      write(finished, t0Ms);
      raw.prepare('DELETE FROM timers WHERE job_id = ?').run(finished.jobId);
      raw.close();

      const store = await openSqliteStore({ path });
      try {
        const shards = shardsOf([recurring, oneShot, finished]);
        const loaded = await store.loadTimers({ shards, ...everyTimer });
        assert.deepEqual(loaded.map((timer) => [timer.timerId, timer.jobId, timer.fireAtMs, timer.jobVersion]), [
          ['1', oneShot.jobId, t0Ms + minuteMs, 1],
          ['2', recurring.jobId, t0Ms + 2 * minuteMs, 1],
        ]);
        assert.equal((await store.getJob(null, recurring.jobId))?.nextFireAtMs, t0Ms + 2 * minuteMs);
        assert.equal((await store.getJob(null, oneShot.jobId))?.nextFireAtMs, t0Ms + minuteMs);
        assert.equal(await store.countJobsWithoutTimer(), 0, 'every active job still has its timer');

        const [oneShotTimer, recurringTimer] = loaded as [LoadedTimer, LoadedTimer];
        const lease = await ownShard(store, oneShot.shard, t0Ms + minuteMs);
        // A timer presented as another job's is not consumed, as before.
        const [misnamed] = await store.dispatch(
          [dispatchItem(lease, { ...oneShotTimer, jobId: recurring.jobId }, { nextTimer: null })], t0Ms + minuteMs);
        assert.equal(misnamed?.kind, 'timer_gone');
        const [fired] = await store.dispatch([dispatchItem(lease, oneShotTimer, { nextTimer: null })], t0Ms + minuteMs);
        assert.equal(fired?.kind, 'dispatched');
        assert.equal((await store.getRun(null, runIdOf(oneShot.jobId, t0Ms + minuteMs)))?.status, 'ready');
        assert.equal((await store.getJob(null, oneShot.jobId))?.state, 'done');

        const recurringLease = await ownShard(store, recurring.shard, t0Ms + 2 * minuteMs);
        const [next] = await store.dispatch(
          [dispatchItem(recurringLease, recurringTimer, { nextTimer: timerAt(t0Ms + 3 * minuteMs) })], t0Ms + 2 * minuteMs);
        assert.ok(next?.kind === 'dispatched');
        assert.equal(next.nextTimerId, '4', 'a new timer takes no id a timer before the upgrade had');
        assert.equal((await store.getJob(null, recurring.jobId))?.nextFireAtMs, t0Ms + 3 * minuteMs);
        // The stale wheel entry of the finished job's timer fires nothing.
        const finishedLease = await ownShard(store, finished.shard, t0Ms);
        const [stale] = await store.dispatch(
          [dispatchItem(finishedLease, { ...recurringTimer, timerId: '3', jobId: finished.jobId, shard: finished.shard },
            { nextTimer: null })], t0Ms + 2 * minuteMs);
        assert.equal(stale?.kind, 'timer_gone');
        assert.deepEqual((await store.loadTimers({ shards, ...everyTimer })).map((timer) => [timer.timerId, timer.jobId]),
          [['4', recurring.jobId]]);
      } finally {
        await store.close();
      }
      const upgraded = new Database(path, { readonly: true });
      try {
        assert.equal(upgraded.pragma('user_version', { simple: true }), schemaVersion);
        assert.equal(upgraded.prepare("SELECT count(*) FROM sqlite_master WHERE name LIKE '%_v3'").pluck().get(), 0,
          'the old table is gone');
        assert.equal(upgraded.prepare("SELECT count(*) FROM sqlite_sequence WHERE name LIKE '%_v3'").pluck().get(), 0);
        const columns = upgraded.prepare<[], string>("SELECT name FROM pragma_table_info('timers')").pluck().all();
        assert.deepEqual(columns, ['timer_id', 'job_seq', 'shard', 'bucket', 'fire_at', 'scheduled_at', 'dispatched_ahead']);
      } finally {
        upgraded.close();
      }
      assert.equal(timersNamingNoJobOfTheirs(path), 0);
    } finally {
      await removeDirectory();
    }
  });

  void it('gives each timer of a batched create its own job\'s seq, with keyed, repeated and near-horizon jobs among them', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    const store = await openSqliteStore({ path, nearHorizonMs: 10 * minuteMs });
    const peer = await openSqliteStore({ path });
    try {
      const announced: LoadedTimer[] = [];
      const stopListening = store.onNearTimers((timers) => announced.push(...timers));
      // Another connection writes jobs between the batches: the seqs a batch takes follow its rows.
      const alone = jobRecord(jobSpec(), t0Ms);
      await store.createJobs([{ job: alone, timer: timerAt(t0Ms + 100 * minuteMs) }], t0Ms);
      const other = jobRecord(jobSpec(), t0Ms);
      await peer.createJobs([{ job: other, timer: timerAt(t0Ms + 101 * minuteMs) }], t0Ms);

      // Fire times all distinct: every fifth job is keyed, every seventh has no timer, every
      // third fires inside the near horizon (inserted one by one, the others many to a row).
      const items: CreateJobInput[] = Array.from({ length: 250 }, (_, index) => {
        const job = jobRecord(jobSpec({ key: index % 5 === 0 ? `key-${index}` : null }), t0Ms);
        const fireAtMs = t0Ms + (index % 3 === 0 ? 1_000 + index : 200 * minuteMs + index * 1_000);
        return { job, timer: index % 7 === 0 ? null : timerAt(fireAtMs) };
      });
      // A repeat of a keyed job already in the batch: answered as existing, writes nothing.
      items.splice(120, 0, { job: { ...items[5]!.job, jobId: jobRecord(jobSpec(), t0Ms).jobId }, timer: timerAt(t0Ms) });
      const outcomes = await store.createJobs(items, t0Ms);
      assert.deepEqual(outcomes.map((outcome) => outcome.kind).filter((kind) => kind !== 'created'), ['existing']);
      stopListening();

      const created = items.filter((_, index) => index !== 120);
      const expectedFireAtMs = new Map(created.map((item) => [item.job.jobId, item.timer?.fireAtMs ?? null]));
      expectedFireAtMs.set(alone.jobId, t0Ms + 100 * minuteMs);
      expectedFireAtMs.set(other.jobId, t0Ms + 101 * minuteMs);
      for (const [jobId, fireAtMs] of expectedFireAtMs) {
        assert.equal((await store.getJob(null, jobId))?.nextFireAtMs, fireAtMs, `job ${jobId}'s next fire time`);
      }
      const loaded = await store.loadTimers({ shards: shardsOf([alone, other, ...created.map((item) => item.job)]),
        ...everyTimer });
      assert.equal(loaded.length, [...expectedFireAtMs.values()].filter((fireAtMs) => fireAtMs !== null).length);
      for (const timer of loaded) assert.equal(timer.fireAtMs, expectedFireAtMs.get(timer.jobId), `timer ${timer.timerId}`);
      // What was announced is what the loader reads: same timer ids, same jobs.
      assert.ok(announced.length > 50);
      const loadedById = new Map(loaded.map((timer) => [timer.timerId, timer.jobId]));
      for (const timer of announced) assert.equal(loadedById.get(timer.timerId), timer.jobId, `announced ${timer.timerId}`);
    } finally {
      await peer.close();
      await store.close();
    }
    assert.equal(timersNamingNoJobOfTheirs(path), 0);
    await removeDirectory();
  });
});

void describe('sqlite schema v5: the dead man\'s switch column', () => {
  void it('fills max_silence_s from each job\'s spec on upgrade, so jobs created before it are watched', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'tickler-v5-'));
    const path = join(directory, 'tickler.db');
    try {
      const store = await openSqliteStore({ path });
      const watched = await createJob(store, { spec: { max_silence_s: 60 } });
      await createJob(store, { spec: { max_silence_s: null } });
      await store.close();
      // Back to v4 as a v4 build left it: no column, no index.
      const raw = new Database(path);
      raw.exec('DROP INDEX jobs_watched; ALTER TABLE jobs DROP COLUMN max_silence_s;');
      raw.exec(undoV7AndLater);
      raw.pragma('user_version = 4');
      raw.close();
      await assertOnlyWatchedAfterUpgrade(() => openSqliteStore({ path }), watched.jobId);
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  });
});

void describe('sqlite schema v6: run events without AUTOINCREMENT', () => {
  void it('keeps every event and its sequence on upgrade; later events number after them', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    try {
      let store = await openSqliteStore({ path });
      const dueMs = t0Ms + minuteMs;
      const runIds: string[] = [];
      for (let index = 0; index < 3; index++) {
        runIds.push((await firePending(store, await createJob(store, { timer: timerAt(dueMs) }), dueMs)).runId);
      }
      const leased = (await leaseOne(store, dueMs + 10))!;
      assert.equal((await store.completeRun({ team: null, runId: leased.runId, fencingToken: leased.fencingToken,
        status: 'succeeded', error: null, result: null, nowMs: dueMs + 20 })).kind, 'completed');
      const before = await Promise.all(runIds.map(async (runId) => (await store.getRun(null, runId))!.events));
      await store.close();
      // Back to v5 as a v5 build left it: the same events in a table with AUTOINCREMENT.
      const raw = new Database(path);
      raw.exec(`ALTER TABLE run_events RENAME TO run_events_v6;
        CREATE TABLE run_events (event_id INTEGER PRIMARY KEY AUTOINCREMENT, run_seq INTEGER NOT NULL, at INTEGER NOT NULL,
          type TEXT NOT NULL, from_status TEXT, to_status TEXT, detail TEXT);
        INSERT INTO run_events SELECT * FROM run_events_v6 ORDER BY event_id;
        DROP TABLE run_events_v6;
        CREATE INDEX run_events_by_run ON run_events (run_seq);`);
      assert.equal(raw.prepare("SELECT count(*) FROM sqlite_sequence WHERE name = 'run_events'").pluck().get(), 1);
      raw.exec(undoV7AndLater);
      raw.pragma('user_version = 5');
      raw.close();

      store = await openSqliteStore({ path });
      try {
        const after = await Promise.all(runIds.map(async (runId) => (await store.getRun(null, runId))!.events));
        assert.deepEqual(after, before, 'every event, with its sequence, as before');
        const oldMax = Math.max(...before.flat().map((event) => event.sequence));
        const next = (await leaseOne(store, dueMs + 30))!;
        const events = (await store.getRun(null, next.runId))!.events;
        assert.deepEqual(events.map((event) => event.type), ['dispatched', 'leased']);
        assert.equal(events[1]!.sequence, oldMax + 1, 'the next event takes the next id');
      } finally {
        await store.close();
      }
      const upgraded = new Database(path, { readonly: true });
      assert.equal(upgraded.pragma('user_version', { simple: true }), schemaVersion);
      const tableSql = upgraded.prepare("SELECT sql FROM sqlite_master WHERE name = 'run_events'").pluck().get() as string;
      assert.doesNotMatch(tableSql, /AUTOINCREMENT/);
      assert.equal(upgraded.prepare("SELECT count(*) FROM sqlite_sequence WHERE name LIKE 'run_events%'").pluck().get(), 0);
      assert.equal(upgraded.prepare("SELECT count(*) FROM sqlite_master WHERE name LIKE '%_v5'").pluck().get(), 0);
      assert.deepEqual(upgraded.prepare("SELECT name FROM sqlite_master WHERE tbl_name = 'run_events' AND type = 'index'")
        .pluck().all(), ['run_events_by_run']);
      upgraded.close();
    } finally {
      await removeDirectory();
    }
  });
});

/** What v7 added, taken out again, for tests that put a file back to an older version. */
// What v10 (capacity), v9 (team limits), v8 (the silence announced) and v7 (timers written ahead) added, taken back in that order.
const undoV7AndLater = `DROP INDEX runs_team_ready; DROP INDEX jobs_quota_pending; ALTER TABLE jobs DROP COLUMN quota_counted;
  DROP TABLE team_buckets; DROP TABLE team_limits;
  DROP INDEX jobs_silence_announced; ALTER TABLE jobs DROP COLUMN silence_announced_since;
  ALTER TABLE timers DROP COLUMN dispatched_ahead;
  DROP INDEX runs_leasable_by_team; DROP TABLE resource_caps; DROP TABLE resource_slots; DROP TABLE pool_pauses;
  DROP TABLE lane_caps; DROP TABLE dispatch_buckets;`;

void describe('sqlite schema v7: timers whose run was written ahead', () => {
  void it('gives every pending timer of an older file the column, unmarked, so each fires whole as before', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    try {
      let store = await openSqliteStore({ path });
      const dueMs = t0Ms + minuteMs;
      const job = await createJob(store, { timer: timerAt(dueMs) });
      await store.close();
      const raw = new Database(path);
      raw.exec(undoV7AndLater);
      raw.pragma('user_version = 6');
      raw.close();
      store = await openSqliteStore({ path });
      try {
        const [timer] = await store.loadTimers({ shards: [job.shard], untilMs: dueMs + 1, limit: 10 });
        assert.equal(timer?.jobId, job.jobId);
        assert.equal(timer.dispatchedAhead, undefined, 'not marked');
        const { result } = await firePending(store, job, dueMs);
        assert.equal(result.kind, 'dispatched', 'fired whole, as a v6 build would');
      } finally {
        await store.close();
      }
      const upgraded = new Database(path, { readonly: true });
      try {
        assert.equal(upgraded.pragma('user_version', { simple: true }), schemaVersion);
      } finally {
        upgraded.close();
      }
    } finally {
      await removeDirectory();
    }
  });
});
