// The embedded store against the shared conformance suite, plus what only SQLite has:
// group commit, schema versioning and reopening a file.
import assert from 'node:assert/strict';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { TicklerError } from '../../src/errors.js';
import { FatalError } from '../../src/fatal-error.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import { encodeCursor } from '../../src/store/cursor.js';
import { migrate, schemaVersion } from '../../src/store/sqlite/schema.js';
import { runIdOf } from '../../src/domain/identity.js';
import type { ParkedWaiterClaim, LeasedRun } from '../../src/store/store.js';
import { runStoreConformance, type StoreHandle } from './conformance.js';
import { runRaceConformance } from './conformance-race.js';
import {
  createJob, dispatchItem, firePending, heldBehindRunning, jobRecord, jobSpec, leaseOne, minuteMs, ownShard, pendingTimerOf, t0Ms,
  timerAt,
} from './conformance-fixtures.js';

async function tempDatabasePath(): Promise<{ path: string; removeDirectory(): Promise<void> }> {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-sqlite-'));
  return { path: join(directory, 'tickler.db'), removeDirectory: () => rm(directory, { recursive: true, force: true }) };
}

/** A fresh database file; `openPeer` opens a second connection to it, as another process would. */
async function openSqliteHandle(): Promise<StoreHandle> {
  const { path, removeDirectory } = await tempDatabasePath();
  const store = await openSqliteStore({ path });
  const peers: { close(): Promise<void> }[] = [];
  return {
    store,
    openPeer: async () => {
      const peer = await openSqliteStore({ path });
      peers.push(peer);
      return peer;
    },
    cleanup: async () => {
      for (const peer of peers) await peer.close();
      await store.close();
      assertActiveRunsIndexed(path);
      assertTimersNameTheirJobs(path);
      await removeDirectory();
    },
  };
}

/**
 * runs_active_by_job (schema v3) holds the runs whose finished_at is NULL, and the overlap
 * policies read it as "the job's active runs": that holds only while finished_at is NULL
 * exactly for ready, running and retry_wait runs. Checked after every conformance test,
 * which between them take runs through every transition.
 */
function assertActiveRunsIndexed(path: string): void {
  const raw = new Database(path, { readonly: true });
  try {
    const mismatched = raw.prepare(`
      SELECT run_id, status, finished_at FROM runs
      WHERE (finished_at IS NULL) != (status IN ('ready', 'running', 'retry_wait'))`).all();
    assert.deepEqual(mismatched, [], 'finished_at is NULL exactly while a run is active');
  } finally {
    raw.close();
  }
}

/**
 * Timers name their job by its seq (schema v4), which a create assigns itself for rows it
 * inserts many at a time: a timer given another job's seq would name a job on another shard,
 * or none. Checked after every conformance test.
 */
function assertTimersNameTheirJobs(path: string): void {
  const raw = new Database(path, { readonly: true });
  try {
    const misnamed = raw.prepare(`
      SELECT t.timer_id, t.job_seq, t.shard FROM timers t LEFT JOIN jobs j ON j.job_seq = t.job_seq
      WHERE j.job_seq IS NULL OR j.shard != t.shard`).all();
    assert.deepEqual(misnamed, [], 'every timer names a job of its own shard');
  } finally {
    raw.close();
  }
}

runStoreConformance('sqlite', openSqliteHandle);
runRaceConformance('sqlite', openSqliteHandle);

