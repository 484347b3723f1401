/**
 * Fire → dispatch (DESIGN.md flow 5). Turns due wheel entries into items of the store's
 * firing operations — the firing plan of the job's schedule rules plus the shard token this
 * node holds — and hands them to the store in batches: `dispatch` for a timer fired whole,
 * `writeRunsAhead` and `finishAhead` for a herd's one-shots (herd-plan.ts `firingOf`). A shard whose lease fails the
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
import type {
  DispatchItem, DispatchResult, FinishAheadItem, FiredRun, LoadedTimer, Store, WriteAheadItem, WriteAheadResult,
} from '../store/store.js';
import { firingOf, type HerdLimits } from './herd-plan.js';
import type { ScheduleCache } from './schedule-cache.js';
import type { ShardLeaseManager } from './shard-lease-manager.js';

export interface DispatchOutcome {
  /**
   * Timers to put back in the wheel: next occurrences within reach, and one-shot timers kept
   * pending by `writeRunsAhead` (marked `dispatchedAhead` when their runs were written).
   */
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

/** A batch's items for each store operation, beside the timers they came from. */
class FiringBatch {
  readonly dispatch: { items: DispatchItem[]; timers: LoadedTimer[] } = { items: [], timers: [] };
  readonly writeRunsAhead: { items: WriteAheadItem[]; timers: LoadedTimer[] } = { items: [], timers: [] };
  readonly finishAhead: { items: FinishAheadItem[]; timers: LoadedTimer[] } = { items: [], timers: [] };

  get size(): number {
    return this.dispatch.items.length + this.writeRunsAhead.items.length + this.finishAhead.items.length;
  }
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
      /** Timers per batch (one transaction each, or one per store operation it holds on PostgreSQL). */
      batchMax: number;
      /** Which one-shot timers have their runs written ahead (herd-plan.ts); `dispatchAheadMs` 0: none. */
      herd: HerdLimits;
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

  private async dispatchBatch(timers: readonly LoadedTimer[], outcome: DispatchOutcome): Promise<void> {
    const { clock, leases, metrics, logger } = this.deps;
    const nowMs = clock.nowMs();
    const batch = new FiringBatch();
    let heldBack = 0;
    for (const timer of timers) {
      const lease = leases.firingLease(timer.shard);
      if (lease === null) {
        heldBack++;
        if (leases.holds(timer.shard)) outcome.heldBack.push(timer);
        continue;
      }
      this.planItem(batch, timer, lease.token, nowMs);
    }
    if (heldBack > 0) {
      metrics.dispatchSkippedLeaseExpiredTotal.inc(heldBack);
      logger.warn({ timers: heldBack }, 'local shard lease check failed; not firing (the store would fence it anyway)');
    }
    if (batch.size === 0) return;
    await this.fire(batch, nowMs, outcome.nextTimers);
  }

  /**
   * Hands each part of the batch to its store operation, all in one turn: the embedded store's
   * group commit puts them in one transaction, as one call was before they had names. Every
   * part is accounted for before a failure of any is thrown (its timers stay pending in the
   * store and are reloaded).
   */
  private async fire(batch: FiringBatch, nowMs: number, nextTimers: LoadedTimer[]): Promise<void> {
    const { store, metrics } = this.deps;
    const [dispatched, writtenAhead, finished] = await Promise.all([
      settle(batch.dispatch.items, (items) => store.dispatch(items, nowMs)),
      settle(batch.writeRunsAhead.items, (items) => store.writeRunsAhead(items, nowMs)),
      settle(batch.finishAhead.items, (items) => store.finishAhead(items, nowMs)),
    ]);
    const counts: BatchCounts = { committedAtMs: this.deps.clock.nowMs(), staleTokens: 0, timersGone: 0, duplicates: 0,
      byStatus: new Map(), readyByTeam: new Map(), lagByLane: new Map() };
    if (dispatched.status === 'fulfilled') {
      dispatched.value.forEach((result, index) => {
        this.accountDispatched(result, batch.dispatch.items[index]!, batch.dispatch.timers[index]!, counts, nextTimers);
      });
    }
    if (writtenAhead.status === 'fulfilled') {
      writtenAhead.value.forEach((result, index) => {
        this.accountWrittenAhead(result, batch.writeRunsAhead.timers[index]!, counts, nextTimers);
      });
    }
    if (finished.status === 'fulfilled') {
      for (const result of finished.value) countRefused(result, counts);
    }
    // Counters move once per batch: per run, their label lookups were a visible share of a herd.
    if (counts.staleTokens > 0) metrics.dispatchRejectedStaleTokenTotal.inc(counts.staleTokens);
    if (counts.timersGone > 0) metrics.timersGoneTotal.inc(counts.timersGone);
    if (counts.duplicates > 0) metrics.dispatchDuplicatesTotal.inc(counts.duplicates);
    for (const [status, count] of counts.byStatus) metrics.dispatchesTotal.inc({ status }, count);
    for (const [team, count] of counts.readyByTeam) metrics.runsDispatchedTotal.inc({ team: metrics.teamLabel(team) }, count);
    for (const settled of [dispatched, writtenAhead, finished]) {
      if (settled.status === 'rejected') throw settled.reason;
    }
  }

