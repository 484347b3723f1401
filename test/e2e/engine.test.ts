// End to end on the embedded store: a real `tickler serve --virtual-clock` process, workers
// through the SDK and through `tickler worker --exec`, real signals. Time moves only through
// POST /v1/clock/advance, so every assertion is about order, never about wall-clock speed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { TicklerClient, createWorker } from '../../src/index.js';
import { isTicklerApiError } from '../../src/worker/errors.js';
import { cliPath, eventually, repoRoot, startServerProcess, tempDataDir, type ServerProcess } from './server-process.js';

const startAt = '2026-11-29T00:00:00.000Z';
const startMs = Date.parse(startAt);

async function withServer(fn: (server: ServerProcess, client: TicklerClient) => Promise<void>, args: string[] = []): Promise<void> {
  const data = tempDataDir();
  const server = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', startAt, ...args] });
  try {
    await fn(server, new TicklerClient({ baseUrl: server.url }));
  } finally {
    await server.stop();
    data.remove();
  }
}

function at(offsetMs: number): string {
  return new Date(startMs + offsetMs).toISOString();
}

async function runsOf(client: TicklerClient, jobId: string) {
  return (await client.listJobRuns(jobId)).items;
}

test('an SDK worker runs a timer once at its time, and the ledger shows it', async () => {
  await withServer(async (_server, client) => {
    const job = await client.createJob({ schedule: { at: at(60_000) }, pool: 'sdk', payload: { n: 1 } });
    const seen: Parameters<Parameters<typeof createWorker>[0]['handler']>[0][] = [];
    const worker = createWorker({
      client, pool: 'sdk', concurrency: 2, waitS: 5,
      handler: async (run) => {
        seen.push(run);
        return { ok: true };
      },
    });
    worker.start();
    try {
      await client.advanceClock(59);
      // A lone timer is not a herd: it is not written ahead (docs/tuning.md, "The server: dispatch").
      assert.deepEqual(await runsOf(client, job.job_id), [], 'nothing before its time');
      await client.advanceClock(1);
      const done = await eventually(async () => {
        const [run] = await runsOf(client, job.job_id);
        return run?.status === 'succeeded' ? run : undefined;
      }, 'the run to succeed');
      assert.equal(seen.length, 1);
      assert.equal(seen[0]!.run_id, done.run_id);
      assert.deepEqual(seen[0]!.payload, { n: 1 });
      assert.equal(done.scheduled_at, at(60_000));
      assert.deepEqual(done.result, { ok: true });
      const detail = await client.getRun(done.run_id);
      const types = (detail.events ?? []).map((event) => event.type);
      assert.ok(types.includes('dispatched') && types.includes('leased') && types.includes('succeeded'), types.join(','));
    } finally {
      await worker.stop();
    }
  });
});

test('tickler worker --exec: payload on stdin, run facts in the environment, exit 75 retries, exit 0 succeeds', async () => {
  await withServer(async (server, client) => {
    const out = tempDataDir('tickler-exec-');
    const script = `cat > "${out.dir}/payload-$TICKLER_ATTEMPT.json"; ` +
      `echo "$TICKLER_RUN_ID $TICKLER_ATTEMPT $TICKLER_SCHEDULED_AT" > "${out.dir}/env-$TICKLER_ATTEMPT"; ` +
      'if [ "$TICKLER_ATTEMPT" = "1" ]; then echo "try again" >&2; exit 75; fi; exit 0';
    const worker = spawn(process.execPath, ['--import', 'tsx', cliPath, 'worker', '--pool', 'exec', '--exec', script,
      '--url', server.url], { cwd: repoRoot, stdio: 'ignore', env: { ...process.env, TICKLER_LOG_LEVEL: 'warn' } });
    try {
      const job = await client.createJob({ schedule: { at: at(1_000) }, pool: 'exec', payload: { order: 42 },
        retry: { max_attempts: 3, base_s: 10, max_s: 10 } });
      await client.advanceClock(1);
      const failed = await eventually(async () => {
        const [run] = await runsOf(client, job.job_id);
        return run?.status === 'retry_wait' ? run : undefined;
      }, 'the first attempt to fail with exit 75');
      assert.match(failed.last_error ?? '', /try again/);
      assert.deepEqual(JSON.parse(readFileSync(join(out.dir, 'payload-1.json'), 'utf8')), { order: 42 });
      assert.equal(readFileSync(join(out.dir, 'env-1'), 'utf8').trim(), `${failed.run_id} 1 ${at(1_000)}`);
      await client.advanceClock(12);
      const succeeded = await eventually(async () => {
        const [run] = await runsOf(client, job.job_id);
        return run?.status === 'succeeded' ? run : undefined;
      }, 'the second attempt to succeed');
      assert.equal(succeeded.attempt, 2);
      assert.equal(succeeded.run_id, failed.run_id, 'a retry is the same run');
    } finally {
      worker.kill('SIGTERM');
      out.remove();
    }
  });
});