void describe('sqlite store: what only the embedded store has', () => {
  void it('finds jobs without a timer a range of seqs at a time, across ranges and up to the limit', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    const store = await openSqliteStore({ path, scanStepJobs: 3 });
    try {
      const jobs: string[] = [];
      for (let index = 0; index < 11; index++) {
        // Every other job has no timer: seqs 1, 3, 5, ... 11 fall in each of the four ranges.
        jobs.push((await createJob(store, { timer: index % 2 === 0 ? null : timerAt(t0Ms + minuteMs) })).jobId);
      }
      const orphans = jobs.filter((_, index) => index % 2 === 0);
      assert.deepEqual((await store.findJobsWithoutTimer(100)).map((job) => job.jobId), orphans);
      assert.deepEqual((await store.findJobsWithoutTimer(4)).map((job) => job.jobId), orphans.slice(0, 4));
      assert.equal(await store.countJobsWithoutTimer(), orphans.length);
    } finally {
      await store.close();
      await removeDirectory();
    }
  });

  void it('coalesces the writes of one event-loop turn into one transaction; a failing write fails alone', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    const store = await openSqliteStore({ path });
    try {
      const records = Array.from({ length: 200 }, () => jobRecord(jobSpec(), t0Ms));
      const duplicate = { ...records[0]!, spec: jobSpec({ key: 'another' }) };
      const calls = records.map((job) => store.createJobs([{ job, timer: timerAt(t0Ms + minuteMs) }], t0Ms));
      const failing = store.createJobs([{ job: duplicate, timer: null }], t0Ms);
      const outcomes = await Promise.all(calls);
      await assert.rejects(failing, /UNIQUE|PRIMARY KEY/);
      assert.ok(outcomes.every(([outcome]) => outcome?.kind === 'created'));
      assert.deepEqual(store.groupCommitStats, { transactions: 1, operations: 201 });
      assert.equal(await store.getJob(null, records[199]!.jobId).then((job) => job?.jobId), records[199]!.jobId);
      assert.equal((await store.listJobs({ team: null, limit: 1_000 })).items.length, 200);
    } finally {
      await store.close();
      await removeDirectory();
    }
  });

  void it('runs the creates of many callers in one group as one create, each answered its own outcomes, keys and near timers included', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    const store = await openSqliteStore({ path, nearHorizonMs: 10 * minuteMs });
    try {
      const announced: string[] = [];
      store.onNearTimers((timers) => announced.push(...timers.map((timer) => timer.jobId)));
      const keyed = jobRecord(jobSpec({ key: 'k' }), t0Ms);
      const sameRequest = { ...keyed, jobId: jobRecord(jobSpec(), t0Ms).jobId };
      const otherRequest = jobRecord(jobSpec({ key: 'k', payload: { other: true } }), t0Ms);
      const near = jobRecord(jobSpec(), t0Ms);
      const far = [jobRecord(jobSpec(), t0Ms), jobRecord(jobSpec(), t0Ms)];
      // Different callers' times: the merged create takes the latest, so the near job stays near.
      const calls = [
        store.createJobs([{ job: keyed, timer: timerAt(t0Ms + 60 * minuteMs) }], t0Ms),
        store.createJobs(far.map((job) => ({ job, timer: timerAt(t0Ms + 60 * minuteMs) })), t0Ms + 1),
        store.createJobs([{ job: sameRequest, timer: timerAt(t0Ms + 60 * minuteMs) }], t0Ms + 2),
        store.createJobs([{ job: near, timer: timerAt(t0Ms + minuteMs) }], t0Ms + 3),
        store.createJobs([{ job: otherRequest, timer: timerAt(t0Ms + 60 * minuteMs) }], t0Ms + 4),
      ];
      const outcomes = await Promise.all(calls);
      assert.deepEqual(outcomes.map((each) => each.map((outcome) => outcome.kind)),
        [['created'], ['created', 'created'], ['existing'], ['created'], ['key_conflict']]);
      assert.deepEqual(outcomes[1]!.map((outcome) => outcome.job.jobId), far.map((job) => job.jobId));
      assert.equal(outcomes[2]![0]!.job.jobId, keyed.jobId, 'the repeat answers the job an earlier caller created');
      assert.equal(outcomes[4]![0]!.job.jobId, keyed.jobId);
      assert.deepEqual(store.groupCommitStats, { transactions: 1, operations: 5 });
      assert.deepEqual(announced, [near.jobId]);
      assert.equal((await store.listJobs({ team: null, limit: 100 })).items.length, 4);
    } finally {
      await store.close();
      await removeDirectory();
    }
  });

  void it('records the successes of many callers in one group by one UPDATE; the rest run alone, in order', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    const store = await openSqliteStore({ path });
    try {
      const { first, leased: firstLease, held } = await heldBehindRunning(store);
      const others = [];
      for (let index = 0; index < 3; index++) {
        const job = await createJob(store);
        others.push((await firePending(store, job, t0Ms + minuteMs)).runId);
      }
      const leased = await store.leaseRuns({ team: null, pool: 'pool-a', max: 3, leaseMs: null, workerId: 'w', nowMs: t0Ms + minuteMs });
      assert.equal(leased.length, 3);
      const ready: string[] = [];
      store.onRunsReady((pool) => ready.push(pool));
      const before = store.groupCommitStats;
      const success = { team: null, status: 'succeeded', error: null, result: null, nowMs: t0Ms + 2 * minuteMs, wantRun: false } as const;
      // A stale token first (it runs alone), then the held run's job and the others.
      const outcomes = await Promise.all([
        store.completeRun({ ...success, runId: leased[0]!.runId, fencingToken: '1' }),
        store.completeRun({ ...success, runId: first.runId, fencingToken: firstLease.fencingToken }),
        ...leased.map((run) => store.completeRun({ ...success, runId: run.runId, fencingToken: run.fencingToken })),
      ]);
      assert.deepEqual(outcomes.map((outcome) => outcome.kind), ['stale_token', 'accepted', 'accepted', 'accepted', 'accepted']);
      // leased[0] is named twice and its first completion missed: both of its run alone.
      assert.deepEqual(store.mergedWriteStats, { creates: 0, completions: 3 });
      assert.equal(store.groupCommitStats.transactions - before.transactions, 1);
      assert.deepEqual(ready, ['pool-a'], 'the released held run is announced though the first caller ran alone');
      assert.equal((await leaseOne(store, t0Ms + 2 * minuteMs))?.runId, held.runId);
    } finally {
      await store.close();
      await removeDirectory();
    }
  });

  void it('keeps what it acknowledged across close and reopen, and commits creates still queued at close', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    try {
      const store = await openSqliteStore({ path });
      const acknowledged = await createJob(store);
      const queued = jobRecord(jobSpec(), t0Ms);
      const pending = store.createJobs([{ job: queued, timer: timerAt(t0Ms + minuteMs) }], t0Ms);
      await store.close();
      assert.equal((await pending)[0]?.kind, 'created');
      await assert.rejects(store.getJob(null, acknowledged.jobId),
        (error: unknown) => error instanceof TicklerError && error.code === 'unavailable');
      const reopened = await openSqliteStore({ path });
      assert.deepEqual(await reopened.getJob(null, acknowledged.jobId), acknowledged);
      assert.equal((await reopened.getJob(null, queued.jobId))?.jobId, queued.jobId);
      await reopened.close();
    } finally {
      await removeDirectory();
    }
  });

  void it('versions its schema and refuses a file from a newer build', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    try {
      await (await openSqliteStore({ path })).close();
      const raw = new Database(path);
      assert.equal(raw.pragma('user_version', { simple: true }), schemaVersion);
      assert.equal(raw.pragma('journal_mode', { simple: true }), 'wal');
      raw.pragma(`user_version = ${schemaVersion + 1}`);
      raw.close();
      await assert.rejects(openSqliteStore({ path }), (error: unknown) =>
        error instanceof FatalError && /has schema version \d+, newer than this build understands/.test(error.message));
    } finally {
      await removeDirectory();
    }
  });

  void it('upgrades a version 1 file in place: old runs keep their events, list and page as before', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    try {
      // A file as version 1 wrote it: events keyed by the run id, and runs sharing scheduled_at.
      const raw = new Database(path);
      raw.pragma('journal_mode = WAL');
      migrate(raw, 1);
      const scheduledAtMs = t0Ms + minuteMs;
      const insertJob = raw.prepare(`INSERT INTO jobs (job_id, team, key, pool, state, spec, request_hash, shard, version,
        created_at, updated_at) VALUES (?, 'team-a', NULL, 'pool-a', 'active', ?, 'hash', ?, 1, ?, ?)`);
      const insertRun = raw.prepare(`INSERT INTO runs (run_id, job_id, team, pool, lane, scheduled_at, fire_at,
        dispatched_at, attempt, attempt_base, status, started_at, finished_at, last_error, result, ready_at,
        lease_expires_at, lease_ms, worker_id, fencing_token, held)
        VALUES (?, ?, 'team-a', 'pool-a', 'P1', ?, ?, ?, ?, 0, ?, NULL, ?, ?, NULL, ?, NULL, NULL, NULL, NULL, 0)`);
      const insertEvent = raw.prepare(
        'INSERT INTO run_events (run_id, at, type, from_status, to_status, detail) VALUES (?, ?, ?, ?, ?, ?)');
      const jobs = Array.from({ length: 4 }, () => jobRecord(jobSpec(), t0Ms));
      const runIds = jobs.map((job) => runIdOf(job.jobId, scheduledAtMs));
      for (const [index, job] of jobs.entries()) {
        insertJob.run(job.jobId, JSON.stringify(job.spec), job.shard, t0Ms, t0Ms);
        const dead = index === 0;
        insertRun.run(runIds[index], job.jobId, scheduledAtMs, scheduledAtMs, scheduledAtMs, dead ? 1 : 0,
          dead ? 'dead' : 'ready', dead ? scheduledAtMs + 5 : null, dead ? 'boom' : null, dead ? null : scheduledAtMs);
        insertEvent.run(runIds[index], scheduledAtMs, 'dispatched', null, 'ready', '{"shard_token":"1"}');
        if (dead) insertEvent.run(runIds[index], scheduledAtMs + 5, 'dead', 'running', 'dead', '{"error":"boom"}');
      }
      insertEvent.run('no-such-run', scheduledAtMs, 'catch_up_summary', null, null, null);
      raw.close();

      const store = await openSqliteStore({ path });
      try {
        const oldRun = await store.getRun('team-a', runIds[0]!);
        assert.equal(oldRun?.status, 'dead');
        assert.deepEqual(oldRun.events.map((event) => [event.runId, event.type, event.sequence]),
          [[runIds[0], 'dispatched', 1], [runIds[0], 'dead', 2]]);
        assert.deepEqual((await store.listRuns({ team: 'team-a', status: 'dead', limit: 10 })).items.map((run) => run.runId),
          [runIds[0]]);
        // A cursor issued before the upgrade names the last run by its id, as one issued after does.
        const firstPage = await store.listRuns({ team: 'team-a', limit: 1 });
        const oldCursor = encodeCursor(scheduledAtMs, firstPage.items[0]!.runId);
        assert.equal(firstPage.nextCursor, oldCursor);
        const rest = await store.listRuns({ team: 'team-a', limit: 10, cursor: oldCursor });
        assert.deepEqual([...firstPage.items, ...rest.items].map((run) => run.runId).sort(), [...runIds].sort());
        assert.equal((await store.listJobs({ team: null, limit: 10 })).items.length, 4);

        // Old runs go on living: a lease and a completion append after their old events.
        const leased = (await leaseOne(store, scheduledAtMs + 10))!;
        assert.ok(runIds.includes(leased.runId));
        const done = await store.completeRun({ team: null, runId: leased.runId, fencingToken: leased.fencingToken,
          status: 'succeeded', error: null, result: null, nowMs: scheduledAtMs + 20 });
        assert.equal(done.kind, 'completed');
        const events = (await store.getRun(null, leased.runId))!.events;
        assert.deepEqual(events.map((event) => event.type), ['dispatched', 'leased', 'succeeded']);
        // After every old event a reader could see (the orphan's id was never readable: v6
        // numbers from the largest id kept).
        const oldSequences = (await Promise.all(runIds.map(async (id) => (await store.getRun(null, id))!.events)))
          .flat().filter((event) => event.type !== 'leased' && event.type !== 'succeeded').map((event) => event.sequence);
        assert.ok(events[1]!.sequence > Math.max(...oldSequences), 'new events number after every old one');
        // And new runs land after them.
        const fresh = await createJob(store, { timer: timerAt(scheduledAtMs + minuteMs) });
        const { runId } = await firePending(store, fresh, scheduledAtMs + minuteMs);
        assert.equal((await store.listRuns({ team: 'team-a', limit: 1 })).items[0]?.runId, runId);
        assert.deepEqual((await store.getRun(null, runId))?.events.map((event) => event.type), ['dispatched']);
      } finally {
        await store.close();
      }
      const upgraded = new Database(path, { readonly: true });
      assert.equal(upgraded.pragma('user_version', { simple: true }), schemaVersion);
      assert.equal(upgraded.prepare("SELECT count(*) FROM sqlite_master WHERE name LIKE '%_v1'").pluck().get(), 0,
        'the old tables are gone');
      assert.equal(upgraded.prepare("SELECT count(*) FROM sqlite_sequence WHERE name LIKE '%_v1'").pluck().get(), 0);
      assert.equal(upgraded.prepare("SELECT count(*) FROM sqlite_master WHERE name LIKE '%_v2'").pluck().get(), 0);
      assert.equal(upgraded.prepare(`SELECT count(*) FROM runs r LEFT JOIN jobs j ON j.job_seq = r.job_seq
        WHERE j.job_id IS NOT r.job_id`).pluck().get(), 0, 'every run names its job by the job seq (v3)');
      upgraded.close();
    } finally {
      await removeDirectory();
    }
  });

  void it('leases to a claimed waiter inside the dispatch transaction, and settles a claim with nothing when it fails', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    const store = await openSqliteStore({ path });
    try {
      const settled: LeasedRun[][] = [];
      const claims: ParkedWaiterClaim[] = [];
      let max = 5;
      store.setParkedWaiters((pool, nowMs) => {
        if (claims.length >= 1) return null;
        const claim: ParkedWaiterClaim = {
          request: { team: null, pool, max, leaseMs: 30_000, workerId: 'parked', nowMs },
          settle: (runs) => settled.push(runs),
        };
        claims.push(claim);
        return claim;
      });
      const job = await createJob(store);
      const dispatchAtMs = t0Ms + minuteMs;
      const transactionsBefore = store.groupCommitStats.transactions;
      const { runId } = await firePending(store, job, dispatchAtMs);
      // ownShard's grant, then the dispatch with its lease: no lease transaction of its own.
      assert.equal(store.groupCommitStats.transactions - transactionsBefore, 2);
      assert.deepEqual(settled.map((runs) => runs.map((run) => run.runId)), [[runId]]);
      const run = await store.getRun(null, runId);
      assert.equal(run?.status, 'running');
      assert.deepEqual(run?.events.map((event) => [event.type, event.atMs]), [['dispatched', dispatchAtMs], ['leased', dispatchAtMs]]);

      // A lease that throws inside the dispatch (max 0 breaks its precondition) rolls the whole
      // dispatch back, and the claim is settled with nothing: the waiter keeps waiting.
      claims.length = 0;
      settled.length = 0;
      max = 0;
      const other = await createJob(store);
      await assert.rejects(firePending(store, other, dispatchAtMs));
      assert.deepEqual(settled, [[]]);
      assert.equal(await store.getRun(null, runIdOf(other.jobId, dispatchAtMs)), null, 'the dispatch was rolled back');
    } finally {
      await store.close();
      await removeDirectory();
    }
  });

  void it('shares one transaction among dispatch, writeRunsAhead and finishAhead called in one turn', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    const store = await openSqliteStore({ path });
    try {
      const dueMs = t0Ms + minuteMs;
      const whole = await createJob(store);
      const ahead = await createJob(store, { timer: timerAt(dueMs + 5_000) });
      const finished = await createJob(store, { timer: timerAt(dueMs) });
      const [wholeTimer, aheadTimer, finishedTimer] = await Promise.all([whole, ahead, finished].map((job) => pendingTimerOf(store, job)));
      // Each shard leased once: a second grant would make the first token stale.
      const leases = new Map<number, Awaited<ReturnType<typeof ownShard>>>();
      for (const job of [whole, ahead, finished]) if (!leases.has(job.shard)) leases.set(job.shard, await ownShard(store, job.shard, t0Ms));
      const finishedItem = dispatchItem(leases.get(finished.shard)!, finishedTimer!);
      assert.equal((await store.writeRunsAhead([finishedItem], dueMs - 1_000))[0]?.kind, 'written_ahead');
      const wholeItem = dispatchItem(leases.get(whole.shard)!, wholeTimer!);
      const aheadItem = dispatchItem(leases.get(ahead.shard)!, aheadTimer!);
      const transactionsBefore = store.groupCommitStats.transactions;
      const [dispatched, writtenAhead, done] = await Promise.all([
        store.dispatch([wholeItem], dueMs), store.writeRunsAhead([aheadItem], dueMs), store.finishAhead([finishedItem], dueMs),
      ]);
      assert.equal(store.groupCommitStats.transactions - transactionsBefore, 1, 'one transaction for the three');
      assert.deepEqual([dispatched[0]?.kind, writtenAhead[0]?.kind, done[0]?.kind], ['dispatched', 'written_ahead', 'finished']);
    } finally {
      await store.close();
      await removeDirectory();
    }
  });

  void it('answers unavailable while another process holds the write lock past the busy timeout', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    const store = await openSqliteStore({ path, busyTimeoutMs: 50 });
    const blocker = new Database(path);
    try {
      blocker.exec('BEGIN IMMEDIATE');
      await assert.rejects(store.acquireShardLeases('node-a', [1], 10_000, t0Ms),
        (error: unknown) => error instanceof TicklerError && error.code === 'unavailable');
      blocker.exec('ROLLBACK');
      assert.equal((await store.acquireShardLeases('node-a', [1], 10_000, t0Ms)).length, 1);
    } finally {
      blocker.close();
      await store.close();
      await removeDirectory();
    }
  });

  void it('never issues a lease token twice, even after a power failure lost a lease and its token', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    try {
      let store = await openSqliteStore({ path });
      // A lease before the snapshot reserves a block of tokens that the disk then shows; the
      // lost lease below takes its token from that block without writing the sequence.
      const earlier = await createJob(store);
      await firePending(store, earlier, t0Ms + minuteMs);
      assert.ok(await leaseOne(store, t0Ms + minuteMs));
      const job = await createJob(store);
      const { runId } = await firePending(store, job, t0Ms + minuteMs);
      // What the disk holds when the power goes: everything synced (the database and its
      // write-ahead log as they are now), and not the lease that comes next.
      await copyFile(path, `${path}.at-power-loss`);
      await copyFile(`${path}-wal`, `${path}-wal.at-power-loss`);
      const lost = (await leaseOne(store, t0Ms + minuteMs))!;
      await store.close();
      await copyFile(`${path}.at-power-loss`, path);
      await copyFile(`${path}-wal.at-power-loss`, `${path}-wal`);
      await rm(`${path}-shm`, { force: true });
      store = await openSqliteStore({ path });
      const again = (await leaseOne(store, t0Ms + minuteMs))!;
      assert.equal(again.runId, runId);
      assert.notEqual(again.fencingToken, lost.fencingToken, 'the lost lease\'s token is not handed out again');
      const late = await store.completeRun({ team: null, runId, fencingToken: lost.fencingToken, status: 'succeeded',
        error: null, result: null, nowMs: t0Ms + minuteMs });
      assert.equal(late.kind, 'stale_token', 'the worker that outlived the failure cannot complete the new attempt');
      await store.close();
    } finally {
      await removeDirectory();
    }
  });

  void it('pins retry jitter through the random option', async () => {
    const { path, removeDirectory } = await tempDatabasePath();
    const store = await openSqliteStore({ path, random: () => 1 });
    try {
      const job = await createJob(store, { spec: { retry: { max_attempts: 3, base_s: 10, max_s: 100 } } });
      const { runId } = await firePending(store, job, t0Ms + minuteMs);
      const leased = (await leaseOne(store, t0Ms + minuteMs))!;
      const outcome = await store.completeRun({ team: null, runId, fencingToken: leased.fencingToken, status: 'failed',
        error: 'x', result: null, nowMs: t0Ms + minuteMs });
      assert.ok(outcome.kind === 'completed');
      assert.equal(outcome.run.readyAtMs, t0Ms + minuteMs + 12_000, '10 s × 1.2 at the top of the jitter range');
    } finally {
      await store.close();
      await removeDirectory();
    }
  });
});
