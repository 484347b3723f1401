/**
 * Timers for many items on one clock timer per instant. A worker's heartbeats come due in
 * groups (the runs of one lease answer all beat a third of a lease after it); a herd of 50,000
 * held runs armed and cancelled a `setTimeout` each: ~1 KB per run (bench/probes/worker-herd-cost.ts).
 * Due times keep their exact millisecond; items at one instant fire in insertion order. The
 * runs a worker holds for their ready time, spread over many instants and never deleted, are
 * kept by an InstantQueue instead (instant-queue.ts).
 */
import type { Clock, TimerHandle } from '../clock.js';

export class GroupedTimers<T> {
  private readonly groups = new Map<number, { items: Set<T>; timer: TimerHandle }>();

  /** `fire` runs for each item whose instant came; a clock that awaits timers awaits them all. */
  constructor(private readonly clock: Clock, private readonly fire: (item: T) => unknown) {}

  add(atMs: number, item: T): void {
    let group = this.groups.get(atMs);
    if (group === undefined) {
      group = { items: new Set<T>(), timer: this.clock.setTimer(atMs, () => this.fireGroup(atMs)) };
      this.groups.set(atMs, group);
    }
    group.items.add(item);
  }

  /** Forgets `item` at `atMs` (nothing if it fired already); the instant's timer goes with its last item. */
  delete(atMs: number, item: T): void {
    const group = this.groups.get(atMs);
    if (group === undefined || !group.items.delete(item)) return;
    if (group.items.size > 0) return;
    group.timer.cancel();
    this.groups.delete(atMs);
  }

  /** Fires every item now, whatever its instant (a worker letting go of what it holds). */
  async fireAll(): Promise<void> {
    await Promise.all([...this.groups.keys()].map((atMs) => this.fireGroup(atMs)));
  }

  /** Instants armed; for tests. */
  get instantCount(): number {
    return this.groups.size;
  }

  private async fireGroup(atMs: number): Promise<void> {
    const group = this.groups.get(atMs);
    if (group === undefined) return;
    group.timer.cancel();
    this.groups.delete(atMs);
    const pending: unknown[] = [];
    for (const item of group.items) {
      const result = this.fire(item);
      if (result instanceof Promise) pending.push(result);
    }
    if (pending.length > 0) await Promise.all(pending);
  }
}
