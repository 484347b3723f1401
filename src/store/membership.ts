/**
 * Who is in the cluster (the contract; the PostgreSQL store implements it, postgres/membership.ts). A scheduler node that holds no shard is invisible in the lease
 * table, so fair shares need a separate heartbeat: each node says "alive until T" every lease
 * cycle and reads back every live node. Nodes with only the api role heartbeat too, as
 * non-scheduling members: they take no shards, but the leases they grant are cut when they
 * die (orphaned-leases.ts). The embedded store has one process per data directory and needs
 * none of this.
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
