/**
 * Workers that lease, heartbeat and complete straight through tickler's PostgreSQL store,
 * without the HTTP hop through a tickler server: graphile-worker's and pg-boss's shape,
 * for workers trusted with the database's credentials.
 *
 * It is the server's own worker path, run in the worker's process: the same `LeaseWaiters`
 * (long-poll, woken by the store's `LISTEN/NOTIFY` when any node dispatches runs of the
 * pool), the same `RunService` (fencing, retries, the DLQ, a run event per change) and the
 * same item checks as `POST /v1/runs:complete` and `/v1/runs:heartbeat`. Nothing of DESIGN.md
 * changes: the store fences every heartbeat and completion by the attempt's token
 * (invariant 4) and appends every run event (invariant 6) whoever calls it; a lease this
 * process grants and then abandons is re-offered by the scheduler's lease sweep, which reads
 * every node's leases from the database. What it saves is the server's and the SDK's HTTP
 * work per run: a W3 drain on PostgreSQL costs the two Node processes ~71 us of CPU per run
 * over HTTP (docs/benchmarks-peers.md), and the store's calls alone ~10.
 *
 * Differences a user sees: the worker's process holds PostgreSQL connections (up to
 * `poolSize`, plus one for LISTEN); its attempt and stale-token counters are in this
 * object's `metrics` registry, not the server's `/metrics`; and it is not scoped by an API
 * key: `team` (default: every team) is the only scope.
 */
import { Compile } from 'typebox/compile';
import { completeItems, heartbeatItems, leaseWaitRequestOf, type BatchSink } from '../api/worker-calls.js';
import { schemaIssueToError, toTicklerError } from '../api/http-errors.js';
import { checkId } from '../api/route-helpers.js';
import { CompleteBody, HeartbeatBody, LeaseBody } from '../api/schemas.js';
import { iso, leasedRunToWire, runToWire } from '../api/wire.js';
import { SystemClock, type Clock } from '../clock.js';
import { TicklerError } from '../errors.js';
import * as limits from '../limits.js';
import { silentLogger, type Logger } from '../obs/log.js';
import { Metrics } from '../obs/metrics.js';
import { LeaseWaiters } from '../service/lease-waiters.js';
import { LeasePlanner } from '../service/lease-planner.js';
import { RunService } from '../service/run-service.js';
import type { TeamScope } from '../store/store.js';
import { openPostgresStore, type PostgresStore } from '../store/postgres/index.js';
import type { RequestOptions } from '../worker/client.js';
import { TicklerApiError } from '../worker/errors.js';
import type { WorkerApi } from '../worker/worker-api.js';
import type {
  CompleteBatchItem, CompleteBatchStatusResult, CompleteRequest, HeartbeatBatchItem, HeartbeatBatchResult, ItemError, LeasedRun,
  LeaseRequest,
} from '../worker/wire.js';

const checkLeaseBody = Compile(LeaseBody);
const checkCompleteBody = Compile(CompleteBody);
const checkHeartbeatBody = Compile(HeartbeatBody);

/** Connections a worker keeps; a lease and a completion in flight at once need two. */
const poolSizeDefault = 4;

export interface PostgresWorkerApiOptions {
  /** The database the tickler servers use (`--store` / `TICKLER_STORE` of `tickler serve`). */
  url: string;
  /** Their schema; default `public`. */
  schema?: string;
  /** Lease and complete runs of this team only; default every team (an admin key's scope). */
  team?: string | null;
  poolSize?: number;
  /** Stamps leases, heartbeats and completions; tests pass the servers' VirtualClock. */
  clock?: Clock;
  logger?: Logger;
}

/** Opens a connection pool to tickler's store (migrating it if it is behind, as a server would). */
export async function openPostgresWorkerApi(options: PostgresWorkerApiOptions): Promise<PostgresWorkerApi> {
  const logger = options.logger ?? silentLogger();
  const store = await openPostgresStore({
    url: options.url,
    ...(options.schema === undefined ? {} : { schema: options.schema }),
    poolSize: options.poolSize ?? poolSizeDefault,
    logger,
    // Granted by no server: a server's death must not cut this worker's leases.
    leaseNodeId: null,
  });
  return new PostgresWorkerApi(store, options.team ?? null, options.clock ?? new SystemClock(), logger);
}

export class PostgresWorkerApi implements WorkerApi {
  /** Attempts and stale tokens this process recorded (the server counts those it served). */
  readonly metrics = new Metrics();
  private readonly runs: RunService;
  /** Where a batch's failed items are logged and counted. */
  private readonly sink: BatchSink;
  private readonly waiters: LeaseWaiters;
  private readonly leasing = new Set<Promise<unknown>>();

