// `tickler worker --store postgres://...` as a real process: it leases straight from the
// servers' database (no server between), runs its command with the payload on stdin, records
// the outcome in the ledger, and exits 0 on SIGTERM. A scheduler in this process, on a
// VirtualClock, dispatches the run; the worker's real clock is days past it, so it is ready.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import { runIdOf } from '../../src/domain/identity.js';
import { timingDefaults } from '../../src/limits.js';
import { silentLogger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { Scheduler } from '../../src/scheduler/scheduler.js';
import { withDefaultUser } from '../../src/store/postgres/connection.js';
import { openPostgresStore } from '../../src/store/postgres/index.js';
import { jobInput, jobSpec } from '../fixtures/jobs.js';
import { adminQuery, postgresSkipReason, testPgUrl } from '../store/postgres-harness.js';

const skip = await postgresSkipReason();
const startMs = Date.parse('2026-11-29T00:00:00.000Z');

const admin = adminQuery;

void describe('tickler worker --store postgres://', { skip: skip ?? false }, () => {
  void it('runs a command per run straight from the database and records the outcome; SIGTERM exits 0', async (t) => {
    // A database of its own: the worker, as a server, uses the schema `public`.
    const database = `tickler_worker_${randomBytes(5).toString('hex')}`;
    await admin(`CREATE DATABASE "${database}"`);
    const url = new URL(withDefaultUser(testPgUrl));
    url.pathname = `/${database}`;
    const store = await openPostgresStore({ url: url.toString(), useDatabaseClock: false, poolSize: 2 });
    const clock = new VirtualClock(startMs);
    const scheduler = new Scheduler({
      store, clock, metrics: new Metrics(), logger: silentLogger(), nodeId: 'node-a', forceFirstAcquire: false,
      timing: timingDefaults, fullReloadEveryRefreshes: 10,
    });
    await scheduler.start();
    // One hook, in order: node:test runs a test's after hooks in the order they were added.
    t.after(async () => {
      await scheduler.stop();
      await store.close();
      await admin(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    });
    const directory = mkdtempSync(join(tmpdir(), 'tickler-direct-exec-'));
    t.after(() => rmSync(directory, { recursive: true, force: true }));

    const atMs = startMs + 1_000;
    const [created] = await store.createJobs([jobInput(jobSpec({ at: new Date(atMs).toISOString() },
      { pool: 'ops', payload: { invoice: 42 } }), startMs)], startMs);
    const jobId = created!.job.jobId;
    await clock.advance(1_000);
    const runId = runIdOf(jobId, atMs);

    const output = join(directory, 'out');
    const child = spawn(process.execPath, ['bin/tickler.js', 'worker', '--store', url.toString(), '--team', 'default',
      '--pool', 'ops', '--wait-s', '1', '--worker-id', 'exec-direct', '--exec', `cat > ${output}; echo "$TICKLER_RUN_ID" >> ${output}`],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, TICKLER_LOG_LEVEL: 'warn' } });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));

    // Polls the database for the worker process's writes, not the passing of time.
    let run = await store.getRun(null, runId);
    for (let turn = 0; turn < 2_000 && run?.status !== 'succeeded'; turn++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      run = await store.getRun(null, runId);
    }
    assert.equal(run?.status, 'succeeded', stderr);
    assert.equal(run.workerId, 'exec-direct');
    assert.deepEqual(run.events.map((event) => event.type), ['dispatched', 'leased', 'succeeded']);
    assert.equal(readFileSync(output, 'utf8'), `{"invoice":42}${runId}\n`);

    child.kill('SIGTERM');
    assert.equal(await exited, 0, stderr);
  });
});
