/**
 * The wheel driver (DESIGN.md flow 5): holds the node's timing wheel, wakes at its earliest
 * entry, and fires what is due through the Dispatcher, batch after batch, putting back what
 * the firing hands back: next occurrences (a `catch_up: all` backlog paced), timers written
 * ahead (to be finished), timers held back by a late lease renewal. When each timer comes out
 * of the wheel, and which are written ahead, is herd planning's (herd-plan.ts).
 */
import type { Clock, TimerHandle } from '../clock.js';
import { TimingWheel } from '../domain/timing-wheel.js';
import { heldBackRetryDelayMs, virtualBatchWindowMs, wheelTickMs } from '../limits.js';
import type { Logger } from '../obs/log.js';
import type { Metrics } from '../obs/metrics.js';
import type { LoadedTimer } from '../store/store.js';
import type { CatchUpPacer } from './catch-up-pacing.js';
import type { Dispatcher } from './dispatcher.js';
import { HerdTally, isEarlyWork, splitStragglers, wheelAtMs, wheelsEarly, type HerdLimits } from './herd-plan.js';
import type { ShardLeaseManager } from './shard-lease-manager.js';

export interface WheelDriverOptions {
  clock: Clock;
  metrics: Metrics;
  logger: Logger;
  leases: ShardLeaseManager;
  dispatcher: Dispatcher;
  herd: HerdLimits;
  pacer: CatchUpPacer;
  loadHorizonMs: number;
  /** Timers per dispatch transaction: also the early work a pass takes between looks at the wheel. */
  batchMax: number;
  /** A pass failed: its timers stay pending in the store, to be reloaded. */
  onDispatchFailed(): void;
}

export class WheelDriver {
  private readonly wheel: TimingWheel<LoadedTimer>;
  /** One-shot timers wheeled early so far, per tick of their fire time: each herd's size. */
  private readonly tally = new HerdTally();
  private wakeTimer: TimerHandle | null = null;
  private wakeAtMs = Infinity;
  private firing: Promise<void> | null = null;
  private stopped = false;

  constructor(private readonly options: WheelDriverOptions) {
    this.wheel = new TimingWheel({ tickMs: wheelTickMs, startMs: options.clock.nowMs() });
  }

  get size(): number {
    return this.wheel.size;
  }

  /** The wheel's timers in slots up to `limitMs` that `counts` (a read-only walk, for metrics). */
  countDueBy(limitMs: number, counts: (timer: LoadedTimer) => boolean): number {
    return this.wheel.countDueBy(limitMs, counts);
  }

  /** Stops firing and waits for the pass in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wakeTimer?.cancel();
    await this.firing;
  }

  clear(): void {
    this.wheel.clear();
    this.tally.clear();
  }

  /** Drops the herd sizes of ticks whose time has passed. */
  forgetPassedTicks(): void {
    this.tally.forgetBefore(this.options.clock.nowMs());
  }

  /** Drops the timers of shards this node lost. */
  removeShards(lost: ReadonlySet<number>): void {
    this.wheel.removeWhere((timer) => lost.has(timer.shard));
    this.options.metrics.wheelTimers.set(this.wheel.size);
  }

  insert(timers: readonly LoadedTimer[]): void {
    if (timers.length === 0) return;
    for (const timer of timers) {
      // A timer's fire time never changes (PATCH writes a new timer), so one already wheeled —
      // perhaps paced as a catch-up, or held back for a lease — stays as it is.
      if (this.wheel.has(timer.timerId)) continue;
      // Payloads stay in the store: the wheel holds what firing needs, nothing more.
      const countInTick = wheelsEarly(timer, this.options.herd) ? this.tally.add(timer.fireAtMs) : 0;
      this.wheel.insert(timer.timerId, wheelAtMs(timer, countInTick, this.options.herd),
        { ...timer, spec: { ...timer.spec, payload: null } });
    }
    this.options.metrics.wheelTimers.set(this.wheel.size);
    this.armWake();
  }

  /**
   * Arms the clock for the wheel's earliest entry, unless an earlier wake is armed.
   *
   * In real time that is the entry's own millisecond. Batching needs no window: the pass
   * takes everything due when it wakes, and timers coming due while a dispatch is in flight
   * go in the next one, so batches grow with the load as a group commit's do. (A wake at the
   * last entry of the entry's 10 ms wheel tick put 0-10 ms on every fire: with 2,000 timers
   * due a second, p99 14 ms at the worker.)
   *
   * Under the virtual clock it is the last entry due within `virtualBatchWindowMs`, cut at
   * the target of the advance in progress, so no advance ends before a timer due within it
   * has fired: an advance steps to each wake-up, and a spread herd of 100,000 timers was
   * 100,000 dispatches.
   */
  private armWake(): void {
    if (this.stopped || this.firing !== null) return;
    const firstMs = this.wheel.nextDueMs();
    if (firstMs === null) return;
    const { clock } = this.options;
    const advancingToMs = clock.advancingToMs?.() ?? null;
    const wakeAtMs = clock.isVirtual
      ? Math.max(firstMs, this.wheel.lastDueBy(Math.min(firstMs + virtualBatchWindowMs - 1, advancingToMs ?? firstMs)) ?? firstMs)
      : firstMs;
    if (wakeAtMs >= this.wakeAtMs) return;
    this.wakeTimer?.cancel();
    this.wakeAtMs = wakeAtMs;
    this.wakeTimer = clock.setTimer(wakeAtMs, () => this.fire());
  }

