/**
 * Connections to PostgreSQL: the pool, the mapping of connection-level failures to
 * `TicklerError('unavailable')` (the API answers 503, not a hang and not a 500), and the
 * one transaction helper every multi-statement operation goes through. Notifications a
 * transaction wants to send are collected on its `Transaction` and sent with `pg_notify`
 * just before COMMIT, so PostgreSQL delivers them only if the transaction commits.
 */
import { createHash } from 'node:crypto';
import { userInfo } from 'node:os';
import pg from 'pg';
import type { Logger } from '../../obs/log.js';
import { TicklerError, isTicklerError } from '../../errors.js';
import type { LoadedTimer } from '../store.js';

/** A connection attempt gives up after this long; an outage must answer fast (`503 unavailable`). */
export const connectTimeoutMs = 2_000;
/**
 * A call waits this long for a pooled connection when all are busy. pg-pool uses one
 * setting for both waits; a burst of a thousand calls queued behind ten connections must
 * not read as an outage, so the connect timeout is set apart on the client class below.
 */
export const poolAcquireTimeoutMs = 10_000;
/** No statement of the store should run this long; one that does is treated as an outage. */
export const statementTimeoutMs = 15_000;
/**
 * The client gives up on a reply after this long: the backstop for a server that is
 * frozen or cut off without a reset, where the server-side statement_timeout cannot act.
 */
export const queryTimeoutMs = statementTimeoutMs + 5_000;
/**
 * A session idle inside a transaction this long is killed by the server. Short on purpose:
 * a node paused mid-dispatch (GC pause, SIGSTOP) holds its shard rows FOR KEY SHARE, and no one
 * can take those shards over until its transaction ends; the chaos run showed takeovers
 * waiting for the zombie to wake up at 30 s. Our transactions never wait on the client
 * between statements for more than a few milliseconds, and one that is killed is rolled
 * back whole, which at-least-once dispatch tolerates.
 */
export const idleInTransactionTimeoutMs = 1_500;
export const poolSizeDefault = 10;

const int8Oid = 20;
const numericOid = 1700;

/**
 * Epoch milliseconds and counters are bigint columns; they stay below 2^53, so they are
 * parsed as numbers. Tokens are bigint too but are always selected as `::text`.
 */
const typeParsers = {
  getTypeParser(oid: number, format?: 'text' | 'binary'): (value: string) => unknown {
    if (oid === int8Oid || oid === numericOid) return (value: string) => Number(value);
    return pg.types.getTypeParser(oid, format ?? 'text') as (value: string) => unknown;
  },
};

export interface PoolOptions {
  url: string;
  schema: string;
  poolSize: number;
  logger: Logger;
}

export function quoteIdentifier(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * libpq connects as the operating-system user when the URL names none; node-postgres only
 * looks at $PGUSER and $USER, which a service manager may leave unset. Do as libpq does.
 */
export function withDefaultUser(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch (error) {
    throw new TicklerError('invalid_request', 'the PostgreSQL store URL is not a URL', { cause: error });
  }
  if (parsed.username !== '' || process.env['PGUSER'] || process.env['USER']) return url;
  parsed.username = encodeURIComponent(userInfo().username);
  return parsed.toString();
}

/**
 * JIT is off on the store's connections. Every statement here reads a few rows by key, and
 * JIT is chosen by estimated cost: with statistics behind the tables (a bulk create, a schema
 * analyzed empty) a 2 ms read was costed high enough to be compiled, 407 ms of its 500
 * (bench/probes/pg-plan-audit.ts, findSilentJobs). PostgreSQL 15 has JIT on by default.
 */
const sessionSettings = '-c jit=off';

export function connectionConfig(url: string, schema: string): pg.ClientConfig {
  return {
    connectionString: withDefaultUser(url),
    connectionTimeoutMillis: connectTimeoutMs,
    statement_timeout: statementTimeoutMs,
    query_timeout: queryTimeoutMs,
    idle_in_transaction_session_timeout: idleInTransactionTimeoutMs,
    keepAlive: true,
    options: `-c search_path=${quoteIdentifier(schema)} ${sessionSettings}`,
    types: typeParsers,
  };
}

/** A client whose own connection attempt is bounded by `connectTimeoutMs`, whatever the pool says. */
class BoundedConnectClient extends pg.Client {
  constructor(config: pg.ClientConfig) {
    super({ ...config, connectionTimeoutMillis: connectTimeoutMs });
  }
}

export function createPool(options: PoolOptions): pg.Pool {
  const pool = new pg.Pool({
    ...connectionConfig(options.url, options.schema),
    connectionTimeoutMillis: poolAcquireTimeoutMs,
    max: options.poolSize,
    // @types/pg declares a constructor without arguments; pg-pool passes the pool's options.
    Client: BoundedConnectClient as unknown as new () => pg.ClientBase,
  });
  // An idle client whose server went away emits 'error' on the pool; unhandled, it would
  // crash the process. The pool discards that client and the next query reconnects.
  pool.on('error', (error) => {
    options.logger.warn({ err: error }, 'postgres: idle pool client failed; it will be replaced');
  });
  return pool;
}

/**
 * SQLSTATE codes that mean "the database cannot serve this right now; try again": shutdown
 * and restarts, too many connections, a statement or lock timeout, a session the server
 * ended for idling inside a transaction (25P03: a node starved of CPU between two statements
 * of a batch create; the transaction is rolled back whole) or outside one (57P05), and the
 * deadlock and serialization failures PostgreSQL resolves by aborting one side (none is
 * expected, as lock orders are fixed, but one must answer 503 rather than 500).
 */
const unavailableSqlStates = new Set([
  '57P01', '57P02', '57P03', '57P05', '53300', '57014', '55P03', '25P03', '40P01', '40001',
]);
const unavailableNodeCodes = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN',
]);
const unavailableMessages = [
  'timeout exceeded when trying to connect',
  'Connection terminated',
  'connection error',
  'not queryable',
  'Cannot use a pool after calling end',
  'Query read timeout',
];

