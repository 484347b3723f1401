/**
 * A node's shutdown, in the order that keeps the promise: stop taking work, let the dispatch
 * in flight finish, hand back the shard leases so a successor starts at once, leave the
 * cluster, close the store. Each step goes on after a failure of the one before: on a full
 * disk the shard leases cannot be handed back (a successor then waits out their TTL), yet the
 * store must still close and the data directory's lock be released. Nothing acknowledged
 * depends on these writes, so a failure is logged and shutdown ends normally.
 */
import type { Logger } from '../obs/log.js';

export interface ShutdownStep {
  /** What the step does, as the log line names it when it fails. */
  what: string;
  run(): Promise<void> | void;
}

/** Runs the steps in order, once however often it is called; later calls answer the first's promise. */
export function shutdownInOrder(steps: readonly ShutdownStep[], logger: Logger, nodeId: string): () => Promise<void> {
  let closing: Promise<void> | null = null;
  return () => {
    closing ??= (async () => {
      for (const step of steps) {
        try {
          await step.run();
        } catch (error) {
          logger.error({ err: error, nodeId }, `shutdown: ${step.what} failed; going on`);
        }
      }
      logger.info({ nodeId }, 'tickler stopped');
      logger.flush();
    })();
    return closing;
  };
}
