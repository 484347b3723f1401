/**
 * Who is in the cluster: part of the Store contract (`Store.openMembership`, store.ts). A
 * scheduler node that holds no shard is invisible in the lease table, so fair shares need a
 * separate heartbeat: each node says "alive until T" every lease cycle and reads back every
 * live node. Nodes with only the api role heartbeat too, as non-scheduling members: they take
 * no shards, but the leases they grant are cut when they die (scheduler/orphaned-leases.ts).
 *
 * PostgreSQL (postgres/membership.ts): the members are every process on the database, judged
 * by the database's clock. The embedded store (sqlite/membership.ts): one process per data
 * directory (the data-directory lock refuses a second), so the members are the nodes of this
 * process that beat through the store object, held in its memory; the embedded server's one
 * node takes every shard and beats nowhere, so the embedded membership serves processes that
 * run several nodes over one store (the simulator) and the conformance suite.
 */
export interface LiveMember {
  nodeId: string;
  /** When it stops counting as alive unless it heartbeats again. */
  expiresAtMs: number;
  /** False for a node without the scheduler role: it counts for nothing in shard shares. */
  schedules: boolean;
}

export interface ClusterMembership {
  /** Records this node alive for `ttlMs` and answers every live node (itself included), by id. */
  heartbeat(nodeId: string, ttlMs: number, nowMs: number): Promise<LiveMember[]>;
  /** Leaves the cluster at once (graceful shutdown), so the others rebalance without waiting. */
  leave(nodeId: string): Promise<void>;
  close(): Promise<void>;
}

export interface MembershipOptions {
  /** Whether this node takes shards (the scheduler role); a node with only the api role does not. */
  schedules: boolean;
}
