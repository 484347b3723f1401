// Issue 3 end to end on a real `tickler serve --virtual-clock`: a DST weekend in New York and
// one in Lord Howe (a 30-minute shift), each overlap policy against a run that outlives the
// next occurrence, and each catch-up policy after the server was down for hours.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TicklerClient } from '../../src/index.js';
import type { Run } from '../../src/worker/wire.js';
import { isTicklerApiError } from '../../src/worker/errors.js';
import { startServerProcess, tempDataDir, type ServerProcess } from './server-process.js';

async function withServer(startAt: string, fn: (client: TicklerClient, server: ServerProcess) => Promise<void>): Promise<void> {
  const data = tempDataDir();
  const server = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', startAt] });
  try {
    await fn(new TicklerClient({ baseUrl: server.url }), server);
  } finally {
    await server.stop();
    data.remove();
  }
}

async function ledger(client: TicklerClient, jobId: string): Promise<Run[]> {
  const items = (await client.listJobRuns(jobId, { limit: 1000 })).items;
  return items.sort((a, b) => Date.parse(a.scheduled_at) - Date.parse(b.scheduled_at));
}

/** Advances a day at a time: each answer comes back well inside the client's timeout. */
async function advanceDays(client: TicklerClient, days: number): Promise<void> {
  for (let day = 0; day < days; day++) await client.advanceClock(86_400);
}

function summary(runs: Run[]): string[] {
  return runs.map((run) => `${run.scheduled_at} ${run.status}`);
}

test('New York spring-forward weekend: shift, skip, and interval-like schedules', async () => {
  await withServer('2026-03-07T00:00:00.000Z', async (client) => {
    // No worker runs here, so earlier runs stay ready: overlap 'allow' keeps the ledger about DST only.
    const shift = await client.createJob({ schedule: { cron: '30 2 * * *', tz: 'America/New_York' }, pool: 'dst', tolerance_s: 0,
      overlap: 'allow' });
    const skip = await client.createJob({ schedule: { cron: '30 2 * * *', tz: 'America/New_York' }, pool: 'dst', tolerance_s: 0,
      overlap: 'allow', dst: { gap: 'skip', repeat: 'first' } });
    const interval = await client.createJob({ schedule: { cron: '*/30 * * * *', tz: 'America/New_York' }, pool: 'dst',
      tolerance_s: 0, overlap: 'allow' });
    await advanceDays(client, 3);
    assert.deepEqual(summary(await ledger(client, shift.job_id)), [
      '2026-03-07T07:30:00.000Z ready', // 02:30 EST
      '2026-03-08T07:30:00.000Z ready', // 02:30 does not exist: read with EST, i.e. 03:30 EDT
      '2026-03-09T06:30:00.000Z ready', // 02:30 EDT
    ]);
    const skipped = await ledger(client, skip.job_id);
    assert.deepEqual(skipped.map((run) => run.status), ['ready', 'skipped_dst', 'ready']);
    assert.match(skipped[1]!.last_error ?? '', /dst|daylight|exist/i);
    const around = (await ledger(client, interval.job_id))
      .map((run) => run.scheduled_at)
      .filter((instant) => instant >= '2026-03-08T06:00:00.000Z' && instant <= '2026-03-08T07:30:00.000Z');
    // 01:00, 01:30 EST, then 03:00, 03:30 EDT: nothing matches inside the gap, real gaps stay 30 min.
    assert.deepEqual(around, ['2026-03-08T06:00:00.000Z', '2026-03-08T06:30:00.000Z', '2026-03-08T07:00:00.000Z',
      '2026-03-08T07:30:00.000Z']);
    const preview = await client.previewSchedule({ cron: '30 2 * * *', tz: 'America/New_York', from: '2026-03-07T12:00:00.000Z', count: 2 });
    assert.deepEqual(preview.items.map((item) => [item.scheduled_at, item.local]), [
      ['2026-03-08T07:30:00.000Z', '2026-03-08T03:30:00.000-04:00'],
      ['2026-03-09T06:30:00.000Z', '2026-03-09T02:30:00.000-04:00'],
    ]);
  });
});

