/**
 * One simulated node's clock over the simulation's VirtualClock. Its wall time may be stepped
 * forward or back (an NTP step); its monotonic time is the simulation's. While the node is
 * frozen (the zombie: a process stopped past its shard lease) its timers wait and run when it
 * thaws; once it has crashed they never run.
 *
 * Callbacks are started, not awaited: the VirtualClock awaits each of its own callbacks, and a
 * node's work may wait for later virtual time (a slow commit, a frozen node's gate), which
 * would stall the advance that has to bring that time. A real clock does not await them either.
 */
import type { Clock, TimerCallback, TimerHandle, VirtualClock } from '../src/clock.js';

export class NodeClock implements Clock {
  readonly isVirtual = true;
  /** Wall-clock step: this node's nowMs() is the simulation's plus this. */
  offsetMs = 0;
  private frozen = false;
  private dead = false;
  private readonly deferred: TimerCallback[] = [];

  constructor(private readonly base: VirtualClock, private readonly onError: (error: unknown) => void) {}

  nowMs(): number {
    return this.base.nowMs() + this.offsetMs;
  }

  monotonicMs(): number {
    return this.base.monotonicMs();
  }

  advancingToMs(): number | null {
    const target = this.base.advancingToMs();
    return target === null ? null : target + this.offsetMs;
  }

  setTimer(atMs: number, callback: TimerCallback): TimerHandle {
    let cancelled = false;
    let handle: TimerHandle | null = null;
    const arm = (): void => {
      // Like a real timer: the delay is fixed when armed, whatever the wall clock does after.
      handle = this.base.setTimer(this.base.nowMs() + Math.max(0, atMs - this.nowMs()), () => {
        if (cancelled || this.dead) return;
        if (this.nowMs() < atMs) {
          arm(); // the wall clock stepped back meanwhile: never before its time (SystemClock does the same)
          return;
        }
        if (this.frozen) this.deferred.push(callback);
        else this.start(callback);
      });
    };
    arm();
    return {
      cancel: () => {
        cancelled = true;
        handle?.cancel();
      },
    };
  }

  freeze(): void {
    this.frozen = true;
  }

  thaw(): void {
    this.frozen = false;
    for (const callback of this.deferred.splice(0)) this.start(callback);
  }

  kill(): void {
    this.dead = true;
    this.deferred.length = 0;
  }

  private start(callback: TimerCallback): void {
    try {
      const result = callback();
      if (result instanceof Promise) result.catch(this.onError);
    } catch (error) {
      this.onError(error);
    }
  }
}
