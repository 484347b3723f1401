/**
 * Store notifications across processes: `onRunsReady(pool)` wakes
 * long-polling workers on every API node, `onNearTimers` carries freshly written near timers
 * to the shard's owner wherever it runs.
 *
 * A committing transaction sends `pg_notify` on two channels (PostgreSQL delivers them only
 * on commit and folds identical payloads of one transaction into one). Listeners in this
 * process are called directly after commit; the payload names its origin so this process's
 * own LISTEN connection ignores the echo. Near-timer payloads carry only `(fire_at, id)`
 * pairs, chunked below PostgreSQL's 8000-byte limit; receivers load the timers themselves.
 *
 * The LISTEN connection is dedicated (not pooled) and reconnects with capped backoff. What
 * was notified while it was down is lost: once it listens again (and whenever loading
 * announced timers fails) `onNearTimersMissed` tells the loader to reread its whole window,
 * and long-pollers re-check on their own deadline.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Logger } from '../../obs/log.js';
import type { LoadedTimer } from '../store.js';
import { connectionConfig, prepared, type CommitEffects, type Transaction } from './connection.js';

const notifySql = prepared('SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p)');

/** Payloads stay under PostgreSQL's 8000-byte NOTIFY limit with room for the origin. */
export const notifyPayloadBytesMax = 7_800;
const reconnectDelayMsMin = 100;
const reconnectDelayMsMax = 5_000;

export interface TimerRef {
  fireAtMs: number;
  timerId: string;
}

export interface NotifierOptions {
  url: string;
  schema: string;
  logger: Logger;
  /** Loads near timers announced by another process. */
  loadTimers(refs: TimerRef[]): Promise<LoadedTimer[]>;
}

type RunsReadyListener = (pool: string) => void;
type NearTimersListener = (timers: LoadedTimer[]) => void;
type MissedListener = () => void;

export class Notifier {
  readonly originId = randomBytes(6).toString('hex');
  readonly runsReadyChannel: string;
  readonly nearTimersChannel: string;
  private readonly runsReadyListeners = new Set<RunsReadyListener>();
  private readonly nearTimersListeners = new Set<NearTimersListener>();
  private readonly missedListeners = new Set<MissedListener>();
  /** A LISTEN connection was up before: the next one to come up follows a gap. */
  private listenedBefore = false;
  private client: pg.Client | null = null;
  private closed = false;
  private reconnectAttempts = 0;
  private reconnectTimer: NodeJS.Timeout | null = null;
  /** Resolves each time a LISTEN connection is (re)established; tests wait on it. */
  private listeningWaiters: (() => void)[] = [];

  constructor(private readonly options: NotifierOptions) {
    // Channels are per schema so that isolated schemas (tests, tenants) do not hear each other.
    const suffix = options.schema === 'public' ? '' : `__${options.schema}`;
    this.runsReadyChannel = `tickler_runs_ready${suffix}`.slice(0, 63);
    this.nearTimersChannel = `tickler_near_timers${suffix}`.slice(0, 63);
  }

  get isListening(): boolean {
    return this.client !== null;
  }

  onRunsReady(listener: RunsReadyListener): () => void {
    this.runsReadyListeners.add(listener);
    return () => this.runsReadyListeners.delete(listener);
  }

  onNearTimers(listener: NearTimersListener): () => void {
    this.nearTimersListeners.add(listener);
    return () => this.nearTimersListeners.delete(listener);
  }

  onNearTimersMissed(listener: MissedListener): () => void {
    this.missedListeners.add(listener);
    return () => this.missedListeners.delete(listener);
  }

  /** Connects the LISTEN client; resolves once it listens. */
  async start(): Promise<void> {
    await this.connect();
  }

  /** Resolves when a LISTEN connection is up (at once if it is). */
  waitUntilListening(): Promise<void> {
    if (this.client !== null) return Promise.resolve();
    return new Promise((resolve) => this.listeningWaiters.push(resolve));
  }

  /** Queues the NOTIFY statements for a transaction's collected effects (call before COMMIT). */
  async notifyWithin(transaction: Transaction): Promise<void> {
    const { channels, payloads } = this.notificationsOf(transaction);
    if (channels.length === 0) return;
    await transaction.query(notifySql, [channels, payloads]);
  }

  /** The channels and payloads that announce `effects` to the other processes. */
  notificationsOf(effects: CommitEffects): { channels: string[]; payloads: string[] } {
    const channels: string[] = [];
    const payloads: string[] = [];
    for (const pool of effects.readyPools) {
      channels.push(this.runsReadyChannel);
      payloads.push(`${this.originId}|${pool}`);
    }
    for (const chunk of chunkTimerRefs(effects.nearTimers, notifyPayloadBytesMax)) {
      channels.push(this.nearTimersChannel);
      payloads.push(`${this.originId}|${chunk}`);
    }
    return { channels, payloads };
  }