test('New York fall-back: a repeated wall time fires first, last or both as the job says', async () => {
  await withServer('2026-10-31T12:00:00.000Z', async (client) => {
    const jobs = await Promise.all((['first', 'last', 'both'] as const).map((repeat) =>
      client.createJob({ schedule: { cron: '30 1 * * *', tz: 'America/New_York' }, pool: 'dst', tolerance_s: 0,
        overlap: 'allow', dst: { gap: 'shift', repeat } })));
    await client.advanceClock(86_400);
    const on = async (index: number) => (await ledger(client, jobs[index]!.job_id))
      .map((run) => run.scheduled_at).filter((instant) => instant.startsWith('2026-11-01'));
    assert.deepEqual(await on(0), ['2026-11-01T05:30:00.000Z']);
    assert.deepEqual(await on(1), ['2026-11-01T06:30:00.000Z']);
    assert.deepEqual(await on(2), ['2026-11-01T05:30:00.000Z', '2026-11-01T06:30:00.000Z']);
  });
});

test('Lord Howe, whose clocks move 30 minutes: the gap shifts by 30 minutes', async () => {
  // Standard time is +10:30, daylight time +11:00; on 2026-10-04 02:00 becomes 02:30.
  await withServer('2026-10-02T00:00:00.000Z', async (client) => {
    const job = await client.createJob({ schedule: { cron: '15 2 * * *', tz: 'Australia/Lord_Howe' }, pool: 'dst', tolerance_s: 0,
      overlap: 'allow' });
    await advanceDays(client, 3);
    assert.deepEqual(summary(await ledger(client, job.job_id)), [
      '2026-10-02T15:45:00.000Z ready', // 02:15 +10:30 on the 3rd
      '2026-10-03T15:45:00.000Z ready', // 02:15 does not exist on the 4th: read with +10:30, i.e. 02:45 +11:00
      '2026-10-04T15:15:00.000Z ready', // 02:15 +11:00 on the 5th
    ]);
  });
});

/** A job every 10 s whose first run is leased and held for a long time. */
async function overlapScenario(client: TicklerClient, overlap: 'allow' | 'forbid' | 'replace' | 'buffer_one') {
  const job = await client.createJob({ schedule: { cron: '*/10 * * * * *', tz: 'UTC' }, pool: `overlap-${overlap}`,
    tolerance_s: 0, overlap });
  await client.advanceClock(10);
  const [long] = (await client.leaseRuns({ pool: `overlap-${overlap}`, max: 1, lease_s: 600, wait_s: 0 })).runs;
  assert.ok(long !== undefined);
  await client.advanceClock(20);
  return { job, long, runs: await ledger(client, job.job_id) };
}

test('overlap allow and forbid while a run outlives the next occurrences', async () => {
  await withServer('2026-11-29T00:00:00.000Z', async (client) => {
    const allow = await overlapScenario(client, 'allow');
    assert.deepEqual(allow.runs.map((run) => run.status), ['running', 'ready', 'ready']);
    const forbid = await overlapScenario(client, 'forbid');
    assert.deepEqual(forbid.runs.map((run) => run.status), ['running', 'skipped_overlap', 'skipped_overlap']);
  });
});

test('overlap replace cancels the earlier run: its token stops working', async () => {
  await withServer('2026-11-29T00:00:00.000Z', async (client) => {
    const { long, runs } = await overlapScenario(client, 'replace');
    assert.deepEqual(runs.map((run) => run.status), ['cancelled', 'cancelled', 'ready']);
    await assert.rejects(client.heartbeat(long.run_id, long.fencing_token),
      (error: unknown) => isTicklerApiError(error) && error.status === 409 && error.code === 'cancelled');
    await assert.rejects(client.completeRun(long.run_id, { fencing_token: long.fencing_token, status: 'succeeded' }),
      (error: unknown) => isTicklerApiError(error) && error.status === 409 && error.code === 'cancelled');
  });
});