test('a worker killed mid-run: the run is re-offered after its lease and completes once', async () => {
  await withServer(async (server, client) => {
    const job = await client.createJob({ schedule: { at: at(1_000) }, pool: 'crash', lease_s: 10 });
    const doomed = spawn(process.execPath, ['--import', 'tsx', cliPath, 'worker', '--pool', 'crash', '--exec', 'sleep 60',
      '--url', server.url], { cwd: repoRoot, stdio: 'ignore', env: { ...process.env, TICKLER_LOG_LEVEL: 'warn' } });
    const doomedExit = new Promise((resolve) => doomed.on('exit', resolve));
    await client.advanceClock(1);
    await eventually(async () => {
      const [run] = await runsOf(client, job.job_id);
      return run?.status === 'running' ? run : undefined;
    }, 'the doomed worker to lease the run');
    doomed.kill('SIGKILL');
    await doomedExit;
    await client.advanceClock(11);
    const [reoffered] = await runsOf(client, job.job_id);
    assert.equal(reoffered?.status, 'ready', 'the expired lease re-offers the run');
    let handled = 0;
    const worker = createWorker({ client, pool: 'crash', concurrency: 1, waitS: 5, handler: async () => { handled++; } });
    worker.start();
    try {
      const done = await eventually(async () => {
        const [run] = await runsOf(client, job.job_id);
        return run?.status === 'succeeded' ? run : undefined;
      }, 'the re-offered run to succeed');
      assert.equal(done.attempt, 2);
      assert.equal(handled, 1);
      const events = (await client.getRun(done.run_id)).events ?? [];
      assert.equal(events.filter((event) => event.type === 'succeeded').length, 1);
      assert.equal(events.filter((event) => event.type === 'lease_expired').length, 1);
    } finally {
      await worker.stop();
    }
  });
});

test('a stale completion answers 409 stale_token and changes nothing', async () => {
  await withServer(async (_server, client) => {
    const job = await client.createJob({ schedule: { at: at(1_000) }, pool: 'stale' });
    await client.advanceClock(1);
    const [first] = (await client.leaseRuns({ pool: 'stale', max: 1, lease_s: 5, wait_s: 0 })).runs;
    assert.ok(first !== undefined);
    await client.advanceClock(6);
    const [second] = (await client.leaseRuns({ pool: 'stale', max: 1, lease_s: 5, wait_s: 0 })).runs;
    assert.equal(second?.attempt, 2);
    const before = await client.getRun(first.run_id);
    await assert.rejects(client.completeRun(first.run_id, { fencing_token: first.fencing_token, status: 'succeeded' }),
      (error: unknown) => isTicklerApiError(error) && error.status === 409 && error.code === 'stale_token');
    await assert.rejects(client.heartbeat(first.run_id, first.fencing_token),
      (error: unknown) => isTicklerApiError(error) && error.code === 'stale_token');
    const after = await client.getRun(first.run_id);
    assert.equal(after.status, 'running');
    assert.equal(after.attempt, 2);
    assert.equal((after.events ?? []).length, (before.events ?? []).length, 'no event for a rejected write');
    await client.completeRun(second!.run_id, { fencing_token: second!.fencing_token, status: 'succeeded' });
    assert.equal((await client.getRun(first.run_id)).status, 'succeeded');
    assert.equal((await client.getJob(job.job_id)).state, 'done');
  });
});

