/**
 * How a worker answers a failed lease request: stop, for a refusal waiting cannot heal
 * (`unhealableLeaseError`), or back off and try again (`leaseErrorBackoffMs`). Pure: the lease
 * loop (lease-loop.ts) applies them.
 */
import { FatalError } from '../fatal-error.js';
import { workerLeaseBackoffMsBase, workerLeaseBackoffMsMax, workerRefusedBackoffMsMax } from '../limits.js';
import { TicklerApiError } from './errors.js';

/**
 * Lease answers that waiting cannot heal, because the worker would send the same request
 * again: the API key refused (401) or not allowed (403), the request itself refused (400, 405,
 * 413, 415, 422). No answer at all, 404 (a proxy with no server behind it yet answers it too),
 * 408, 429 and 5xx may heal, and are retried.
 */
const unhealableLeaseStatuses = new Set([400, 401, 403, 405, 413, 415, 422]);

/** The error that stops a worker whose lease got `error`, or undefined when it may heal. */
export function unhealableLeaseError(error: unknown, pool: string): FatalError | undefined {
  if (!(error instanceof TicklerApiError) || !unhealableLeaseStatuses.has(error.status)) return undefined;
  const field = error.field === undefined ? '' : ` (field ${error.field})`;
  const advice = error.status === 401 ? 'give it an API key the server accepts (tickler worker: --api-key or TICKLER_API_KEY)'
    : error.status === 403 ? 'give it a key allowed to lease this pool'
      : 'correct its options or its server URL';
  return new FatalError(`lease requests for pool ${JSON.stringify(pool)} are refused (${error.status} ${error.code}: ` +
    `${error.message}${field}); repeating them cannot help, so the worker stops: ${advice}`, { cause: error });
}

/** Whether a request failed because the connection was refused (ECONNREFUSED anywhere in its causes). */
export function connectionRefused(error: unknown): boolean {
  for (let cause = error, depth = 0; cause instanceof Error && depth < 5; cause = cause.cause, depth++) {
    if ((cause as NodeJS.ErrnoException).code === 'ECONNREFUSED') return true;
  }
  return false;
}

/**
 * Backoff after the n-th consecutive lease error: 100 ms doubling to 2 s (to 200 ms while the
 * connection is refused), ×0.5–1.5 jitter; Retry-After wins.
 */
export function leaseErrorBackoffMs(
  consecutiveErrors: number, random: () => number, retryAfterS?: number, refused = false,
): number {
  const capMs = refused ? workerRefusedBackoffMsMax : workerLeaseBackoffMsMax;
  const exponentialMs = Math.min(workerLeaseBackoffMsBase * 2 ** Math.max(0, consecutiveErrors - 1), capMs);
  const jitteredMs = exponentialMs * (0.5 + random());
  return retryAfterS === undefined ? jitteredMs : Math.max(jitteredMs, retryAfterS * 1_000);
}
