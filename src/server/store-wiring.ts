/**
 * What differs between a node on the embedded store and a node of a PostgreSQL cluster,
 * chosen once, from the store URL, when the store opens (open-store.ts): the embedded node
 * (embedded-node.ts) is the one process its data directory's lock lets in and takes every
 * shard; a cluster node (cluster-node.ts) joins the membership, takes its share, cuts the
 * leases of members gone, keeps the timer partitions. server.ts asks this and never which
 * store it has.
 */
import type { ShardPlanner } from '../scheduler/shard-lease-manager.js';
import type { Store } from '../store/store.js';

/** What the node's scheduler is built with on this store. */
export interface SchedulerWiring {
  /** What it dispatches through (a test hook may wrap the store). */
  store: Store;
  /** Take the shards at once, whoever holds them: their holder is known dead. */
  forceFirstAcquire: boolean;
  /** Timers per dispatch transaction. */
  dispatchBatchMax: number;
  /** Which shards it wants; absent: every shard (the embedded planner). */
  planner?: ShardPlanner;
}

export interface StoreWiring {
  /** The store the API and the services use. */
  readonly store: Store;
  /** Periodic upkeep the store needs beside its roles (timer partitions), or null. */
  readonly maintenance: ((nowMs: number) => Promise<unknown>) | null;
  /** Joins the cluster as a node with or without the scheduler role; answers what its scheduler is built with. */
  join(options: { schedules: boolean }): Promise<SchedulerWiring>;
  /** Once the scheduler (if any) has started: a node without one heartbeats its membership itself. */
  started(options: { scheduling: boolean }): Promise<void>;
  /** Leaves the cluster (after the scheduler stopped and handed its shards back). */
  leave(): Promise<void>;
  /** Closes the store and releases what guards it; after `leave`. */
  close(): Promise<void>;
}