export function isUnavailableError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (code.startsWith('08') || unavailableSqlStates.has(code) || unavailableNodeCodes.has(code)) return true;
  }
  return unavailableMessages.some((text) => error.message.includes(text));
}

/** PostgreSQL text cannot hold NUL (SQLite can): input carrying one is refused, not a 500. */
const unstorableTextSqlStates = new Set(['22021', '22P05']);

/**
 * Rethrows connection-level failures as `unavailable` and unstorable text as
 * `invalid_request`; anything else is a bug and stays as is.
 */
export function mapStoreError(error: unknown, operation: string): never {
  if (isTicklerError(error)) throw error;
  if (isUnavailableError(error)) {
    throw new TicklerError('unavailable', `the PostgreSQL store is unreachable (${operation})`, { cause: error });
  }
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && unstorableTextSqlStates.has(code)) {
    throw new TicklerError('invalid_request', 'text with a NUL character cannot be stored', { cause: error });
  }
  throw error;
}

export type Queryable = Pick<pg.PoolClient, 'query'>;

/**
 * A statement of the hot path (dispatch, lease, completion), run as a named prepared
 * statement: each connection parses and plans it once and then only executes it. Planning
 * the worker lease took about 0.27 ms per statement, as long as executing it for 3–4 runs
 * (EXPLAIN ANALYZE, 2026-11-29); with the hot path prepared, a micro-benchmark of dispatch,
 * lease and completion in batches of 50, 10 and 50 used about a third less PostgreSQL CPU.
 *
 * From its sixth execution on a connection PostgreSQL may keep one generic plan for the
 * statement, built without the parameters' values and on the table sizes of that moment.
 * Only statements whose generic plan is an index probe are prepared (key lookups, `=
 * ANY(array)` of a key, inserts from `unnest`), and those that run inside a transaction get
 * `enable_seqscan = off` there (see `beginSql`). `autocommit` marks one that runs alone,
 * whose generic plan must be an index scan under the default settings.
 */
export interface PreparedStatement {
  readonly name: string;
  readonly text: string;
  readonly autocommit: boolean;
}

const preparedRegistry: PreparedStatement[] = [];

