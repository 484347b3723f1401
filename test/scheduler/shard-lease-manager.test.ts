// Shard ownership across two scheduler nodes on PostgreSQL: fair shares, and a
// dead node's shards taken over at the instant its lease and membership expire, not at the
// survivor's next regular cycle. Each node has its own virtual clock; a node is "dead" when
// its clock stops moving (its timers never run again), as after kill -9.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { VirtualClock } from '../../src/clock.js';
import { shardCount, timingDefaults, type TimingConfig } from '../../src/limits.js';
import { silentLogger } from '../../src/obs/log.js';
import { Metrics } from '../../src/obs/metrics.js';
import { clusterPlanner } from '../../src/scheduler/cluster-planner.js';
import { ShardLeaseManager } from '../../src/scheduler/shard-lease-manager.js';
import { openPostgresMembership } from '../../src/store/postgres/membership.js';
import type { ClusterMembership } from '../../src/store/membership.js';
import { openTestStore, postgresSkipReason, testPgUrl } from '../store/postgres-harness.js';

const skip = await postgresSkipReason();
const startMs = Date.parse('2026-11-29T00:00:00.000Z');
const timing: TimingConfig = { ...timingDefaults };

interface Node {
  clock: VirtualClock;
  manager: ShardLeaseManager;
  membership: ClusterMembership;
}

