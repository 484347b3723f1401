/**
 * A node (re)started while PostgreSQL restarts should come up when the database does, not
 * exit: the store's open and the cluster's join are retried while they fail `unavailable`.
 */
import { isTicklerError } from '../errors.js';
import { serverDatabaseRetryDelayMsBase, serverDatabaseRetryDelayMsMax, serverDatabaseWaitAtStartMs } from '../limits.js';
import type { Logger } from '../obs/log.js';

/**
 * Calls `open` until it does not fail with `unavailable`, for up to `serverDatabaseWaitAtStartMs`
 * of backoff. Real-time waits on purpose (as the notifier's reconnects): this is I/O
 * plumbing, and a virtual clock standing still must not keep a node from starting.
 */
export async function whenDatabaseAnswers<T>(what: string, logger: Logger, open: () => Promise<T>): Promise<T> {
  let waitedMs = 0;
  for (let attempt = 1; ; attempt++) {
    try {
      return await open();
    } catch (error) {
      if (!isTicklerError(error) || error.code !== 'unavailable' || waitedMs >= serverDatabaseWaitAtStartMs) throw error;
      const delayMs = Math.min(serverDatabaseRetryDelayMsMax, serverDatabaseRetryDelayMsBase * 2 ** attempt);
      logger.warn({ err: error, attempt, retryInMs: delayMs }, `${what}: the database does not answer; trying again`);
      await new Promise((resolveDelay) => setTimeout(resolveDelay, delayMs));
      waitedMs += delayMs;
    }
  }
}
