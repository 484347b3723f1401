/**
 * A fault-injection Store wrapper (STYLE.md §2) for the chaos test: the zombie scheduler.
 *
 * A node paused past its lease TTL (GC pause, SIGSTOP) almost always wakes up *before* its
 * local lease check and fires nothing, which is good, but leaves the second fence — the token
 * check at the sink (invariant 2) — unexercised. The dangerous pause is the one that lands
 * between that check and the write. This wrapper makes it happen on purpose: once armed by a
 * signal, the next firing call (`dispatch`, `writeRunsAhead` or `finishAhead`) stops the whole
 * process (SIGSTOP to itself) after the dispatcher has checked its leases and before the store
 * sees the batch. When the harness
 * sends SIGCONT, the batch reaches the sink with the old token and must be rejected.
 *
 * Enabled only when `TICKLER_CHAOS_PAUSE_SIGNAL` names a signal (see server.ts); without a
 * handler that signal would kill the process, so nothing else sends it.
 */
import type { Clock } from '../../clock.js';
import type { Logger } from '../../obs/log.js';
import type { Store } from '../store.js';

/**
 * An arming not used within this long lapses: a harness that gave up waiting and stopped the
 * node by hand must not have it stop itself again after SIGCONT.
 */
export const pauseArmWindowMs = 3_000;

export function pauseBeforeDispatchOnSignal(store: Store, options: {
  signal: NodeJS.Signals; clock: Clock; logger: Logger;
}): { store: Store; detach(): void } {
  const { clock, logger } = options;
  let armedUntilMonotonicMs = -Infinity;
  const arm = (): void => {
    armedUntilMonotonicMs = clock.monotonicMs() + pauseArmWindowMs;
    logger.warn({ signal: options.signal }, 'fault hook: the next dispatch stops this process (chaos zombie)');
  };
  process.on(options.signal, arm);
  const pauseIfArmed = (count: number): void => {
    if (count > 0 && clock.monotonicMs() < armedUntilMonotonicMs) {
      armedUntilMonotonicMs = -Infinity;
      logger.warn({ items: count }, 'fault hook: stopping before a dispatch');
      logger.flush();
      process.kill(process.pid, 'SIGSTOP');
    }
  };
  // Every operation that fires timers under a shard token: a whole dispatch, and a herd's
  // runs written ahead or finished.
  const firing: Pick<Store, 'dispatch' | 'writeRunsAhead' | 'finishAhead'> = {
    dispatch: (items, nowMs) => {
      pauseIfArmed(items.length);
      return store.dispatch(items, nowMs);
    },
    writeRunsAhead: (items, nowMs) => {
      pauseIfArmed(items.length);
      return store.writeRunsAhead(items, nowMs);
    },
    finishAhead: (items, nowMs) => {
      pauseIfArmed(items.length);
      return store.finishAhead(items, nowMs);
    },
  };
  const wrapped = new Proxy(store, {
    get(target, property, receiver) {
      if (property === 'dispatch' || property === 'writeRunsAhead' || property === 'finishAhead') return firing[property];
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { store: wrapped, detach: () => process.removeListener(options.signal, arm) };
}
