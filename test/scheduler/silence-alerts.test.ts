// Silence alerts end to end: the reconciler over a real SQLite file on the virtual clock posts
// to a real HTTP receiver on 127.0.0.1, which checks each alert's HMAC. A silence is announced
// once (across passes and across a restart of the reconciler), its end once; a receiver that
// fails is tried again with backoff; `tickler_job_last_success_age_seconds` covers the watched
// jobs.
import assert from 'node:assert/strict';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import { runIdOf } from '../../src/domain/identity.js';
import { AlertWebhook, type SilenceAlert } from '../../src/obs/alert-webhook.js';
import { silentLogger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { Reconciler } from '../../src/scheduler/reconciler.js';
import { ScheduleCache } from '../../src/scheduler/schedule-cache.js';
import { openSqliteStore } from '../../src/store/sqlite/index.js';
import type { Store } from '../../src/store/store.js';
import { createJob, firePending, leaseOne, t0Ms } from '../store/conformance-fixtures.js';

const secret = 'a shared secret';
const hourMs = 3_600_000;

/** A receiver that verifies signatures as a real one would, answering `statuses` in turn (then 204). */
async function startReceiver(statuses: number[] = []): Promise<{
  url: string; accepted: SilenceAlert[]; attempts: () => number; badSignatures: () => number; server: Server;
  nextAccepted: (count: number) => Promise<void>;
}> {
  const accepted: SilenceAlert[] = [];
  let attempts = 0;
  let badSignatures = 0;
  const waiters: { count: number; resolve: () => void }[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      attempts += 1;
      const body = Buffer.concat(chunks).toString('utf8');
      const match = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(request.headers['x-tickler-signature']));
      const expected = match === null ? null
        : createHmac('sha256', secret).update(`${match[1]}.${body}`).digest();
      if (match === null || expected === null || !timingSafeEqual(expected, Buffer.from(match[2]!, 'hex'))
        || Math.abs(Date.now() / 1_000 - Number(match[1])) > 300) {
        badSignatures += 1;
        response.writeHead(401).end();
        return;
      }
      const status = statuses.shift() ?? 204;
      if (status < 300) {
        const alert = JSON.parse(body) as SilenceAlert;
        assert.equal(request.headers['x-tickler-alert-id'], alert.id);
        accepted.push(alert);
        for (const waiter of [...waiters]) {
          if (accepted.length >= waiter.count) {
            waiters.splice(waiters.indexOf(waiter), 1);
            waiter.resolve();
          }
        }
      }
      response.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks/tickler`, accepted, server,
    attempts: () => attempts, badSignatures: () => badSignatures,
    nextAccepted: (count) => (accepted.length >= count ? Promise.resolve()
      : new Promise((resolve) => waiters.push({ count, resolve }))),
  };
}

async function settled(webhook: AlertWebhook): Promise<void> {
  // The sends run on real sockets: wait for the webhook to have none in flight.
  for (let turn = 0; turn < 2_000 && webhook.pendingCount() > 0; turn++) await new Promise((resolve) => setTimeout(resolve, 5));
  assert.equal(webhook.pendingCount(), 0, 'every alert delivered');
}

function reconcilerOf(store: Store, clock: VirtualClock, metrics: Metrics, alerts: AlertWebhook): Reconciler {
  return new Reconciler({ store, clock, metrics, logger: silentLogger(), schedules: new ScheduleCache(), intervalMs: 60_000,
    isLeader: () => true, alerts });
}

it('announces a silence once, across passes and a restart, and its end once, signed', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-alerts-'));
  const path = join(directory, 'tickler.db');
  let store = await openSqliteStore({ path });
  const receiver = await startReceiver();
  try {
    const clock = new VirtualClock(t0Ms);
    const metrics = new Metrics();
    const job = await createJob(store, { spec: { max_silence_s: 3_600, owner: 'team-billing', pager: 'pd:billing-oncall',
      retry: { max_attempts: 1, base_s: 1, max_s: 1 } } });
    await createJob(store, { spec: { max_silence_s: null } });
    let webhook = new AlertWebhook({ url: receiver.url, secret, clock, logger: silentLogger(), metrics });
    let reconciler = reconcilerOf(store, clock, metrics, webhook);

    await reconciler.watchSilenceOnce();
    await settled(webhook);
    assert.equal(receiver.accepted.length, 0, 'not silent yet');
    const ages = (await metrics.jobLastSuccessAgeSeconds.get()).values;
    assert.deepEqual(ages.map((value) => [value.labels.job, value.value]), [[job.jobId, 0]], 'only the watched job');

    await clock.advance(hourMs);
    await reconciler.watchSilenceOnce();
    await reconciler.watchSilenceOnce();
    await settled(webhook);
    assert.equal(receiver.accepted.length, 1, 'once, however many passes');
    const [silent] = receiver.accepted;
    assert.equal(silent?.kind, 'job_silent');
    assert.equal(silent?.job.job_id, job.jobId);
    assert.deepEqual([silent?.job.owner, silent?.job.pager], ['team-billing', 'pd:billing-oncall']);
    assert.equal(silent?.silent_since, new Date(t0Ms + hourMs).toISOString());
    assert.equal(silent?.last_success_at, null);

    // A restart: a new store handle, webhook and reconciler, with nothing in memory.
    webhook.close();
    await store.close();
    store = await openSqliteStore({ path });
    webhook = new AlertWebhook({ url: receiver.url, secret, clock, logger: silentLogger(), metrics });
    reconciler = reconcilerOf(store, clock, metrics, webhook);
    await reconciler.watchSilenceOnce();
    await settled(webhook);
    assert.equal(receiver.accepted.length, 1, 'the announcement survived the restart: not sent again');

    // The job succeeds: its silence ends, announced once.
    const { runId } = await firePending(store, job, clock.nowMs());
    const leased = (await leaseOne(store, clock.nowMs()))!;
    assert.equal(leased.runId, runId);
    await store.completeRun({ team: null, runId: runIdOf(job.jobId, leased.scheduledAtMs), fencingToken: leased.fencingToken,
      status: 'succeeded', error: null, result: null, nowMs: clock.nowMs() });
    await reconciler.watchSilenceOnce();
    await reconciler.watchSilenceOnce();
    await settled(webhook);
    assert.deepEqual(receiver.accepted.map((alert) => alert.kind), ['job_silent', 'job_recovered']);
    assert.equal(receiver.accepted[1]?.id, `job_recovered:${job.jobId}:${silent?.silent_since}`);
    assert.equal(receiver.badSignatures(), 0);
    assert.deepEqual(await store.listSilenceAnnounced(10), []);
    webhook.close();
  } finally {
    receiver.server.close();
    await store.close();
    await rm(directory, { recursive: true, force: true });
  }
});

it('retries a failed send with backoff until the receiver takes it, and only then records it', async () => {
  const directory = await mkdtemp(join(tmpdir(), 'tickler-alerts-'));
  const store = await openSqliteStore({ path: join(directory, 'tickler.db') });
  const receiver = await startReceiver([500, 503]);
  try {
    const clock = new VirtualClock(t0Ms);
    const metrics = new Metrics();
    const job = await createJob(store, { spec: { max_silence_s: 60 } });
    const webhook = new AlertWebhook({ url: receiver.url, secret, clock, logger: silentLogger(), metrics });
    const reconciler = reconcilerOf(store, clock, metrics, webhook);
    await clock.advance(60_000);
    await reconciler.watchSilenceOnce();
    for (let turn = 0; turn < 2_000 && receiver.attempts() < 1; turn++) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.deepEqual(await store.listSilenceAnnounced(10), [], 'not recorded while the receiver refuses');
    await reconciler.watchSilenceOnce();
    assert.equal(webhook.pendingCount(), 1, 'a pass does not send a second copy while one is pending');
    // Backoff on the clock: 1 s, then 2 s.
    for (let turn = 0; turn < 2_000 && receiver.attempts() < 2; turn++) {
      await clock.advance(1_000);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    for (let turn = 0; turn < 2_000 && receiver.attempts() < 3; turn++) {
      await clock.advance(1_000);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await receiver.nextAccepted(1);
    await settled(webhook);
    assert.equal(receiver.attempts(), 3);
    assert.deepEqual((await store.listSilenceAnnounced(10)).map((entry) => entry.job.jobId), [job.jobId]);
    const sent = Object.fromEntries((await metrics.alertsSentTotal.get()).values.map((value) => [String(value.labels.outcome), value.value]));
    assert.deepEqual(sent, { failed: 2, delivered: 1 });
    webhook.close();
  } finally {
    receiver.server.close();
    await store.close();
    await rm(directory, { recursive: true, force: true });
  }
});