/** Names the statement after its text, so the same text is one prepared statement per connection. */
export function prepared(text: string, options: { autocommit?: boolean } = {}): PreparedStatement {
  const name = `tk_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
  const statement = { name, text, autocommit: options.autocommit ?? false };
  preparedRegistry.push(statement);
  return statement;
}

/** Every prepared statement of the modules loaded so far; the plan test checks their generic plans. */
export function preparedStatements(): readonly PreparedStatement[] {
  return preparedRegistry;
}

export type StatementText = string | PreparedStatement;

/** `text` with its parameters $1, $2, ... renumbered from $(by + 1), to stand beside another statement's. */
export function parametersShifted(text: string, by: number): string {
  return text.replace(/\$(\d+)/g, (_, index: string) => `$${Number(index) + by}`);
}

function queryConfig(statement: StatementText, values: unknown[] | undefined): pg.QueryConfig {
  return typeof statement === 'string' ? { text: statement, values } : { name: statement.name, text: statement.text, values };
}

/** Side effects a commit sends when, and only when, it commits: pools with new ready runs, near timers. */
export interface CommitEffects {
  readonly readyPools: Set<string>;
  readonly nearTimers: LoadedTimer[];
}

export function newCommitEffects(): CommitEffects {
  return { readyPools: new Set(), nearTimers: [] };
}

/** A transaction, with the side effects it sends when it commits. */
export class Transaction implements CommitEffects {
  readonly readyPools = new Set<string>();
  readonly nearTimers: LoadedTimer[] = [];

  constructor(readonly client: pg.PoolClient) {}

  query<Row extends pg.QueryResultRow>(statement: StatementText, values?: unknown[]): Promise<pg.QueryResult<Row>> {
    return this.client.query<Row>(queryConfig(statement, values));
  }
}

export interface CommitHooks {
  /** Runs inside the transaction just before COMMIT: the NOTIFY statements. */
  beforeCommit(transaction: Transaction): Promise<void>;
  /** Runs after COMMIT: local listeners. */
  afterCommit(effects: CommitEffects): void;
  /**
   * The NOTIFY channels and payloads for `effects`, for a statement that commits alone and
   * sends them itself (`SELECT pg_notify(c, p) FROM unnest(channels, payloads)`).
   */
  notifications(effects: CommitEffects): { channels: string[]; payloads: string[] };
}

/**
 * Runs `body` on a pooled client. pg-pool stops listening for a client's 'error' events
 * while it is checked out; a connection that dies between two statements would then throw
 * from an event emitter and take the process down. The listener here keeps it, and a client
 * whose connection failed is destroyed rather than returned to the pool.
 */
export async function withClient<T>(pool: pg.Pool, operation: string,
  body: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    return mapStoreError(error, operation);
  }
  let connectionError: Error | undefined;
  const onError = (error: Error): void => {
    connectionError ??= error;
  };
  client.on('error', onError);
  let failure: unknown;
  try {
    return await body(client);
  } catch (error) {
    failure = error;
    return mapStoreError(error, operation);
  } finally {
    client.removeListener('error', onError);
    const broken = connectionError ?? (failure !== undefined && isUnavailableError(failure) ? failure as Error : undefined);
    client.release(broken);
  }
}

/**
 * Every transaction of the store looks rows up by key or by an index made for it, and the
 * prepared statements among them keep the plan built at their sixth execution. On a table
 * still nearly empty (a new cluster's first seconds) the planner prefers a sequential scan
 * for a key lookup, and that generic plan stayed while the table grew, until autovacuum's
 * ANALYZE replaced it: in the micro-benchmark a dispatch then cost three times the CPU,
 * each one scanning the whole runs table. Sequential scans are therefore off inside
 * transactions (`SET LOCAL`, sent with BEGIN in the same round trip).
 */
export const beginSql = 'BEGIN; SET LOCAL enable_seqscan = off';

/**
 * Runs `body` in a transaction. A pooled connection that the server dropped while this
 * process could not notice (paused, or busy while the database restarted) fails its first
 * statement; as BEGIN is that statement and nothing ran, the transaction is tried once more
 * on a fresh connection rather than failing the caller.
 */
export async function withTransaction<T>(pool: pg.Pool, hooks: CommitHooks, operation: string,
  body: (transaction: Transaction) => Promise<T>): Promise<T> {
  for (let tryNumber = 1; ; tryNumber++) {
    let beginFailed = false;
    try {
      return await withClient(pool, operation, async (client) => {
        try {
          await client.query(beginSql);
        } catch (error) {
          beginFailed = true;
          throw error;
        }
        return runTransaction(client, hooks, body);
      });
    } catch (error) {
      const deadConnection = beginFailed && isTicklerError(error) && error.code === 'unavailable';
      if (!deadConnection || tryNumber >= 2) throw error;
    }
  }
}

async function runTransaction<T>(client: pg.PoolClient, hooks: CommitHooks,
  body: (transaction: Transaction) => Promise<T>): Promise<T> {
  const transaction = new Transaction(client);
  let value: T;
  try {
    value = await body(transaction);
    await hooks.beforeCommit(transaction);
    await client.query('COMMIT');
  } catch (error) {
    await rollbackQuietly(client, error);
    throw error;
  }
  hooks.afterCommit(transaction);
  return value;
}

async function rollbackQuietly(client: pg.PoolClient, original: unknown): Promise<void> {
  try {
    await client.query('ROLLBACK');
  } catch (rollbackError) {
    // The original error is the one worth reporting; a failed rollback means the connection
    // is gone, and the server rolls the transaction back itself.
    if (!isUnavailableError(rollbackError) && !isUnavailableError(original)) throw rollbackError;
  }
}

/** One statement on any pooled connection, with errors mapped. */
export async function queryPool<Row extends pg.QueryResultRow>(pool: pg.Pool, operation: string,
  statement: StatementText, values?: unknown[]): Promise<pg.QueryResult<Row>> {
  try {
    return await pool.query<Row>(queryConfig(statement, values));
  } catch (error) {
    mapStoreError(error, operation);
  }
}
