/**
 * Fire → dispatch (DESIGN.md flow 5). Turns due wheel entries into dispatch items — the
 * firing plan of the job's schedule rules plus the shard token this node holds — and hands
 * them to the store in batches, one transaction per batch. A shard whose lease fails the
 * local monotonic check is not fired at all. If this node no longer holds the shard, its
 * entries are dropped and whoever holds it next reloads them from the store; if it still
 * holds it and only the renewal is late (a loaded machine, a slow database), the entries are
 * handed back to be tried again shortly — dropping them would leave them unfired until the
 * next loader refresh, long after the renewal succeeds.
 */
import type { Clock } from '../clock.js';
import { planFiring } from '../domain/firing-plan.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';
import type { DispatchItem, DispatchResult, LoadedTimer, Store } from '../store/store.js';
import type { ScheduleCache } from './schedule-cache.js';
import type { ShardLeaseManager } from './shard-lease-manager.js';

export interface DispatchOutcome {
  /** Timers to put back in the wheel: next occurrences within reach. */
  nextTimers: LoadedTimer[];
  /** Due timers not fired because the lease of a shard this node still holds awaits renewal. */
  heldBack: LoadedTimer[];
}

/** What one batch adds to the metrics, gathered first and added once. */
interface BatchCounts {
  committedAtMs: number;
  staleTokens: number;
  timersGone: number;
  duplicates: number;
  byStatus: Map<string, number>;
  /** Runs written ready, by team (chargeback). */
  readyByTeam: Map<string, number>;
  lagByLane: Map<string, { observe(value: number): void }>;
}

export class Dispatcher {
  constructor(
    private readonly deps: {
      store: Store;
      clock: Clock;
      leases: ShardLeaseManager;
      schedules: ScheduleCache;
      metrics: Metrics;
      logger: Logger;
      /** Timers per store.dispatch call (one transaction each). */
      batchMax: number;
      /**
       * How long before its fire time a one-shot job's run is written (0: at the fire time).
       * The scheduler wheels such timers this much early and passes 0 for a store without
       * `dispatchesAhead`.
       */
      dispatchAheadMs: number;
    },
  ) {}

  /** Dispatches `due` (in fire order) in batches; answers the next timers the store wrote. */
  async dispatch(due: readonly LoadedTimer[]): Promise<DispatchOutcome> {
    const outcome: DispatchOutcome = { nextTimers: [], heldBack: [] };
    const { batchMax } = this.deps;
    for (let start = 0; start < due.length; start += batchMax) {
      const batch = due.slice(start, start + batchMax);
      await this.dispatchBatch(batch, outcome);
    }
    return outcome;
  }

  private async dispatchBatch(batch: readonly LoadedTimer[], outcome: DispatchOutcome): Promise<void> {
    const { store, clock, leases, metrics, logger } = this.deps;
    const nowMs = clock.nowMs();
    const items: DispatchItem[] = [];
    const timers: LoadedTimer[] = [];
    let heldBack = 0;
    for (const timer of batch) {
      const lease = leases.firingLease(timer.shard);
      if (lease === null) {
        heldBack++;
        if (leases.holds(timer.shard)) outcome.heldBack.push(timer);
        continue;
      }
      const item = this.planItem(timer, lease.token, nowMs);
      if (item === null) continue;
      items.push(item);
      timers.push(timer);
    }
    if (heldBack > 0) {
      metrics.dispatchSkippedLeaseExpiredTotal.inc(heldBack);
      logger.warn({ timers: heldBack }, 'local shard lease check failed; not firing (the store would fence it anyway)');
    }
    if (items.length === 0) return;
    const results = await store.dispatch(items, nowMs);
    const counts: BatchCounts = { committedAtMs: clock.nowMs(), staleTokens: 0, timersGone: 0, duplicates: 0,
      byStatus: new Map(), readyByTeam: new Map(), lagByLane: new Map() };
    results.forEach((result, index) => {
      this.account(result, items[index]!, timers[index]!, counts, outcome.nextTimers);
    });
    // Counters move once per batch: per run, their label lookups were a visible share of a herd.
    if (counts.staleTokens > 0) metrics.dispatchRejectedStaleTokenTotal.inc(counts.staleTokens);
    if (counts.timersGone > 0) metrics.timersGoneTotal.inc(counts.timersGone);
    if (counts.duplicates > 0) metrics.dispatchDuplicatesTotal.inc(counts.duplicates);
    for (const [status, count] of counts.byStatus) metrics.dispatchesTotal.inc({ status }, count);
    for (const [team, count] of counts.readyByTeam) metrics.runsDispatchedTotal.inc({ team: metrics.teamLabel(team) }, count);
  }

