/**
 * In-process notifications of the embedded store: runs ready in a pool, near timers
 * written. Listeners are called after the commit that caused them, synchronously and in
 * the order they subscribed. A listener that throws is reported and does not stop the
 * others or fail the store operation that already committed.
 */
import type { LoadedTimer, StoreNotifications } from '../store.js';

export type ListenerErrorHandler = (error: unknown, channel: string) => void;

class ListenerSet<T> {
  private readonly listeners = new Set<(value: T) => void>();

  constructor(private readonly channel: string, private readonly onListenerError: ListenerErrorHandler) {}

  add(listener: (value: T) => void): () => void {
    // A wrapper per subscription, so one function subscribed twice is two subscriptions.
    const entry = (value: T): void => listener(value);
    this.listeners.add(entry);
    return () => {
      this.listeners.delete(entry);
    };
  }

  emit(value: T): void {
    for (const listener of this.listeners) {
      try {
        listener(value);
      } catch (error) {
        this.onListenerError(error, this.channel);
      }
    }
  }

  get size(): number {
    return this.listeners.size;
  }
}

export class Notifier implements StoreNotifications {
  private readonly runsReady: ListenerSet<string>;
  private readonly nearTimers: ListenerSet<LoadedTimer[]>;

  constructor(onListenerError: ListenerErrorHandler) {
    this.runsReady = new ListenerSet('runs_ready', onListenerError);
    this.nearTimers = new ListenerSet('near_timers', onListenerError);
  }

  onRunsReady(listener: (pool: string) => void): () => void {
    return this.runsReady.add(listener);
  }

  onNearTimers(listener: (timers: LoadedTimer[]) => void): () => void {
    return this.nearTimers.add(listener);
  }

  /** Never: announcements are in-process, after the commit that wrote the timers. */
  onNearTimersMissed(_listener: () => void): () => void {
    return () => undefined;
  }

  emitRunsReady(pools: Iterable<string>): void {
    for (const pool of new Set(pools)) this.runsReady.emit(pool);
  }

  emitNearTimers(timers: LoadedTimer[]): void {
    if (timers.length > 0) this.nearTimers.emit(timers);
  }

  /** Lets writers skip building LoadedTimer objects nobody will read. */
  get wantsNearTimers(): boolean {
    return this.nearTimers.size > 0;
  }
}
