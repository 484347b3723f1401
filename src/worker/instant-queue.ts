/**
 * Items due at instants, fired in time order (in the order they were added within an
 * instant) from one clock timer, armed for the earliest instant. Made for the runs a worker
 * holds for their ready time (`leaseAheadMs`): thousands of them, due over seconds, each at
 * its exact millisecond.
 *
 * Held runs live for seconds, so each one's bookkeeping survives the young generation's
 * collections and is copied by them, and those pauses are fire lag for the runs due
 * meanwhile. A clock timer per instant (GroupedTimers) cost a `Timeout`, its closures, a
 * `Set` and a group object per millisecond of due times: on bench:peers W2's shape (2 runs
 * a millisecond, 8 s ahead) about 6 MB of the 31 MB the worker held (heap snapshot,
 * bench/probes/lag-stages.ts). Here an instant costs a small array, a map entry and a slot of a
 * heap of numbers; an item, one array slot. There is no `delete`: a held run leaves only
 * when it starts, or when the worker lets go of everything (`fireAll`).
 */
import type { Clock, TimerHandle } from '../clock.js';

export class InstantQueue<T> {
  private readonly buckets = new Map<number, T[]>();
  /** The instants of `buckets`, a binary min-heap. */
  private readonly instants: number[] = [];
  private timer: TimerHandle | undefined;
  private timerAtMs = Number.POSITIVE_INFINITY;
  private itemCount = 0;

  /** `fire` runs for each item when its instant comes; a clock that awaits timers awaits them all. */
  constructor(private readonly clock: Clock, private readonly fire: (item: T) => unknown) {}

  /** Items waiting. */
  get size(): number {
    return this.itemCount;
  }

  /** Clock timers armed (0 or 1); for tests. */
  get timerCount(): number {
    return this.timer === undefined ? 0 : 1;
  }

  add(atMs: number, item: T): void {
    this.itemCount++;
    const bucket = this.buckets.get(atMs);
    if (bucket !== undefined) {
      bucket.push(item);
      return;
    }
    this.buckets.set(atMs, [item]);
    heapPush(this.instants, atMs);
    if (atMs < this.timerAtMs) this.arm(atMs);
  }

  /** Fires every item now, whatever its instant (a worker letting go of what it holds). */
  async fireAll(): Promise<void> {
    this.disarm();
    await this.fireThrough(Number.POSITIVE_INFINITY);
  }

  private arm(atMs: number): void {
    this.timer?.cancel();
    this.timerAtMs = atMs;
    this.timer = this.clock.setTimer(atMs, () => this.onTimer());
  }

  private disarm(): void {
    this.timer?.cancel();
    this.timer = undefined;
    this.timerAtMs = Number.POSITIVE_INFINITY;
  }

  private onTimer(): Promise<void> | undefined {
    this.timer = undefined;
    this.timerAtMs = Number.POSITIVE_INFINITY;
    const fired = this.fireThrough(this.clock.nowMs());
    const nextAtMs = this.instants[0];
    if (nextAtMs !== undefined && nextAtMs < this.timerAtMs) this.arm(nextAtMs);
    return fired;
  }

  /** Fires the items of every instant up to `untilMs`, earliest first; awaits any that return a promise. */
  private fireThrough(untilMs: number): Promise<void> | undefined {
    let pending: Promise<unknown>[] | undefined;
    while (this.instants.length > 0 && this.instants[0]! <= untilMs) {
      const atMs = heapPop(this.instants);
      const bucket = this.buckets.get(atMs)!;
      this.buckets.delete(atMs);
      this.itemCount -= bucket.length;
      for (const item of bucket) {
        const result = this.fire(item);
        if (result instanceof Promise) (pending ??= []).push(result);
      }
    }
    return pending === undefined ? undefined : Promise.all(pending).then(() => undefined);
  }
}

function heapPush(heap: number[], value: number): void {
  let index = heap.length;
  heap.push(value);
  while (index > 0) {
    const parent = (index - 1) >> 1;
    if (heap[parent]! <= value) break;
    heap[index] = heap[parent]!;
    index = parent;
  }
  heap[index] = value;
}

function heapPop(heap: number[]): number {
  const top = heap[0]!;
  const last = heap.pop()!;
  if (heap.length === 0) return top;
  let index = 0;
  for (;;) {
    const left = 2 * index + 1;
    if (left >= heap.length) break;
    const right = left + 1;
    const child = right < heap.length && heap[right]! < heap[left]! ? right : left;
    if (heap[child]! >= last) break;
    heap[index] = heap[child]!;
    index = child;
  }
  heap[index] = last;
  return top;
}