test('retries back off, exhausted attempts go to the DLQ, and replay keeps the run_id', async () => {
  await withServer(async (_server, client) => {
    await client.createJob({ schedule: { at: at(1_000) }, pool: 'dlq', retry: { max_attempts: 2, base_s: 10, max_s: 60 } });
    await client.advanceClock(1);
    const lease = async () => (await client.leaseRuns({ pool: 'dlq', max: 1, wait_s: 0 })).runs[0];
    const first = await lease();
    await client.completeRun(first!.run_id, { fencing_token: first!.fencing_token, status: 'failed', error: 'boom 1' });
    const waiting = await client.getRun(first!.run_id);
    assert.equal(waiting.status, 'retry_wait');
    const retryDelayMs = Date.parse(waiting.ready_at!) - startMs - 1_000;
    assert.ok(retryDelayMs >= 8_000 && retryDelayMs <= 12_000, `10 s ± 20 %, got ${retryDelayMs} ms`);
    assert.equal(await lease(), undefined, 'not leasable before its retry time');
    await client.advanceClock(13);
    const second = await lease();
    assert.equal(second?.attempt, 2);
    await client.completeRun(second!.run_id, { fencing_token: second!.fencing_token, status: 'failed', error: 'boom 2' });
    const dead = await client.getRun(first!.run_id);
    assert.equal(dead.status, 'dead');
    const dlq = await client.listDlq({ pool: 'dlq' });
    assert.deepEqual(dlq.items.map((run) => run.run_id), [first!.run_id]);
    const replayed = await client.replayRun(first!.run_id);
    assert.equal(replayed.status, 'ready');
    const third = await lease();
    assert.equal(third?.run_id, first!.run_id);
    assert.equal(third?.attempt, 3, 'the attempt number keeps counting');
    await client.completeRun(third!.run_id, { fencing_token: third!.fencing_token, status: 'failed_permanent', error: 'bad input' });
    assert.equal((await client.getRun(first!.run_id)).status, 'dead', 'failed_permanent goes straight to the DLQ');
  });
});

test('cancels racing the fire: a cancelled job never dispatches after its cancel was acknowledged', async () => {
  await withServer(async (_server, client) => {
    const jobs = await Promise.all(Array.from({ length: 40 }, (_, index) =>
      client.createJob({ schedule: { at: at(1_000 + index * 50) }, pool: 'race' })));
    const cancelAcks = new Map<string, number>();
    await Promise.all([
      client.advanceClock(3),
      ...jobs.filter((_, index) => index % 2 === 0).map(async (job) => {
        const cancelled = await client.cancelJob(job.job_id);
        cancelAcks.set(job.job_id, Date.parse(cancelled.updated_at));
      }),
    ]);
    for (const job of jobs) {
      const runs = await runsOf(client, job.job_id);
      const cancelAtMs = cancelAcks.get(job.job_id);
      if (cancelAtMs === undefined) {
        assert.equal(runs.length, 1, 'an uncancelled job fires');
      } else {
        for (const run of runs) assert.ok(Date.parse(run.dispatched_at!) <= cancelAtMs, 'no dispatch after the cancel');
        assert.equal((await client.getJob(job.job_id)).state, 'cancelled');
      }
    }
    await client.advanceClock(3_600);
    for (const [jobId] of cancelAcks) assert.ok((await runsOf(client, jobId)).length <= 1);
  });
});

test('a second server on the same data directory refuses to start; the first keeps firing', async () => {
  const data = tempDataDir();
  const first = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', startAt] });
  try {
    await assert.rejects(startServerProcess({ dataDir: data.dir }), /in use by process/);
    const client = new TicklerClient({ baseUrl: first.url });
    const job = await client.createJob({ schedule: { at: at(1_000) }, pool: 'p' });
    await client.advanceClock(1);
    assert.equal((await runsOf(client, job.job_id)).length, 1);
  } finally {
    await first.stop();
    data.remove();
  }
});