  /** Fires everything due, batch after batch, until the wheel has nothing due. */
  private fire(): Promise<void> {
    this.wakeTimer = null;
    this.wakeAtMs = Infinity;
    if (this.firing !== null) return this.firing;
    // Start the pass on a later microtask: run synchronously, a pass with nothing due would
    // reach its `finally` (firing = null) before this assignment, leaving a settled promise
    // in `firing` and the node never arming its wake again.
    this.firing = Promise.resolve().then(async () => {
      const early = new EarlyWork();
      try {
        for (;;) {
          if (this.stopped) return;
          const nowMs = this.options.clock.nowMs();
          const fresh = this.stragglersBackToTheirTime(this.wheel.advance(nowMs), nowMs);
          // Timers at their fire time first, all of them; then one batch of early work. The
          // rest of it waits for the next turn of this loop, which looks at the wheel again:
          // 20,000 timers written ahead in one go kept timers coming due meanwhile waiting
          // 1-3 s behind ~40 dispatch transactions on PostgreSQL (bench/probes/lag-stages.ts --store postgres).
          const due = fresh.filter((timer) => !isEarlyWork(timer, nowMs));
          early.add(fresh.filter((timer) => isEarlyWork(timer, nowMs)));
          due.push(...early.take(this.options.batchMax));
          // Empty also when every due timer went back to its own time: those are not due yet.
          if (due.length === 0) return;
          const outcome = await this.options.dispatcher.dispatch(due);
          this.requeue(outcome.nextTimers);
          this.retryHeldBack(outcome.heldBack);
          // Give the event loop a turn between batches. A batch whose timers were all held
          // back awaits nothing real, and with timers due every millisecond the next batch
          // is never empty: without this the pass ran on microtasks forever, and the lease
          // renewal that would have let it fire, and SIGTERM, never ran.
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
      } catch (error) {
        this.options.logger.error({ err: error }, 'dispatch failed; its timers stay pending and are reloaded');
        this.options.onDispatchFailed();
      } finally {
        this.firing = null;
        this.options.metrics.wheelTimers.set(this.wheel.size);
        this.armWake();
      }
    });
    return this.firing;
  }

  /** Early timers whose tick is no herd go back into the wheel at their own fire time (`splitStragglers`). */
  private stragglersBackToTheirTime(taken: LoadedTimer[], nowMs: number): LoadedTimer[] {
    const { fire, backToFireTime } = splitStragglers(taken, nowMs, (fireAtMs) => this.tally.countOf(fireAtMs), this.options.herd);
    for (const timer of backToFireTime) this.wheel.insert(timer.timerId, timer.fireAtMs, timer);
    return fire;
  }

  /**
   * Next occurrences go straight back into the wheel when within the horizon. An overdue one
   * is a `catch_up: all` backlog: it is paced (catch-up-pacing.ts) so that a backlog cannot
   * starve current work.
   */
  private requeue(nextTimers: readonly LoadedTimer[]): void {
    const nowMs = this.options.clock.nowMs();
    const horizonEndMs = nowMs + this.options.loadHorizonMs;
    for (const timer of nextTimers) {
      if (timer.fireAtMs >= horizonEndMs) continue;
      // Written ahead: finished at the end of its tick, overdue or not (not paced); every
      // other at its fire time (a one-shot left for its fire time, beside an active run, is
      // fired whole then, not written ahead again).
      let atMs = timer.dispatchedAhead === true ? wheelAtMs(timer, 0, this.options.herd) : timer.fireAtMs;
      if (timer.fireAtMs < nowMs && timer.dispatchedAhead !== true) atMs = this.options.pacer.nextSlotMs(nowMs);
      this.wheel.insert(timer.timerId, atMs, timer);
    }
  }

  /**
   * Timers of a shard whose lease renewal is late go back into the wheel a little later: by
   * then the renewal has usually landed and they fire; if the shard was lost meanwhile,
   * onLost has cleared it and they are not put back.
   */
  private retryHeldBack(timers: readonly LoadedTimer[]): void {
    const retryAtMs = this.options.clock.nowMs() + heldBackRetryDelayMs;
    for (const timer of timers) {
      if (this.options.leases.holds(timer.shard)) this.wheel.insert(timer.timerId, retryAtMs, timer);
    }
  }
}

/** Early work a firing pass has taken out of the wheel and not dispatched yet, in wheel order. */
class EarlyWork {
  private readonly timers: LoadedTimer[] = [];
  private start = 0;

  add(timers: readonly LoadedTimer[]): void {
    for (const timer of timers) this.timers.push(timer);
  }

  take(count: number): LoadedTimer[] {
    const taken = this.timers.slice(this.start, this.start + count);
    this.start += taken.length;
    if (this.start === this.timers.length) {
      this.timers.length = 0;
      this.start = 0;
    }
    return taken;
  }
}
