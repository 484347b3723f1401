/**
 * Runs a store's periodic upkeep (PostgreSQL: timer partitions created ahead, past empty ones
 * dropped) at start and every `serverPartitionMaintenanceIntervalMs` on the node's clock; a
 * failure is logged and retried at the next interval.
 */
import type { Clock, TimerHandle } from '../clock.js';
import { serverPartitionMaintenanceIntervalMs } from '../limits.js';
import type { Logger } from '../obs/log.js';

export function startPeriodicMaintenance(maintain: ((nowMs: number) => Promise<unknown>) | null, clock: Clock, logger: Logger):
  { stop(): void } {
  if (maintain === null) return { stop: () => undefined };
  let stopped = false;
  let handle: TimerHandle = clock.setTimer(clock.nowMs(), async function run(): Promise<void> {
    try {
      await maintain(clock.nowMs());
    } catch (error) {
      logger.error({ err: error }, 'timer partition maintenance failed; retrying at the next interval');
    }
    if (!stopped) handle = clock.setTimer(clock.nowMs() + serverPartitionMaintenanceIntervalMs, run);
  });
  return {
    stop: () => {
      stopped = true;
      handle.cancel();
    },
  };
}