test('timers due while the server was down fire late, not never; SIGTERM hands the shards over at once', async () => {
  const data = tempDataDir();
  try {
    const first = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', startAt] });
    const firstClient = new TicklerClient({ baseUrl: first.url });
    const job = await firstClient.createJob({ schedule: { at: at(3_600_000) }, pool: 'late' });
    assert.equal(await first.stop(), 0, 'SIGTERM exits 0');
    const restartAt = at(3 * 3_600_000);
    const second = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', restartAt] });
    try {
      const client = new TicklerClient({ baseUrl: second.url });
      const ready = await client.readyz();
      assert.equal(ready['shards_owned'], 1024, 'the released leases are taken at once');
      await client.advanceClock(0);
      const [run] = await runsOf(client, job.job_id);
      assert.equal(run?.status, 'ready');
      assert.equal(run?.scheduled_at, at(3_600_000));
      assert.equal(run?.dispatched_at, restartAt);
    } finally {
      await second.stop();
    }
  } finally {
    data.remove();
  }
});

test('acknowledged creates, cancels and completions survive kill -9 (invariant 5)', async () => {
  const data = tempDataDir();
  try {
    const first = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', startAt] });
    const client = new TicklerClient({ baseUrl: first.url });
    const kept = await client.createJob({ schedule: { cron: '0 * * * *', tz: 'UTC' }, pool: 'durable', key: 'kept', tolerance_s: 0 });
    const cancelled = await client.createJob({ schedule: { at: at(7_200_000) }, pool: 'durable' });
    await client.cancelJob(cancelled.job_id);
    const oneShot = await client.createJob({ schedule: { at: at(1_000) }, pool: 'durable' });
    await client.advanceClock(1);
    const [leased] = (await client.leaseRuns({ pool: 'durable', max: 1, wait_s: 0 })).runs;
    await client.completeRun(leased!.run_id, { fencing_token: leased!.fencing_token, status: 'succeeded', result: { n: 7 } });
    await first.kill();
    // A crashed process leaves its lock and leases behind; the restart takes over at once.
    const second = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', at(2_000)] });
    try {
      const after = new TicklerClient({ baseUrl: second.url });
      assert.equal((await after.getJob(kept.job_id)).state, 'active');
      assert.equal((await after.getJob(cancelled.job_id)).state, 'cancelled');
      const run = await after.getRun(leased!.run_id);
      assert.equal(run.status, 'succeeded');
      assert.deepEqual(run.result, { n: 7 });
      assert.equal((await after.getJob(oneShot.job_id)).state, 'done');
      assert.equal((await after.readyz())['shards_owned'], 1024);
      await after.advanceClock(3_600);
      assert.equal((await runsOf(after, kept.job_id)).length, 1, 'the recurring job fires after the crash');
      assert.equal((await runsOf(after, cancelled.job_id)).length, 0);
    } finally {
      await second.stop();
    }
  } finally {
    data.remove();
  }
});

test('a herd of one-shot jobs: runs leasable at the instant, jobs done 10 s later, a PATCH after the instant refused', async () => {
  await withServer(async (_server, client) => {
    // 16 one-shot timers in one 10 ms tick: a herd, written ahead and finished 10 s after its instant.
    const { results } = await client.batchCreateJobs(Array.from({ length: 16 }, () => ({ schedule: { at: at(60_000) }, pool: 'herd' })));
    const jobIds = results.map((result) => (result as { job: { job_id: string } }).job.job_id);
    await client.advanceClock(60);
    const { runs } = await client.leaseRuns({ pool: 'herd', max: 16, wait_s: 0 });
    assert.equal(runs.length, 16, 'every run leasable at the instant');
    const [first] = jobIds;
    const fired = await client.getJob(first!);
    assert.deepEqual([fired.state, fired.next_fire_at], ['active', at(60_000)], 'not finished yet');
    await assert.rejects(client.patchJob(first!, { schedule: { at: at(120_000) } }),
      (error: unknown) => isTicklerApiError(error) && error.status === 409 && error.code === 'invalid_state',
      'its occurrence has fired: done, whatever the record says yet');
    await client.advanceClock(10);
    const done = await client.getJob(first!);
    assert.deepEqual([done.state, done.next_fire_at], ['done', null]);
    await client.advanceClock(120);
    assert.equal((await runsOf(client, first!)).length, 1, 'one occurrence, no second from the refused PATCH');
  });
});