  /** Adds the item for one timer to its part of the batch; none when its job's schedule no longer compiles. */
  private planItem(batch: FiringBatch, timer: LoadedTimer, shardToken: string, nowMs: number): void {
    const fenced = { shard: timer.shard, shardToken, timerId: timer.timerId, jobId: timer.jobId };
    const firing = firingOf(timer, nowMs, this.deps.herd);
    if (firing === 'finishAhead') {
      batch.finishAhead.items.push(fenced);
      batch.finishAhead.timers.push(timer);
      return;
    }
    try {
      const schedule = this.deps.schedules.get(timer.spec);
      // A shard held since before the occurrence was due: it is late, not missed (firing-plan.ts).
      const presentSinceMs = this.deps.leases.heldSinceMs(timer.shard) ?? nowMs;
      const plan = planFiring(timer.jobId, timer.spec, schedule, timer, nowMs, presentSinceMs);
      if (firing === 'writeRunsAhead') {
        batch.writeRunsAhead.items.push({ ...fenced, occurrences: plan.occurrences });
        batch.writeRunsAhead.timers.push(timer);
        return;
      }
      batch.dispatch.items.push({
        ...fenced,
        occurrences: plan.occurrences,
        ...(plan.summary === undefined ? {} : { summary: plan.summary }),
        nextTimer: plan.nextTimer,
      });
      batch.dispatch.timers.push(timer);
    } catch (error) {
      // A stored job whose schedule stopped compiling (say, a time zone removed from the
      // system's tz database) must be seen, not silently skipped forever.
      this.deps.logger.error({ err: error, jobId: timer.jobId }, 'cannot plan the firing of a stored job');
    }
  }

  private accountDispatched(result: DispatchResult, item: DispatchItem, timer: LoadedTimer, counts: BatchCounts,
    nextTimers: LoadedTimer[]): void {
    if (result.kind !== 'dispatched') {
      countRefused(result, counts);
      return;
    }
    this.countRuns(result.runs, timer, counts);
    if (result.nextTimerId !== null && item.nextTimer !== null) {
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

  /** The same timer, kept: to be finished after its fire time, or fired whole then. */
  private accountWrittenAhead(result: WriteAheadResult, timer: LoadedTimer, counts: BatchCounts, nextTimers: LoadedTimer[]): void {
    if (result.kind === 'written_ahead') {
      this.countRuns(result.runs, timer, counts);
      nextTimers.push({ ...timer, dispatchedAhead: true });
    } else if (result.kind === 'left_for_fire_time') {
      nextTimers.push(timer);
    } else {
      countRefused(result, counts);
    }
  }

  private countRuns(runs: readonly FiredRun[], timer: LoadedTimer, counts: BatchCounts): void {
    let inserted = false;
    for (const run of runs) {
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
  }
}

/** The store's answers for `items` (none asked for when empty), or its failure; never rejects. */
async function settle<Item, Result>(items: readonly Item[], call: (items: readonly Item[]) => Promise<Result[]>):
  Promise<PromiseSettledResult<Result[]>> {
  if (items.length === 0) return { status: 'fulfilled', value: [] };
  try {
    return { status: 'fulfilled', value: await call(items) };
  } catch (error) {
    return { status: 'rejected', reason: error };
  }
}

function countRefused(result: { kind: string }, counts: BatchCounts): void {
  if (result.kind === 'stale_token') counts.staleTokens++;
  else if (result.kind === 'timer_gone') counts.timersGone++;
}
