/**
 * A node on the embedded store: the one process its data directory's lock lets in, so it
 * takes every shard, and needs no membership (the store's own, sqlite/membership.ts, would
 * list this node alone). A process that took the lock over from a dead one knows its
 * predecessor is gone: it takes the shards at once, and cuts the worker leases the dead
 * process granted (their answers may have died with it) to a third of a lease plus a margin.
 */
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Clock } from '../clock.js';
import { acquireDataDirLock } from '../data-dir-lock.js';
import { serverOrphanedLeaseMarginMs, sqliteDispatchBatchMax } from '../limits.js';
import type { Logger } from '../obs/log.js';
import { openSqliteStore } from '../store/sqlite/index.js';
import type { StoreWiring } from './store-wiring.js';

export async function openEmbeddedNode(path: string, options: { nearHorizonMs: number; clock: Clock; logger: Logger }):
  Promise<StoreWiring> {
  const { clock, logger } = options;
  const dataDir = resolve(path, '..');
  mkdirSync(dataDir, { recursive: true });
  const lock = acquireDataDirLock(dataDir);
  try {
    const store = await openSqliteStore({ path, nearHorizonMs: options.nearHorizonMs, logger });
    if (lock.tookOverFromDeadProcess) {
      const cut = store.shortenOrphanedLeases(clock.nowMs(), serverOrphanedLeaseMarginMs);
      if (cut > 0) {
        logger.warn({ leases: cut, marginMs: serverOrphanedLeaseMarginMs },
          'worker leases granted before the crash now expire a third of their lease (plus the margin) from now unless heartbeated');
      }
    }
    return {
      store,
      maintenance: null,
      join: async () => ({ store, forceFirstAcquire: lock.tookOverFromDeadProcess, dispatchBatchMax: sqliteDispatchBatchMax }),
      started: async () => undefined,
      leave: async () => undefined,
      close: async () => {
        try {
          await store.close();
        } finally {
          lock.release();
        }
      },
    };
  } catch (error) {
    lock.release();
    throw error;
  }
}
