/**
 * Shard ownership for one scheduler node (DESIGN.md flow 3). The node holds leases with
 * fencing tokens in the store; it renews them every `shardLeaseRenewIntervalMs` and judges
 * their validity by its own monotonic clock: a lease counts as held until
 * `monotonic time before the grant + TTL − safety margin`. Measuring from *before* the call
 * errs on the early side, so a node paused mid-renewal stops firing before the store could
 * hand its shards to anyone else. The store's token check at the sink is the second fence.
 *
 * Which shards a node wants comes from a ShardPlanner: all of them on the embedded store,
 * a fair share when several nodes share PostgreSQL.
 */
import type { Clock, TimerHandle } from '../clock.js';
import type { TimingConfig } from '../limits.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';
import type { ShardLease, Store } from '../store/store.js';

export interface HeldShard {
  lease: ShardLease;
  /** Monotonic instant after which this node must not fire the shard. */
  firingDeadlineMonotonicMs: number;
  /**
   * Since when (wall clock, ms) this node has held the shard without a break: occurrences due
   * from then on that fire late were late on this node's watch, not missed by an outage.
   */
  heldSinceMs: number;
}

export interface ShardPlanner {
  /** The shards this node should try to hold now, given what every node holds. */
  wantedShards(nodeId: string, allLeases: readonly ShardLease[], nowMs: number): number[];
  /** Shards to hand back so that others can take a fair share. */
  surplusShards(nodeId: string, allLeases: readonly ShardLease[], nowMs: number): number[];
  /** True when holding `heldCount` shards leaves nothing to plan (skips reading every lease). */
  isSatisfied(heldCount: number): boolean;
  /** Called once per cycle before planning (cluster membership heartbeat). */
  refresh?(nodeId: string, nowMs: number): Promise<void>;
  /** Called on graceful stop, after the leases are released. */
  leave?(nodeId: string): Promise<void>;
  /**
   * The next instant after `nowMs` at which the plan may change by itself (another node's
   * lease or membership expires), or null. The manager runs an extra cycle then when it
   * comes before the next regular one: a dead node's shards are taken at its expiry, not up
   * to a renew interval later.
   */
  nextChangeAtMs?(nodeId: string, allLeases: readonly ShardLease[], nowMs: number): number | null;
}

/** After an expiry, by the clock that judged it, before looking: clocks of one machine agree to a few ms. */
const expiryLookSlackMs = 25;

export interface ShardLeaseManagerOptions {
  store: Store;
  clock: Clock;
  nodeId: string;
  timing: TimingConfig;
  planner: ShardPlanner;
  metrics: Metrics;
  logger: Logger;
  /** Take shards from a holder known to be dead (embedded mode, after the data-dir lock). */
  forceFirstAcquire?: boolean;
  onGained(shards: readonly number[]): void;
  onLost(shards: readonly number[]): void;
}

export class ShardLeaseManager {
  /** The next cycle is the immediate second look after a contended acquire. */
  private nextIsContentionRetry = false;
  private readonly held = new Map<number, HeldShard>();
  private timer: TimerHandle | null = null;
  private stopped = false;
  private cycle: Promise<void> = Promise.resolve();
  private cycleStartedAtMs = -Infinity;
  /** An extra cycle's instant: when another node's lease or membership expires (ShardPlanner.nextChangeAtMs). */
  private lookAgainAtMs: number | null = null;
  private forceNext: boolean;

  constructor(private readonly options: ShardLeaseManagerOptions) {
    this.forceNext = options.forceFirstAcquire ?? false;
  }

  async start(): Promise<void> {
    await this.runCycle();
    this.armTimer();
  }