test('overlap buffer_one holds one occurrence until the earlier run ends, skips the rest', async () => {
  await withServer('2026-11-29T00:00:00.000Z', async (client) => {
    const { long, runs } = await overlapScenario(client, 'buffer_one');
    assert.deepEqual(runs.map((run) => run.status), ['running', 'ready', 'skipped_overlap']);
    const pool = 'overlap-buffer_one';
    assert.deepEqual((await client.leaseRuns({ pool, max: 5, wait_s: 0 })).runs, [], 'the held run is not leasable yet');
    await client.completeRun(long.run_id, { fencing_token: long.fencing_token, status: 'succeeded' });
    const released = (await client.leaseRuns({ pool, max: 5, wait_s: 0 })).runs;
    assert.deepEqual(released.map((run) => run.run_id), [runs[1]!.run_id]);
  });
});

/**
 * A job at the top of every hour, created at 00:00; the server is down until 05:30. `inspect`
 * runs against the restarted server once ten seconds have passed; answers the job's ledger.
 */
async function catchUpScenario(catchUp: 'latest' | 'all' | 'none', overlap: 'allow' | 'forbid' = 'allow',
  inspect?: (client: TicklerClient) => Promise<void>): Promise<Run[]> {
  const data = tempDataDir();
  try {
    const first = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', '2026-11-29T00:00:00.000Z'] });
    const job = await new TicklerClient({ baseUrl: first.url }).createJob({
      schedule: { cron: '0 * * * *', tz: 'UTC' }, pool: 'catch-up', tolerance_s: 0, catch_up: catchUp, overlap });
    await first.stop();
    const second = await startServerProcess({ dataDir: data.dir, args: ['--virtual-clock', '--start-at', '2026-11-29T05:30:00.000Z'] });
    try {
      const client = new TicklerClient({ baseUrl: second.url });
      await client.advanceClock(10); // a backlog under `all` is paced; ten seconds drain five
      await inspect?.(client);
      return await ledger(client, job.job_id);
    } finally {
      await second.stop();
    }
  } finally {
    data.remove();
  }
}

test('catch-up latest fires the newest missed occurrence and records the others as skipped_outage', async () => {
  const runs = await catchUpScenario('latest');
  assert.deepEqual(summary(runs), [
    '2026-11-29T01:00:00.000Z skipped_outage',
    '2026-11-29T02:00:00.000Z skipped_outage',
    '2026-11-29T03:00:00.000Z skipped_outage',
    '2026-11-29T04:00:00.000Z skipped_outage',
    '2026-11-29T05:00:00.000Z ready',
  ]);
});

test('catch-up all fires every missed occurrence, in order', async () => {
  const runs = await catchUpScenario('all');
  assert.deepEqual(runs.map((run) => run.status), ['ready', 'ready', 'ready', 'ready', 'ready']);
  const dispatched = runs.map((run) => Date.parse(run.dispatched_at!));
  assert.deepEqual(dispatched, [...dispatched].sort((a, b) => a - b), 'dispatched in scheduled order');
});

test('catch-up all under overlap forbid queues each missed occurrence behind the one before it: none is skipped', async () => {
  const leasedInOrder: string[] = [];
  const runs = await catchUpScenario('all', 'forbid', async (client) => {
    for (let index = 0; index < 5; index++) {
      const leased = (await client.leaseRuns({ pool: 'catch-up', max: 5, wait_s: 0 })).runs;
      assert.equal(leased.length, 1, 'one at a time: the next waits for the one before it');
      leasedInOrder.push(leased[0]!.scheduled_at);
      await client.completeRun(leased[0]!.run_id, { fencing_token: leased[0]!.fencing_token, status: 'succeeded' });
    }
  });
  assert.deepEqual(summary(runs), ['01', '02', '03', '04', '05'].map((hour) => `2026-11-29T${hour}:00:00.000Z succeeded`));
  assert.deepEqual(leasedInOrder, runs.map((run) => run.scheduled_at), 'in scheduled order');
});

test('catch-up none records every missed occurrence as skipped_outage and waits for the next', async () => {
  const runs = await catchUpScenario('none');
  assert.deepEqual(runs.map((run) => run.status), Array(5).fill('skipped_outage'));
});
