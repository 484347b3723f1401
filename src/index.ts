/**
 * The tickler package entry: the worker SDK and the typed API client. The server is
 * started through the `tickler serve` command (src/cli), not from here.
 */
export { TicklerClient, type TicklerClientOptions, type RequestOptions } from './worker/client.js';
export type { WorkerApi } from './worker/worker-api.js';
export type { PostgresWorkerApi, PostgresWorkerApiOptions } from './direct-worker/postgres-direct.js';
export { openPostgresWorkerApi } from './direct-worker/open-postgres-worker-api.js';
export { createWorker, leaseErrorBackoffMs, type Worker, type WorkerOptions } from './worker/worker.js';
export {
  LeaseLostError,
  type HandlerContext,
  type RunHandler,
  type WorkerLogger,
  type WorkerRun,
} from './worker/run-attempt.js';
export { PermanentError, TicklerApiError, TicklerNetworkError, isTicklerApiError } from './worker/errors.js';
export { FatalError, isFatalError } from './fatal-error.js';
export type * from './worker/wire.js';