  /** Calls this process's listeners after a commit. */
  emitLocal(readyPools: Iterable<string>, nearTimers: LoadedTimer[]): void {
    for (const pool of readyPools) this.emitRunsReady(pool);
    if (nearTimers.length > 0) this.emitNearTimers(nearTimers);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.reconnectTimer !== null) clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = null;
    if (client !== null) {
      await client.end().catch((error: unknown) => {
        this.options.logger.warn({ err: error }, 'postgres: closing the LISTEN connection failed');
      });
    }
  }

  private emitRunsReady(pool: string): void {
    for (const listener of this.runsReadyListeners) {
      try {
        listener(pool);
      } catch (error) {
        this.options.logger.error({ err: error, pool }, 'postgres: an onRunsReady listener threw');
      }
    }
  }

  private emitNearTimers(timers: LoadedTimer[]): void {
    for (const listener of this.nearTimersListeners) {
      try {
        listener(timers);
      } catch (error) {
        this.options.logger.error({ err: error }, 'postgres: an onNearTimers listener threw');
      }
    }
  }

  private emitMissed(): void {
    for (const listener of this.missedListeners) {
      try {
        listener();
      } catch (error) {
        this.options.logger.error({ err: error }, 'postgres: an onNearTimersMissed listener threw');
      }
    }
  }

  private async connect(): Promise<void> {
    const client = new pg.Client(connectionConfig(this.options.url, this.options.schema));
    client.on('error', (error) => {
      this.options.logger.warn({ err: error }, 'postgres: LISTEN connection failed; reconnecting');
      this.lost(client);
    });
    client.on('end', () => this.lost(client));
    client.on('notification', (message) => this.receive(message.channel, message.payload ?? ''));
    try {
      await client.connect();
      await client.query(`LISTEN ${this.runsReadyChannel}`);
      await client.query(`LISTEN ${this.nearTimersChannel}`);
    } catch (error) {
      await client.end().catch((endError: unknown) => {
        this.options.logger.debug({ err: endError }, 'postgres: ending a LISTEN connection that failed to start');
      });
      throw error;
    }
    if (this.closed) {
      await client.end();
      return;
    }
    this.client = client;
    this.reconnectAttempts = 0;
    if (this.listenedBefore) this.emitMissed();
    this.listenedBefore = true;
    const waiters = this.listeningWaiters;
    this.listeningWaiters = [];
    for (const resolve of waiters) resolve();
  }

  private lost(client: pg.Client): void {
    if (this.client !== client) return;
    this.client = null;
    client.end().catch((error: unknown) => {
      this.options.logger.debug({ err: error }, 'postgres: ending a failed LISTEN connection');
    });
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.reconnectTimer !== null) return;
    // Real-time backoff on purpose: this is I/O plumbing, not scheduling; a virtual clock
    // standing still must not stop the store from reconnecting.
    const delayMs = Math.min(reconnectDelayMsMax, reconnectDelayMsMin * 2 ** this.reconnectAttempts);
    this.reconnectAttempts++;
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.connect().catch((error: unknown) => {
        this.options.logger.warn({ err: error, attempt: this.reconnectAttempts }, 'postgres: LISTEN reconnect failed');
        this.scheduleReconnect();
      });
    }, delayMs);
    this.reconnectTimer.unref();
  }

  private receive(channel: string, payload: string): void {
    const separator = payload.indexOf('|');
    if (separator < 0) return;
    if (payload.slice(0, separator) === this.originId) return;
    const body = payload.slice(separator + 1);
    if (channel === this.runsReadyChannel) {
      this.emitRunsReady(body);
    } else if (channel === this.nearTimersChannel) {
      if (this.nearTimersListeners.size === 0) return;
      const refs = parseTimerRefs(body);
      this.options.loadTimers(refs).then(
        (timers) => {
          if (timers.length > 0) this.emitNearTimers(timers);
        },
        (error: unknown) => {
          // Not fatal: the loader rereads its whole window instead.
          this.options.logger.warn({ err: error, count: refs.length }, 'postgres: loading notified near timers failed');
          this.emitMissed();
        },
      );
    }
  }
}

/** `fireAtMs:timerId` pairs joined by commas, each chunk under `bytesMax`. */
export function chunkTimerRefs(timers: readonly TimerRef[], bytesMax: number): string[] {
  const chunks: string[] = [];
  let current = '';
  for (const timer of timers) {
    const entry = `${timer.fireAtMs}:${timer.timerId}`;
    if (current.length > 0 && Buffer.byteLength(current) + 1 + Buffer.byteLength(entry) > bytesMax) {
      chunks.push(current);
      current = '';
    }
    current = current.length === 0 ? entry : `${current},${entry}`;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

export function parseTimerRefs(body: string): TimerRef[] {
  const refs: TimerRef[] = [];
  for (const entry of body.split(',')) {
    const separator = entry.indexOf(':');
    if (separator <= 0) continue;
    const fireAtMs = Number(entry.slice(0, separator));
    if (!Number.isSafeInteger(fireAtMs)) continue;
    refs.push({ fireAtMs, timerId: entry.slice(separator + 1) });
  }
  return refs;
}
