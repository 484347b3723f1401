/**
 * Herd planning (DESIGN.md flow 5): which one-shot timers have their runs written ahead of
 * their fire time, when each timer comes out of the wheel, and when one written ahead is
 * finished. Pure: no I/O, no clock, no timers. The wheel driver passes `nowMs` and keeps the
 * per-tick counts (`HerdTally`); the dispatcher asks `firingOf` which store operation fires
 * a timer.
 *
 * A herd, or a dense stream, is at least `dispatchAheadMinTimers` one-shot timers due in one
 * wheel tick. Every one-shot timer is wheeled early (`dispatchAheadMs` before its fire time,
 * a big herd's later members up to twice that), counted into its tick; when it comes out of
 * the wheel, a member of a herd is written ahead, and a straggler (its tick too small) goes
 * back into the wheel at its own fire time, to be fired whole. A timer written ahead comes out
 * again `finishAheadDelayMs` after the end of its tick, to be finished: its run is leasable
 * from the fire time whenever the timer is consumed, so a herd's finishes wait until its
 * leases are done.
 */
import { wheelTickMs } from '../limits.js';
import type { LoadedTimer } from '../store/store.js';

/** The herd settings of `TimingConfig` (limits.ts); `dispatchAheadMs` 0 writes nothing ahead. */
export interface HerdLimits {
  dispatchAheadMs: number;
  dispatchAheadMinTimers: number;
  dispatchAheadTimersPerSecond: number;
  finishAheadDelayMs: number;
}

/** What herd planning reads of a timer. */
export type HerdTimer = Pick<LoadedTimer, 'fireAtMs' | 'spec' | 'dispatchedAhead'>;

/** The store operation that fires a timer taken out of the wheel. */
export type Firing = 'dispatch' | 'writeRunsAhead' | 'finishAhead';

/** Whether the timer belongs to a one-shot job (`at`), the only kind whose firing may be split. */
export function isOneShot(timer: Pick<LoadedTimer, 'spec'>): boolean {
  return 'at' in timer.spec.schedule;
}

/** The wheel tick a fire time falls in: a herd is counted per tick. */
export function tickOf(fireAtMs: number): number {
  return Math.floor(fireAtMs / wheelTickMs);
}

/** Whether the timer is wheeled early and counted into its tick's herd (`wheelAtMs`). */
export function wheelsEarly(timer: HerdTimer, limits: HerdLimits): boolean {
  return limits.dispatchAheadMs > 0 && timer.dispatchedAhead !== true && isOneShot(timer);
}

/**
 * How far ahead the `countInTick`-th one-shot timer of a tick is wheeled: `dispatchAheadMs`,
 * and a second more for each `dispatchAheadTimersPerSecond` of its tick already wheeled, up to
 * twice `dispatchAheadMs`. A herd is then dispatched in chunks, its latest-wheeled members
 * first, and written before workers leasing ahead reach it (limits.ts).
 */
export function herdLeadMs(countInTick: number, limits: HerdLimits): number {
  const extraMs = Math.floor(countInTick / limits.dispatchAheadTimersPerSecond) * 1_000;
  return limits.dispatchAheadMs + Math.min(extraMs, limits.dispatchAheadMs);
}

/**
 * When a timer comes out of the wheel: one wheeled early (`wheelsEarly`, `countInTick` its
 * place in its tick's herd, itself included) `herdLeadMs` before its fire time, at the start
 * of that wheel tick; one whose run was written ahead, `finishAheadDelayMs` after the end of
 * its fire time's tick, to finish; every other, at its fire time.
 */
export function wheelAtMs(timer: HerdTimer, countInTick: number, limits: HerdLimits): number {
  if (wheelsEarly(timer, limits)) {
    return Math.floor((timer.fireAtMs - herdLeadMs(countInTick, limits)) / wheelTickMs) * wheelTickMs;
  }
  return timer.dispatchedAhead === true ? finishAtMs(timer) + limits.finishAheadDelayMs : timer.fireAtMs;
}

/** The end of the timer's fire-time tick. */
function finishAtMs(timer: HerdTimer): number {
  return Math.ceil(timer.fireAtMs / wheelTickMs) * wheelTickMs;
}

/** A one-shot timer taken out of the wheel before its fire time, not written ahead yet. */
function isEarly(timer: HerdTimer, nowMs: number): boolean {
  return timer.dispatchedAhead !== true && isOneShot(timer) && timer.fireAtMs > nowMs;
}

/**
 * Work done ahead of a timer's time: writing a one-shot's run before its fire time, and
 * finishing one whose run was written so. A late pass over it delays no run; a timer firing
 * whole at its time is a run's dispatch.
 */
export function isEarlyWork(timer: HerdTimer, nowMs: number): boolean {
  return timer.dispatchedAhead === true || (isOneShot(timer) && timer.fireAtMs > nowMs);
}

/** The store operation for a timer taken out of the wheel at `nowMs`. */
export function firingOf(timer: HerdTimer, nowMs: number, limits: HerdLimits): Firing {
  if (timer.dispatchedAhead === true) return 'finishAhead';
  return limits.dispatchAheadMs > 0 && isEarly(timer, nowMs) ? 'writeRunsAhead' : 'dispatch';
}

/**
 * Splits the timers taken out of the wheel at `nowMs`: early ones are written ahead only as
 * part of a herd, at least `dispatchAheadMinTimers` wheeled for one tick of fire times
 * (counted over the tick, `countOf`, not over this pass: a big herd comes due in chunks). The
 * others go back into the wheel at their own fire time, to be fired whole then.
 */
export function splitStragglers<T extends HerdTimer>(taken: T[], nowMs: number, countOf: (fireAtMs: number) => number,
  limits: HerdLimits): { fire: T[]; backToFireTime: T[] } {
  if (limits.dispatchAheadMs === 0) return { fire: taken, backToFireTime: [] };
  const straggles = (timer: T): boolean => isEarly(timer, nowMs) && countOf(timer.fireAtMs) < limits.dispatchAheadMinTimers;
  if (!taken.some(straggles)) return { fire: taken, backToFireTime: [] };
  const fire: T[] = [];
  const backToFireTime: T[] = [];
  for (const timer of taken) (straggles(timer) ? backToFireTime : fire).push(timer);
  return { fire, backToFireTime };
}

/**
 * The size of each tick's herd so far: one-shot timers wheeled early, per wheel tick of their
 * fire time. A tick's count is dropped once its time has passed (`forgetBefore`).
 */
export class HerdTally {
  private readonly counts = new Map<number, number>();

  /** Counts one more timer into its tick's herd; answers its place there (1 for the first). */
  add(fireAtMs: number): number {
    const tick = tickOf(fireAtMs);
    const count = (this.counts.get(tick) ?? 0) + 1;
    this.counts.set(tick, count);
    return count;
  }

  countOf(fireAtMs: number): number {
    return this.counts.get(tickOf(fireAtMs)) ?? 0;
  }

  /** Drops the counts of ticks before `nowMs`'s: no timer of theirs is early any more. */
  forgetBefore(nowMs: number): void {
    const nowTick = tickOf(nowMs);
    for (const tick of this.counts.keys()) {
      if (tick < nowTick) this.counts.delete(tick);
    }
  }

  clear(): void {
    this.counts.clear();
  }
}