  /** Stops renewing and hands every shard back so a successor takes over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.timer?.cancel();
    await this.cycle;
    const leases = [...this.held.values()].map((entry) => entry.lease);
    const shards = [...this.held.keys()];
    this.held.clear();
    this.options.metrics.shardsOwned.set(0);
    if (shards.length > 0) this.options.onLost(shards);
    if (leases.length > 0) await this.options.store.releaseShardLeases(this.options.nodeId, leases);
    await this.options.planner.leave?.(this.options.nodeId);
  }

  /** The lease to fence a dispatch with, or null when this node must not fire the shard now. */
  firingLease(shard: number): ShardLease | null {
    const entry = this.held.get(shard);
    if (entry === undefined) return null;
    if (this.options.clock.monotonicMs() >= entry.firingDeadlineMonotonicMs) return null;
    return entry.lease;
  }

  /** Since when this node has held the shard without a break (HeldShard.heldSinceMs), or null. */
  heldSinceMs(shard: number): number | null {
    return this.held.get(shard)?.heldSinceMs ?? null;
  }

  /** True while this node holds the shard, even if its renewal is late and firing is paused. */
  holds(shard: number): boolean {
    return this.held.has(shard);
  }

  ownedShards(): number[] {
    return [...this.held.keys()].sort((a, b) => a - b);
  }

  /** Runs one renew-and-acquire cycle now (tests and the virtual clock use it). */
  renewNow(): Promise<void> {
    return this.runCycle();
  }

  private armTimer(): void {
    if (this.stopped) return;
    const { clock, timing } = this.options;
    // Fixed rate, from the start of the last cycle: a slow cycle (a loaded machine, a long
    // acquire after a rebalance) must not push the next renewal past the firing deadline.
    const regularAtMs = this.cycleStartedAtMs + timing.shardLeaseRenewIntervalMs;
    const lookAgainAtMs = this.lookAgainAtMs === null ? Infinity : this.lookAgainAtMs + expiryLookSlackMs;
    const atMs = Math.max(clock.nowMs(), Math.min(regularAtMs, lookAgainAtMs));
    this.timer = clock.setTimer(atMs, async () => {
      await this.runCycle();
      this.armTimer();
    });
  }

  private runCycle(): Promise<void> {
    this.cycle = this.cycle.then(() => this.renewAndAcquire()).catch((error: unknown) => {
      this.options.logger.error({ err: error }, 'shard lease cycle failed; leases expire on their own if this persists');
    });
    return this.cycle;
  }

  private async renewAndAcquire(): Promise<void> {
    if (this.stopped) return;
    const { store, clock, nodeId, timing, planner } = this.options;
    this.cycleStartedAtMs = clock.nowMs();
    this.lookAgainAtMs = null;
    const isContentionRetry = this.nextIsContentionRetry;
    this.nextIsContentionRetry = false;
    await this.renew();
    await planner.refresh?.(nodeId, clock.nowMs());
    if (planner.isSatisfied(this.held.size)) return;
    // Leases recorded under this node's id that this process does not hold are a predecessor's
    // under the same id (a restart with a stable --node-id): the store grants them to this id
    // at once, so the planner must see them as free, not as shards this node already has. Seen
    // as ours, they were wanted only once they expired: a restarted node fired again 6.8 s
    // after it was up (bench:peers W8 on PostgreSQL, 10 s TTL).
    const allLeases = (await store.listShardLeases())
      .filter((lease) => lease.nodeId !== nodeId || this.held.has(lease.shard));
    this.lookAgainAtMs = planner.nextChangeAtMs?.(nodeId, allLeases, clock.nowMs()) ?? null;
    const surplus = planner.surplusShards(nodeId, allLeases, clock.nowMs()).filter((shard) => this.held.has(shard));
    if (surplus.length > 0) await this.release(surplus);
    const wanted = planner.wantedShards(nodeId, allLeases, clock.nowMs()).filter((shard) => !this.held.has(shard));
    if (wanted.length === 0 || this.stopped) return;
    const monotonicBeforeMs = clock.monotonicMs();
    const acquiredFromMs = clock.nowMs();
    const granted = await store.acquireShardLeases(nodeId, wanted, timing.shardLeaseTtlMs, clock.nowMs(),
      { force: this.forceNext });
    this.forceNext = false;
    if (this.stopped) {
      await store.releaseShardLeases(nodeId, granted);
      return;
    }
    // Another node reached for some of the same shards in the same instant (survivors of a
    // dead node do, at its expiry): look again at once for the rest of the share rather than
    // a renew interval later. Once: a shard that keeps refusing (a clock the database does
    // not share) waits for the regular cycle instead of being asked for every 25 ms.
    if (granted.length < wanted.length && !isContentionRetry) {
      this.nextIsContentionRetry = true;
      this.lookAgainAtMs = clock.nowMs();
    }
    const gained: number[] = [];
    for (const lease of granted) {
      const before = this.held.get(lease.shard);
      if (before === undefined) gained.push(lease.shard);
      this.held.set(lease.shard, { lease, firingDeadlineMonotonicMs: this.deadlineFrom(monotonicBeforeMs),
        heldSinceMs: before?.heldSinceMs ?? acquiredFromMs });
    }
    this.options.metrics.shardsOwned.set(this.held.size);
    if (gained.length > 0) {
      this.options.metrics.shardOwnershipChangesTotal.inc({ change: 'gained' }, gained.length);
      this.options.logger.info({ shards: gained.length, node: nodeId }, 'shards gained');
      this.options.onGained(gained);
    }
  }

