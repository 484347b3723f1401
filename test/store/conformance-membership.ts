// The membership part of the store conformance suite (src/store/membership.ts): what a node
// learns from its heartbeats, on every store. On PostgreSQL the members are every process on
// the database; on the embedded store the nodes of the one process the lock lets in. Either
// way, two memberships opened on one store see each other, and a lapse or a leave drops one.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { ClusterMembership } from '../../src/store/membership.js';
import type { Store } from '../../src/store/store.js';
import { t0Ms, withStore, type OpenStore } from './conformance-fixtures.js';

const ttlMs = 10_000;

async function withMemberships(store: Store, body: (open: (schedules: boolean) => Promise<ClusterMembership>) => Promise<void>):
  Promise<void> {
  const opened: ClusterMembership[] = [];
  try {
    await body(async (schedules) => {
      const membership = await store.openMembership({ schedules });
      opened.push(membership);
      return membership;
    });
  } finally {
    for (const membership of opened) await membership.close();
  }
}

export function runMembershipConformance(open: OpenStore): void {
  void it('a heartbeat answers the node itself, alive for its TTL, as a scheduling member or not', () =>
    withStore(open, (store) => withMemberships(store, async (openMembership) => {
      const scheduler = await openMembership(true);
      assert.deepEqual(await scheduler.heartbeat('node-a', ttlMs, t0Ms), [{ nodeId: 'node-a', expiresAtMs: t0Ms + ttlMs, schedules: true }]);
      const api = await openMembership(false);
      assert.deepEqual(await api.heartbeat('api-1', ttlMs, t0Ms + 1), [
        { nodeId: 'api-1', expiresAtMs: t0Ms + 1 + ttlMs, schedules: false },
        { nodeId: 'node-a', expiresAtMs: t0Ms + ttlMs, schedules: true },
      ], 'every live member, by id; an api-only node counts for no shards');
    })));

  void it('a member that stops beating drops out once its TTL passes, and is back with its next heartbeat', () =>
    withStore(open, (store) => withMemberships(store, async (openMembership) => {
      const a = await openMembership(true);
      const b = await openMembership(true);
      await a.heartbeat('node-a', ttlMs, t0Ms);
      assert.deepEqual((await b.heartbeat('node-b', ttlMs, t0Ms + 1_000)).map((member) => member.nodeId), ['node-a', 'node-b']);
      assert.deepEqual((await b.heartbeat('node-b', ttlMs, t0Ms + ttlMs - 1)).map((member) => member.nodeId), ['node-a', 'node-b'],
        'alive until its expiry');
      assert.deepEqual((await b.heartbeat('node-b', ttlMs, t0Ms + ttlMs)).map((member) => member.nodeId), ['node-b'],
        'gone at its expiry');
      await a.heartbeat('node-a', ttlMs, t0Ms + ttlMs + 1);
      assert.deepEqual((await b.heartbeat('node-b', ttlMs, t0Ms + ttlMs + 2)).map((member) => member.nodeId), ['node-a', 'node-b']);
    })));

  void it('a member that leaves is gone at once; the others stay', () =>
    withStore(open, (store) => withMemberships(store, async (openMembership) => {
      const a = await openMembership(true);
      const b = await openMembership(true);
      await a.heartbeat('node-a', ttlMs, t0Ms);
      await b.heartbeat('node-b', ttlMs, t0Ms);
      await a.leave('node-a');
      assert.deepEqual((await b.heartbeat('node-b', ttlMs, t0Ms + 1)).map((member) => member.nodeId), ['node-b']);
      const again = await a.heartbeat('node-a', ttlMs, t0Ms + 2);
      assert.deepEqual(again.map((member) => member.nodeId), ['node-a', 'node-b'], 'a node may join again after leaving');
    })));
}