  /** The dispatch item for one timer, or null when its job's schedule no longer compiles. */
  private planItem(timer: LoadedTimer, shardToken: string, nowMs: number): DispatchItem | null {
    if (timer.dispatchedAhead === true) {
      return { shard: timer.shard, shardToken, timerId: timer.timerId, jobId: timer.jobId, occurrences: [], nextTimer: null,
        stage: 'finish' };
    }
    try {
      const schedule = this.deps.schedules.get(timer.spec);
      // A shard held since before the occurrence was due: it is late, not missed (firing-plan.ts).
      const presentSinceMs = this.deps.leases.heldSinceMs(timer.shard) ?? nowMs;
      const plan = planFiring(timer.jobId, timer.spec, schedule, timer, nowMs, presentSinceMs);
      return {
        shard: timer.shard,
        shardToken,
        timerId: timer.timerId,
        jobId: timer.jobId,
        occurrences: plan.occurrences,
        ...(plan.summary === undefined ? {} : { summary: plan.summary }),
        nextTimer: plan.nextTimer,
        ...(this.firesAhead(timer, nowMs) ? { stage: 'ahead' as const } : {}),
      };
    } catch (error) {
      // A stored job whose schedule stopped compiling (say, a time zone removed from the
      // system's tz database) must be seen, not silently skipped forever.
      this.deps.logger.error({ err: error, jobId: timer.jobId }, 'cannot plan the firing of a stored job');
      return null;
    }
  }

  /** A one-shot timer not yet due is fired ahead (the scheduler wheels only those within reach early). */
  private firesAhead(timer: LoadedTimer, nowMs: number): boolean {
    return this.deps.dispatchAheadMs > 0 && timer.fireAtMs > nowMs && isOneShot(timer);
  }

  private account(result: DispatchResult, item: DispatchItem, timer: LoadedTimer, counts: BatchCounts,
    nextTimers: LoadedTimer[]): void {
    if (result.kind === 'stale_token') {
      counts.staleTokens++;
      return;
    }
    if (result.kind === 'timer_gone') {
      counts.timersGone++;
      return;
    }
    let inserted = false;
    for (const run of result.runs) {
      if (!run.inserted) {
        counts.duplicates++;
        continue;
      }
      inserted = true;
      counts.byStatus.set(run.status, (counts.byStatus.get(run.status) ?? 0) + 1);
      if (run.status === 'ready') {
        const team = timer.team ?? 'unknown';
        counts.readyByTeam.set(team, (counts.readyByTeam.get(team) ?? 0) + 1);
      }
    }
    if (inserted) {
      let lag = counts.lagByLane.get(timer.spec.lane);
      if (lag === undefined) {
        lag = this.deps.metrics.fireLagSeconds.labels({ lane: timer.spec.lane });
        counts.lagByLane.set(timer.spec.lane, lag);
      }
      lag.observe(Math.max(0, counts.committedAtMs - timer.fireAtMs) / 1000);
    }
    if (item.stage === 'ahead' && result.nextTimerId !== null) {
      // The same timer, kept: to be finished at its fire time, or fired whole then.
      nextTimers.push({ ...timer, ...(result.nextTimerDispatchedAhead === true ? { dispatchedAhead: true } : {}) });
    } else if (result.nextTimerId !== null && item.nextTimer !== null) {
      nextTimers.push({
        timerId: result.nextTimerId,
        jobId: timer.jobId,
        shard: timer.shard,
        fireAtMs: item.nextTimer.fireAtMs,
        scheduledAtMs: item.nextTimer.scheduledAtMs,
        jobVersion: timer.jobVersion,
        spec: timer.spec,
        ...(timer.team === undefined ? {} : { team: timer.team }),
      });
    }
  }
}

/** Whether the timer belongs to a one-shot job (`at`), the only kind whose firing may be split. */
export function isOneShot(timer: LoadedTimer): boolean {
  return 'at' in timer.spec.schedule;
}