  private async renew(): Promise<void> {
    if (this.held.size === 0) return;
    const { store, clock, nodeId, timing } = this.options;
    const monotonicBeforeMs = clock.monotonicMs();
    const leases = [...this.held.values()].map((entry) => entry.lease);
    const renewed = await store.renewShardLeases(nodeId, leases, timing.shardLeaseTtlMs, clock.nowMs());
    const renewedShards = new Set<number>();
    for (const lease of renewed) {
      renewedShards.add(lease.shard);
      const heldSinceMs = this.held.get(lease.shard)?.heldSinceMs ?? clock.nowMs();
      this.held.set(lease.shard, { lease, firingDeadlineMonotonicMs: this.deadlineFrom(monotonicBeforeMs), heldSinceMs });
    }
    const lost = [...this.held.keys()].filter((shard) => !renewedShards.has(shard));
    if (lost.length > 0) this.dropLost(lost);
  }

  private async release(shards: number[]): Promise<void> {
    const leases = shards.map((shard) => this.held.get(shard)!.lease);
    // Stop firing before the store lets anyone else take the shards.
    for (const shard of shards) this.held.delete(shard);
    this.options.onLost(shards);
    this.options.metrics.shardOwnershipChangesTotal.inc({ change: 'released' }, shards.length);
    this.options.metrics.shardsOwned.set(this.held.size);
    await this.options.store.releaseShardLeases(this.options.nodeId, leases);
  }

  private dropLost(shards: number[]): void {
    for (const shard of shards) this.held.delete(shard);
    this.options.metrics.shardsOwned.set(this.held.size);
    this.options.metrics.shardOwnershipChangesTotal.inc({ change: 'lost' }, shards.length);
    this.options.logger.warn({ shards: shards.length, node: this.options.nodeId },
      'shard leases lost (another node holds them now); dropping them from the wheel');
    this.options.onLost(shards);
  }

  private deadlineFrom(monotonicBeforeMs: number): number {
    const { timing } = this.options;
    return monotonicBeforeMs + timing.shardLeaseTtlMs - timing.shardLeaseSafetyMarginMs;
  }
}

/** Every shard, for the embedded store where one process owns the data directory. */
export function allShardsPlanner(shardCount: number): ShardPlanner {
  const all = Array.from({ length: shardCount }, (_, shard) => shard);
  return {
    wantedShards: () => all,
    surplusShards: () => [],
    isSatisfied: (heldCount) => heldCount === shardCount,
  };
}
