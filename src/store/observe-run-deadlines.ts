/**
 * A Store wrapper (STYLE.md §2: retry, metrics and fault injection wrap the same interface)
 * that tells the local lease sweeper about each worker-lease deadline this process grants,
 * so that under the virtual clock an expiry happens at its exact instant without the sweeper
 * polling every second of a long advance.
 */
import type { Store } from './store.js';

export function observeRunDeadlines(store: Store, onDeadline: (atMs: number) => void): Store {
  return new Proxy(store, {
    get(target, property, receiver) {
      if (property === 'leaseRuns') {
        const leaseRuns: Store['leaseRuns'] = async (request) => {
          const runs = await target.leaseRuns(request);
          if (runs.length > 0) onDeadline(Math.min(...runs.map((run) => run.leaseExpiresAtMs)));
          return runs;
        };
        return leaseRuns;
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