void describe('shard lease manager on PostgreSQL', { skip: skip ?? false }, () => {
  void it('takes a dead node\'s shards when its lease and membership expire, not a renew interval later', async () => {
    const handle = await openTestStore({ useDatabaseClock: false });
    const nodes: Node[] = [];
    const startNode = async (nodeId: string): Promise<Node> => {
      const clock = new VirtualClock(startMs);
      const membership = await openPostgresMembership({ url: testPgUrl, schema: handle.schema, useDatabaseClock: false,
        logger: silentLogger() });
      const manager = new ShardLeaseManager({
        store: handle.store, clock, nodeId, timing, metrics: new Metrics(), logger: silentLogger(),
        planner: clusterPlanner({ membership, membershipTtlMs: timing.shardLeaseTtlMs }),
        onGained: () => undefined, onLost: () => undefined,
      });
      const node = { clock, manager, membership };
      nodes.push(node);
      return node;
    };
    try {
      const survivor = await startNode('node-a');
      await survivor.manager.start();
      // The victim starts 1.5 s later, so its expiry falls between two of the survivor's cycles.
      await survivor.clock.advance(1_500);
      const victim = await startNode('node-b');
      await victim.clock.advance(1_500);
      await victim.manager.start();
      for (let step = 0; step < 6; step++) {
        await survivor.clock.advance(1_000);
        await victim.clock.advance(1_000);
      }
      assert.equal(survivor.manager.ownedShards().length, shardCount / 2, 'fair shares before the death');
      assert.equal(victim.manager.ownedShards().length, shardCount / 2);

      // The victim dies: its clock stops. Its leases and membership expire TTL after its last cycle.
      const victimLeases = (await handle.store.listShardLeases()).filter((lease) => lease.nodeId === 'node-b');
      const expiresAtMs = Math.max(...victimLeases.map((lease) => lease.expiresAtMs));
      let ownedAllAtMs: number | null = null;
      while (survivor.clock.nowMs() < expiresAtMs + timing.shardLeaseRenewIntervalMs + 1_000) {
        await survivor.clock.advance(10);
        if (ownedAllAtMs === null && survivor.manager.ownedShards().length === shardCount) {
          ownedAllAtMs = survivor.clock.nowMs();
        }
      }
      assert.ok(ownedAllAtMs !== null, 'the survivor took every shard');
      const lateMs = ownedAllAtMs - expiresAtMs;
      assert.ok(lateMs >= 0, 'not before the dead node\'s leases expired');
      assert.ok(lateMs <= 100, `taken ${lateMs} ms after the expiry; the regular cycle would come up to `
        + `${timing.shardLeaseRenewIntervalMs} ms later`);
    } finally {
      for (const node of nodes) await node.membership.close();
      await handle.cleanup();
    }
  });

  void it('a node restarted under the same id takes its predecessor\'s shards at once, not when their leases expire', async () => {
    const handle = await openTestStore({ useDatabaseClock: false });
    const memberships: ClusterMembership[] = [];
    const startNode = async (clock: VirtualClock): Promise<ShardLeaseManager> => {
      const membership = await openPostgresMembership({ url: testPgUrl, schema: handle.schema, useDatabaseClock: false,
        logger: silentLogger() });
      memberships.push(membership);
      return new ShardLeaseManager({
        store: handle.store, clock, nodeId: 'node-a', timing, metrics: new Metrics(), logger: silentLogger(),
        planner: clusterPlanner({ membership, membershipTtlMs: timing.shardLeaseTtlMs }),
        onGained: () => undefined, onLost: () => undefined,
      });
    };
    try {
      const before = new VirtualClock(startMs);
      const killed = await startNode(before);
      await killed.start();
      await before.advance(3_000);
      assert.equal(killed.ownedShards().length, shardCount);
      const tokensBefore = new Map((await handle.store.listShardLeases()).map((lease) => [lease.shard, BigInt(lease.token)]));
      // kill -9: its clock stops, and its leases stay in the table under node-a for 10 s more.
      const restarted = await startNode(new VirtualClock(startMs + 5_000));
      await restarted.start();
      assert.equal(restarted.ownedShards().length, shardCount, 'every shard at the first cycle, not at the leases\' expiry');
      // Fresh grants: the predecessor's tokens are fenced out, should it still be dispatching.
      for (const lease of await handle.store.listShardLeases()) {
        assert.ok(BigInt(lease.token) > tokensBefore.get(lease.shard)!, `shard ${lease.shard} was granted anew`);
      }
    } finally {
      for (const membership of memberships) await membership.close();
      await handle.cleanup();
    }
  });

  void it('when two survivors reach for the same shards at once, the one refused looks again at once, not a cycle later', async () => {
    const handle = await openTestStore({ useDatabaseClock: false });
    const nodes: (Node & { acquires: { wanted: number; granted: number }[] })[] = [];
    // Node b's acquire first lets node a run, so that both read the lease table before either acquired.
    let beforeAcquireOfB: () => Promise<void> = async () => undefined;
    const startNode = async (nodeId: string) => {
      const clock = new VirtualClock(startMs);
      const membership = await openPostgresMembership({ url: testPgUrl, schema: handle.schema, useDatabaseClock: false,
        logger: silentLogger() });
      const acquires: { wanted: number; granted: number }[] = [];
      const store = new Proxy(handle.store, {
        get(target, property, receiver) {
          if (property !== 'acquireShardLeases') return Reflect.get(target, property, receiver) as unknown;
          return async (...args: Parameters<typeof target.acquireShardLeases>) => {
            if (nodeId === 'node-b') await beforeAcquireOfB();
            const granted = await target.acquireShardLeases(...args);
            acquires.push({ wanted: args[1].length, granted: granted.length });
            return granted;
          };
        },
      });
      const manager = new ShardLeaseManager({
        store, clock, nodeId, timing, metrics: new Metrics(), logger: silentLogger(),
        planner: clusterPlanner({ membership, membershipTtlMs: timing.shardLeaseTtlMs }),
        onGained: () => undefined, onLost: () => undefined,
      });
      const node = { clock, manager, membership, acquires };
      nodes.push(node);
      return node;
    };
    try {
      const [a, b, victim] = [await startNode('node-a'), await startNode('node-b'), await startNode('node-c')];
      for (const node of [a, b, victim]) await node.manager.start();
      for (let step = 0; step < 8; step++) for (const node of [a, b, victim]) await node.clock.advance(1_000);
      assert.equal(a.manager.ownedShards().length + b.manager.ownedShards().length + victim.manager.ownedShards().length,
        shardCount, 'every shard owned before the death');

      // The victim dies. Both survivors come to its expiry at the same instant.
      const expiresAtMs = Math.max(...(await handle.store.listShardLeases())
        .filter((lease) => lease.nodeId === 'node-c').map((lease) => lease.expiresAtMs));
      while (a.clock.nowMs() < expiresAtMs - 100) {
        await a.clock.advance(100);
        await b.clock.advance(100);
      }
      let aRan = false;
      beforeAcquireOfB = async () => {
        if (aRan) return;
        aRan = true;
        await a.clock.advance(expiresAtMs + 200 - a.clock.nowMs());
      };
      const acquiresOfBBefore = b.acquires.length;
      await b.clock.advance(expiresAtMs + 200 - b.clock.nowMs());
      const contended = b.acquires.slice(acquiresOfBBefore);
      assert.ok(contended.length >= 1 && contended[0]!.granted < contended[0]!.wanted,
        `node a took some of the shards node b reached for: ${JSON.stringify(contended)}`);
      await b.clock.advance(100);
      assert.equal(a.manager.ownedShards().length + b.manager.ownedShards().length, shardCount,
        'the survivors own every shard within 100 ms; the regular cycle would come 3 s later');
    } finally {
      for (const node of nodes) await node.membership.close();
      await handle.cleanup();
    }
  });
});
