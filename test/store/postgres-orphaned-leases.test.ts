// Leases a dead cluster node granted, on PostgreSQL (schema v8's active_runs.lease_node): the
// store cuts those no worker has heartbeated to a third of the lease plus a margin
// (PostgresStore.shortenLeasesOfGoneNodes), and the membership wrapper
// (src/scheduler/orphaned-leases.ts) calls it when a member is gone, or at a node's first
// heartbeat for leases granted under its own id by a predecessor. Real PostgreSQL, the
// caller's clock (useDatabaseClock false) for the leases and the membership alike.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import { silentLogger } from '../../src/obs/log.js';
import { cuttingLeasesOfGoneNodes } from '../../src/scheduler/orphaned-leases.js';
import { openPostgresMembership } from '../../src/store/postgres/membership.js';
import { openPostgresStore, type PostgresStore } from '../../src/store/postgres/index.js';
import { createJob, dispatchItem, firePending, leaseOne, minuteMs, ownShard, pendingTimerOf, t0Ms, timerAt } from './conformance-fixtures.js';
import { openTestStore, postgresSkipReason, testPgUrl } from './postgres-harness.js';

const skip = await postgresSkipReason();
const dueMs = t0Ms + minuteMs;
const marginMs = 5_000;

void describe('leases of gone nodes on PostgreSQL', { skip: skip ?? false }, () => {
  void it('cuts the leases gone nodes granted and no worker heartbeated, from now or the ready time', async () => {
    const handle = await openTestStore({ leaseNodeId: 'node-a' });
    const others: PostgresStore[] = [];
    const storeOf = async (leaseNodeId: string | null): Promise<PostgresStore> => {
      const store = await openPostgresStore({ url: testPgUrl, schema: handle.schema, useDatabaseClock: false, poolSize: 2, leaseNodeId });
      others.push(store);
      return store;
    };
    try {
      const nodeB = await storeOf('node-b');
      const apiOnly = await storeOf(null);
      const leaseAt = async (store: PostgresStore, pool: string, leaseMs: number) => {
        const job = await createJob(handle.store, { spec: { pool } });
        await firePending(handle.store, job, dueMs, { recurring: false });
        return (await leaseOne(store, dueMs, { pool, leaseMs }))!;
      };
      const lost = await leaseAt(handle.store, 'lost', 60_000);
      const beating = await leaseAt(handle.store, 'beating', 60_000);
      const short = await leaseAt(handle.store, 'short', 6_000);
      const alive = await leaseAt(nodeB, 'alive', 60_000);
      const unrecorded = await leaseAt(apiOnly, 'unrecorded', 60_000);
      // Written ahead and leased 50 ms before its ready time: its lease counts from that time.
      const aheadJob = await createJob(handle.store, { spec: { pool: 'ahead' }, timer: timerAt(dueMs + 1_000) });
      const shard = await ownShard(handle.store, aheadJob.shard, dueMs);
      await handle.store.writeRunsAhead([dispatchItem(shard, (await pendingTimerOf(handle.store, aheadJob))!)], dueMs);
      const ahead = (await leaseOne(handle.store, dueMs + 950, { pool: 'ahead', leaseMs: 30_000, aheadMs: 50 }))!;
      assert.equal(ahead.leaseExpiresAtMs, dueMs + 1_000 + 30_000);
      const beat = await nodeB.heartbeatRun(null, beating.runId, beating.fencingToken, dueMs + 500);
      assert.deepEqual(beat, { kind: 'extended', leaseExpiresAtMs: dueMs + 500 + 60_000 });

      const cutAtMs = dueMs + 960;
      assert.equal(await nodeB.shortenLeasesOfGoneNodes(['node-b'], cutAtMs, marginMs), 2);
      const expiryOf = async (runId: string) => (await handle.store.getRun(null, runId))?.leaseExpiresAtMs;
      assert.equal(await expiryOf(lost.runId), cutAtMs + 20_000 + marginMs);
      assert.equal(await expiryOf(ahead.runId), dueMs + 1_000 + 10_000 + marginMs, 'from its ready time, not now');
      assert.equal(await expiryOf(beating.runId), dueMs + 500 + 60_000, 'heartbeated: its worker has it');
      assert.equal(await expiryOf(short.runId), dueMs + 6_000, 'ending before the cut: left alone');
      assert.equal(await expiryOf(alive.runId), dueMs + 60_000, 'granted by a live node');
      assert.equal(await expiryOf(unrecorded.runId), dueMs + 60_000, 'granted outside the membership: not recorded');
      assert.equal(await nodeB.shortenLeasesOfGoneNodes(['node-b'], cutAtMs + 1_000, marginMs), 0, 'a cut lease is cut once');

      // The cut lease expires at its new end and the run is offered again, as a new attempt.
      const before = await handle.store.expireRunLeases(cutAtMs + 25_000 - 1, 100);
      assert.deepEqual(before.map((run) => run.runId).sort(), [short.runId, ahead.runId].sort(), 'the two leases ending sooner');
      const expired = await handle.store.expireRunLeases(cutAtMs + 25_000, 100);
      assert.deepEqual(expired.map((run) => [run.runId, run.toStatus]), [[lost.runId, 'ready']]);
      const again = (await leaseOne(nodeB, cutAtMs + 25_000, { pool: 'lost' }))!;
      assert.deepEqual([again.runId, again.attempt], [lost.runId, 2]);
    } finally {
      await Promise.all(others.map((store) => store.close()));
      await handle.cleanup();
    }
  });

  void it('a node cuts at its first heartbeat, and when a member it saw is gone', async () => {
    const handle = await openTestStore({ leaseNodeId: 'node-a' });
    const ttlMs = 10_000;
    const clock = new VirtualClock(dueMs);
    const openMembership = () => openPostgresMembership({ url: testPgUrl, schema: handle.schema, useDatabaseClock: false,
      logger: silentLogger() });
    const rawA = await openMembership();
    const rawB = await openMembership();
    // A node with only the api role: a member that takes no shards.
    const rawApi = await openPostgresMembership({ url: testPgUrl, schema: handle.schema, useDatabaseClock: false,
      logger: silentLogger(), schedules: false });
    let nodeB: PostgresStore | null = null;
    let apiNode: PostgresStore | null = null;
    try {
      nodeB = await openPostgresStore({ url: testPgUrl, schema: handle.schema, useDatabaseClock: false, poolSize: 2, leaseNodeId: 'node-b' });
      apiNode = await openPostgresStore({ url: testPgUrl, schema: handle.schema, useDatabaseClock: false, poolSize: 2, leaseNodeId: 'api-x' });
      const leaseAt = async (store: PostgresStore, pool: string) => {
        const job = await createJob(handle.store, { spec: { pool } });
        await firePending(handle.store, job, dueMs, { recurring: false });
        return (await leaseOne(store, dueMs, { pool, leaseMs: 60_000 }))!;
      };
      // node-b's predecessor under the same id granted this before node-b (re)started.
      const predecessors = await leaseAt(nodeB, 'predecessor');
      await rawA.heartbeat('node-a', ttlMs, dueMs);
      assert.deepEqual((await rawApi.heartbeat('api-x', ttlMs, dueMs)).map((member) => [member.nodeId, member.schedules]),
        [['api-x', false], ['node-a', true]]);
      const ofA = await leaseAt(handle.store, 'of-a');
      const ofApi = await leaseAt(apiNode, 'of-api');
      const expiryOf = async (runId: string) => (await handle.store.getRun(null, runId))?.leaseExpiresAtMs;

      const watching = cuttingLeasesOfGoneNodes(rawB, { store: nodeB, clock, logger: silentLogger(), marginMs });
      const members = await watching.heartbeat('node-b', ttlMs, dueMs);
      assert.deepEqual(members.map((member) => [member.nodeId, member.schedules]), [['api-x', false], ['node-a', true], ['node-b', true]]);
      await watching.idle();
      assert.equal(await expiryOf(predecessors.runId), dueMs + 20_000 + marginMs, 'its own id\'s leases, granted before it started');
      assert.equal(await expiryOf(ofA.runId), dueMs + 60_000, 'node-a is alive');
      assert.equal(await expiryOf(ofApi.runId), dueMs + 60_000, 'api-x is alive');

      // node-a and api-x stop heartbeating (killed): node-b sees them gone once their memberships lapse.
      await clock.advance(ttlMs - 1);
      await watching.heartbeat('node-b', ttlMs, clock.nowMs());
      await watching.idle();
      assert.equal(await expiryOf(ofA.runId), dueMs + 60_000, 'not before its membership lapses');
      await clock.advance(2);
      assert.deepEqual((await watching.heartbeat('node-b', ttlMs, clock.nowMs())).map((member) => member.nodeId), ['node-b']);
      await watching.idle();
      assert.equal(await expiryOf(ofA.runId), clock.nowMs() + 20_000 + marginMs, 'cut when node-a is gone');
      assert.equal(await expiryOf(ofApi.runId), clock.nowMs() + 20_000 + marginMs, 'cut when api-x is gone');
    } finally {
      await rawA.close();
      await rawB.close();
      await rawApi.close();
      await nodeB?.close();
      await apiNode?.close();
      await handle.cleanup();
    }
  });
});