  constructor(private readonly store: PostgresStore, private readonly scope: TeamScope, clock: Clock, logger: Logger) {
    this.sink = { log: logger, metrics: this.metrics };
    this.runs = new RunService({ store, clock, metrics: this.metrics, logger, resultBytesMax: limits.resultBytesMax });
    // Leases shaped as the API node shapes them (lanes, teams, dispatch caps).
    this.waiters = new LeaseWaiters(new LeasePlanner({ store, clock, metrics: this.metrics, logger }).store, clock, logger);
  }

  async leaseRuns(body: LeaseRequest, options?: RequestOptions): Promise<{ runs: LeasedRun[] }> {
    if (!checkLeaseBody.Check(body)) throw apiErrorOf(schemaIssueToError(checkLeaseBody.Errors(body)));
    const leasing = answering(() => this.waiters.lease(leaseWaitRequestOf(body, this.scope, options?.signal)));
    // A lease takes a few statements (its plan, then the lease): close lets the ones begun end first.
    this.leasing.add(leasing);
    try {
      return { runs: (await leasing).map(leasedRunToWire) };
    } finally {
      this.leasing.delete(leasing);
    }
  }

  heartbeat(runId: string, fencingToken: string): Promise<{ lease_expires_at: string }> {
    const body = { fencing_token: fencingToken };
    if (!checkHeartbeatBody.Check(body)) throw apiErrorOf(schemaIssueToError(checkHeartbeatBody.Errors(body)));
    return answering(async () => ({
      lease_expires_at: iso(await this.runs.heartbeat(this.scope, checkId(runId, 'run'), fencingToken)),
    }));
  }

  completeRun(runId: string, body: CompleteRequest): Promise<unknown> {
    if (!checkCompleteBody.Check(body)) throw apiErrorOf(schemaIssueToError(checkCompleteBody.Errors(body)));
    return answering(async () => runToWire(await this.runs.complete(this.scope, checkId(runId, 'run'), {
      fencingToken: body.fencing_token, status: body.status, error: body.error ?? null, result: body.result ?? null,
    })));
  }

  completeRuns(completions: CompleteBatchItem[]): Promise<{ results: { status: number; error?: ItemError }[] }> {
    return this.complete(completions, true);
  }

  completeRunsBriefly(completions: CompleteBatchItem[]): Promise<{ results: CompleteBatchStatusResult[] }> {
    return this.complete(completions, false);
  }

  async heartbeatRuns(heartbeats: HeartbeatBatchItem[]): Promise<{ results: HeartbeatBatchResult[] }> {
    checkBatchSize(heartbeats.length, 'heartbeats');
    return { results: await heartbeatItems(this.runs, this.scope, heartbeats, this.sink) as HeartbeatBatchResult[] };
  }

  /** Lease requests waiting for runs (`wait_s`); for tests and a worker's own metrics. */
  parkedLeaseCount(): number {
    return this.waiters.waitingCount();
  }

  /** Answers parked leases with no runs and closes the connections. */
  async close(): Promise<void> {
    this.waiters.close();
    await Promise.allSettled([...this.leasing]);
    await this.store.close();
  }

  private async complete(completions: CompleteBatchItem[], wantRuns: boolean):
    Promise<{ results: CompleteBatchStatusResult[] }> {
    checkBatchSize(completions.length, 'completions');
    return { results: await completeItems(this.runs, this.scope, completions, wantRuns, this.sink) as CompleteBatchStatusResult[] };
  }
}

/** The batch routes' bound (`minItems` 1, `maxItems` leaseBatchMax), checked before any item. */
function checkBatchSize(count: number, field: string): void {
  if (count < 1 || count > limits.leaseBatchMax) {
    throw apiErrorOf(new TicklerError('invalid_request', `${field} must hold 1 to ${limits.leaseBatchMax} items, got ${count}`,
      { field }));
  }
}

/** The call's answer, or its error as the `TicklerApiError` the HTTP route's answer would have made. */
async function answering<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    const known = toTicklerError(error);
    throw known === null ? error : apiErrorOf(known);
  }
}

function apiErrorOf(error: TicklerError): TicklerApiError {
  return new TicklerApiError({
    status: error.status, code: error.code, message: error.message, cause: error,
    ...(error.field === undefined ? {} : { field: error.field }),
  });
}