test('after kill -9, leases the dead server granted last a third of lease_s plus 5 s unless heartbeated', async () => {
  const data = tempDataDir();
  try {
    const first = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', startAt] });
    const client = new TicklerClient({ baseUrl: first.url });
    const lost = await client.createJob({ schedule: { at: at(1_000) }, pool: 'orphans', lease_s: 60 });
    const kept = await client.createJob({ schedule: { at: at(1_000) }, pool: 'orphans', lease_s: 60 });
    await client.advanceClock(1);
    const { runs } = await client.leaseRuns({ pool: 'orphans', max: 2, wait_s: 0 });
    assert.equal(runs.length, 2);
    const keptRun = runs.find((run) => run.job_id === kept.job_id)!;
    await first.kill();
    // Restarted a second later: 60 s leases granted at 1 s are cut to 2 + 20 + 5 = 27 s.
    const second = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', at(2_000)] });
    try {
      const after = new TicklerClient({ baseUrl: second.url });
      // The worker that got its answer heartbeats within a third of the lease, and keeps its run.
      const beat = await after.heartbeat(keptRun.run_id, keptRun.fencing_token);
      assert.equal(beat.lease_expires_at, at(62_000));
      await after.advanceClock(24);
      assert.equal((await runsOf(after, lost.job_id))[0]?.status, 'running', 'not before 27 s');
      await after.advanceClock(2);
      assert.equal((await runsOf(after, lost.job_id))[0]?.status, 'ready', 'the lease whose answer died with the server is offered again');
      assert.equal((await runsOf(after, kept.job_id))[0]?.status, 'running', 'the heartbeated lease is untouched');
      const events = (await after.getRun((await runsOf(after, lost.job_id))[0]!.run_id)).events ?? [];
      assert.equal(events.filter((event) => event.type === 'lease_expired').length, 1);
    } finally {
      await second.stop();
    }
  } finally {
    data.remove();
  }
});

test('the dead man\'s switch flags a job that keeps failing and clears once it succeeds', async () => {
  await withServer(async (server, client) => {
    const job = await client.createJob({
      schedule: { cron: '* * * * *', tz: 'UTC' }, pool: 'dms', max_silence_s: 120, tolerance_s: 0,
      retry: { max_attempts: 1, base_s: 10, max_s: 60 },
    });
    const finishNext = async (status: 'failed' | 'succeeded'): Promise<void> => {
      const [run] = (await client.leaseRuns({ pool: 'dms', max: 1, wait_s: 0 })).runs;
      assert.ok(run !== undefined, 'a run is ready');
      await client.completeRun(run.run_id, { fencing_token: run.fencing_token, status, ...(status === 'failed' ? { error: 'boom' } : {}) });
    };
    const silentGauge = async (): Promise<string | undefined> => {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      return text.split('\n').find((line) => line.startsWith('tickler_jobs_silent{'));
    };
    await client.advanceClock(60);
    await finishNext('failed');
    await client.advanceClock(60);
    await finishNext('failed');
    assert.deepEqual((await client.listSilentJobs()).items.map((item) => item.job.job_id), [job.job_id],
      'two minutes without a success, from its creation');
    await client.advanceClock(60);
    assert.equal(await silentGauge(), 'tickler_jobs_silent{team="default"} 1', 'the reconciler\'s pass counted it');
    const [silent] = (await client.listSilentJobs()).items;
    assert.deepEqual([silent?.last_success_at, silent?.silent_since], [null, at(120_000)]);

    await finishNext('succeeded');
    assert.deepEqual((await client.listSilentJobs()).items, [], 'a success clears it at once');
    await client.advanceClock(60);
    assert.equal(await silentGauge(), undefined, 'and the next pass drops it from the gauge');
    await finishNext('failed');
    await client.advanceClock(60);
    await finishNext('failed');
    const [again] = (await client.listSilentJobs({ limit: 1 })).items;
    assert.equal(again?.job.job_id, job.job_id, 'silent again two minutes after its last success');
    assert.equal(again.silent_since, new Date(Date.parse(again.last_success_at!) + 120_000).toISOString());
  });
});
