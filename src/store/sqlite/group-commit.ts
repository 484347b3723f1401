/**
 * Group commit: write operations that arrive close together share one transaction, and
 * one fsync serves them all (DESIGN.md "Storage"; STYLE.md §6). Each operation runs in its
 * own savepoint inside the group's transaction, so one that throws rolls back alone and the
 * others commit. Callers are answered only once their commit is durable.
 *
 * better-sqlite3 commits synchronously, on the event loop. What it need not do there is
 * wait for the disk: with a `Durability` the transaction commits without fsync (SQLite
 * `synchronous=NORMAL` writes the WAL frames and returns) and the fsync runs on libuv's
 * thread pool while the loop goes on reading requests. Operations that arrive while a
 * sync is in flight wait for it and then commit together, so the group grows with the
 * disk's latency instead of each turn paying an fsync of its own. (Measured before: a
 * blocking fsync of 3–10 ms on this machine's disk per turn held 64 concurrent single
 * creates to ~16 per transaction, and the loop stood still while the disk worked.)
 *
 * Reads are not queued: one may see a commit whose sync has not finished. After a power
 * failure such a write can be gone although someone read it; never a durable one that was answered.
 *
 * With `gatherMs`, durable writes that would commit alone (a worker's completion between two
 * dispatches) wait up to that long for the next write that needs no sync and share its
 * transaction, but only while such writes are committing every few milliseconds: a
 * transaction's cost here is mostly its fixed part (each dirty page is a whole WAL frame),
 * and on bench:peers W2 (2,000 timers a second) completions committing on their own were a
 * fifth of the server's transactions. A caller waits at most `gatherMs` longer; a store
 * whose writes are all durable (creates alone) never waits.
 *
 * A group is bounded by `weightMax` (items, not operations) so one commit never holds the
 * loop for long. When a sync fails, what was committed since the last good sync may not
 * be on disk: those callers get the error, and the queue refuses every later write, as
 * PostgreSQL panics on a failed fsync rather than trust the page cache again.
 */
import { TicklerError } from '../../errors.js';

/** A durable write waits for company only if a write needing no sync committed this recently. */
const recentNotDurableMsDefault = 5;
/** A group of durable writes this heavy commits without waiting for company. */
const gatherWeightMaxDefault = 64;

export interface GatherOptions {
  /**
   * How long durable writes alone may wait for the next write that needs no sync, to share
   * its transaction (like PostgreSQL's `commit_delay`). 0, the default, never waits.
   */
  gatherMs?: number;
  gatherWeightMax?: number;
  /** Gathers only if a write that needs no sync committed within this many ms; default 5. */
  recentNotDurableMs?: number;
  /** Arms the gather's timer; answers its cancel. Tests pass their own. */
  setTimer?: (callback: () => void, delayMs: number) => () => void;
}

export type OperationOutcome = { ok: true; value: unknown } | { ok: false; error: unknown };

export interface QueuedOperation {
  /** Runs inside the group's transaction (nested transactions become savepoints). */
  run(): unknown;
  /** Called once the commit is durable, with what `run` answered, for notifications. */
  afterCommit(value: unknown): void;
  weight: number;
  /**
   * False for a write whose loss on power failure is harmless (a worker lease): it is
   * answered right after its commit, without waiting for a sync, and may commit while a
   * sync is in flight. A later sync covers its frames anyway.
   */
  durable: boolean;
  /**
   * What the commit may run together with adjacent operations of the same kind instead of
   * calling `run` (the store's creates: one multi-row insert for many callers). The queue
   * passes it through untouched.
   */
  mergeable?: unknown;
}

/** Makes every commit so far durable: the WAL's fsync, off the loop or (on close) on it. */
export interface Durability {
  sync(): Promise<void>;
  syncNow(): void;
}

interface PendingOperation extends QueuedOperation {
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

interface CommittedOperation {
  operation: PendingOperation;
  outcome: OperationOutcome;
}

export class GroupCommitQueue {
  private pending: PendingOperation[] = [];
  /** How many of `pending` are not durable: they do not wait for a sync in flight. */
  private pendingNotDurable = 0;
  /** Committed, not yet covered by a sync that started. */
  private unsynced: CommittedOperation[] = [];
  private syncInFlight: Promise<void> | null = null;
  private flushScheduled = false;
  private readonly gatherMs: number;
  private readonly gatherWeightMax: number;
  private readonly recentNotDurableMs: number;
  private readonly setTimer: NonNullable<GatherOptions['setTimer']>;
  /** When a group with a write that needs no sync last committed (performance.now()). */
  private lastNotDurableCommitMs = Number.NEGATIVE_INFINITY;
  /** When the oldest of `pending` was submitted. */
  private oldestPendingMs = 0;
  /** Weight of `pending`. */
  private pendingWeight = 0;
  /** Cancels the timer that ends a gather; null when not gathering. */
  private gatherTimer: (() => void) | null = null;
  private gatherExpired = false;
  private broken: unknown = null;
  /** Counters that show how well writes coalesce. */
  readonly stats = { transactions: 0, operations: 0 };

  /**
   * `commitGroup` runs the operations in one transaction and answers one outcome per
   * operation, in order; a throw (the transaction could not begin or commit) fails them all.
   * Without `durability` the commit itself is durable (synchronous=FULL, or a store that
   * was told durability does not matter) and callers are answered right after it.
   */
  constructor(
    private readonly commitGroup: (operations: readonly QueuedOperation[]) => OperationOutcome[],
    private readonly weightMax: number,
    private readonly durability: Durability | null = null,
    options: GatherOptions = {},
  ) {
    this.gatherMs = options.gatherMs ?? 0;
    this.gatherWeightMax = options.gatherWeightMax ?? gatherWeightMaxDefault;
    this.recentNotDurableMs = options.recentNotDurableMs ?? recentNotDurableMsDefault;
    this.setTimer = options.setTimer ?? ((callback, delayMs) => {
      const handle = setTimeout(callback, delayMs);
      return () => clearTimeout(handle);
    });
  }

  submit<T>(operation: { run(): T; afterCommit(value: T): void; weight: number; durable?: boolean; mergeable?: unknown }):
    Promise<T> {
    if (this.broken !== null) return Promise.reject(unusable(this.broken));
    return new Promise<T>((resolve, reject) => {
      const durable = operation.durable ?? true;
      if (!durable) this.pendingNotDurable++;
      if (this.pending.length === 0) this.oldestPendingMs = performance.now();
      this.pendingWeight += operation.weight;
      this.pending.push({
        run: operation.run,
        afterCommit: operation.afterCommit as (value: unknown) => void,
        weight: operation.weight,
        durable,
        ...(operation.mergeable === undefined ? {} : { mergeable: operation.mergeable }),
        resolve: resolve as (value: unknown) => void,
        reject,
      });
      this.scheduleFlush();
    });
  }

  /** Null while the queue takes writes; after a failed sync, what the sync said. */
  get brokenBy(): string | null {
    if (this.broken === null) return null;
    return this.broken instanceof Error ? this.broken.message : String(this.broken);
  }

  /**
   * Commits everything queued now and makes it durable before answering; used on close so
   * no accepted write is left behind. Also waits for a sync already in flight.
   */
  async drain(): Promise<void> {
    // A sync that lands starts the next group's at once: wait until none is in flight.
    while (this.syncInFlight !== null) await this.syncInFlight;
    while (this.pending.length > 0) this.commitOneGroup();
    const unsynced = this.takeUnsynced();
    if (unsynced.length === 0) return;
    try {
      this.durability?.syncNow();
      settle(unsynced);
    } catch (error) {
      this.fail(unsynced, error);
    }
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    // While the disk works on the previous group, durable newcomers gather for the next one;
    // a write that needs no sync does not wait for it.
    if (this.canCommitNow()) {
      if (this.shouldGather()) {
        this.armGather();
      } else {
        this.commitOneGroup();
        settle(this.durability === null ? this.takeUnsynced() : this.takeNotDurable());
      }
    }
    if (this.syncInFlight === null && this.unsynced.length > 0) this.startSync();
    if (this.canCommitNow() && this.gatherTimer === null) this.scheduleFlush();
  }

  private canCommitNow(): boolean {
    return this.pending.length > 0 && (this.syncInFlight === null || this.pendingNotDurable > 0);
  }

  /**
   * Whether durable writes alone should wait for company: only while writes that need no
   * sync (dispatches, leases) have been committing moments ago, so one is likely to come
   * within `gatherMs`, and only for a small group that has not waited that long already.
   */
  private shouldGather(): boolean {
    if (this.gatherMs <= 0 || this.durability === null || this.pendingNotDurable > 0 || this.gatherExpired) return false;
    const nowMs = performance.now();
    return nowMs - this.lastNotDurableCommitMs <= this.recentNotDurableMs &&
      nowMs - this.oldestPendingMs < this.gatherMs &&
      this.pendingWeight < this.gatherWeightMax;
  }

  private armGather(): void {
    if (this.gatherTimer !== null) return;
    const remainingMs = Math.max(0, this.gatherMs - (performance.now() - this.oldestPendingMs));
    this.gatherTimer = this.setTimer(() => {
      this.gatherTimer = null;
      this.gatherExpired = true;
      this.flush();
    }, remainingMs);
  }

  private commitOneGroup(): void {
    let weight = 0;
    let count = 0;
    // At least one operation per group, however heavy, so an oversized one still goes through.
    while (count < this.pending.length && (count === 0 || weight + this.pending[count]!.weight <= this.weightMax)) {
      weight += this.pending[count]!.weight;
      count++;
    }
    if (count === 0) return;
    const group = this.pending.slice(0, count);
    this.pending = this.pending.slice(count);
    this.pendingWeight -= weight;
    if (this.pending.length > 0) this.oldestPendingMs = performance.now();
    this.gatherTimer?.();
    this.gatherTimer = null;
    this.gatherExpired = false;
    let hadNotDurable = false;
    for (const operation of group) {
      if (operation.durable) continue;
      this.pendingNotDurable--;
      hadNotDurable = true;
    }
    if (hadNotDurable) this.lastNotDurableCommitMs = performance.now();
    let outcomes: OperationOutcome[];
    try {
      outcomes = this.commitGroup(group);
    } catch (error) {
      // Nothing of the group was committed: fail it now, no sync needed.
      for (const operation of group) operation.reject(error);
      return;
    }
    this.stats.transactions++;
    this.stats.operations += group.length;
    group.forEach((operation, index) => this.unsynced.push({ operation, outcome: outcomes[index]! }));
  }

  /**
   * When the sync lands, the group that gathered meanwhile commits and its sync starts before
   * this one's callers are answered: answering (their HTTP replies) then overlaps the next
   * sync instead of sitting between two. Measured with 64 single creates: the clients fell
   * into two alternating cohorts with ~1.5 ms between syncs.
   */
  private startSync(): void {
    const durability = this.durability!;
    const covered = this.takeUnsynced();
    if (covered.length === 0) return;
    this.syncInFlight = durability.sync().then(
      () => {
        this.syncInFlight = null;
        this.flush();
        settle(covered);
      },
      (error: unknown) => {
        this.syncInFlight = null;
        this.fail(covered, error);
      },
    );
  }

  /** Answers the committed writes that need no sync; the others stay for the next sync. */
  private takeNotDurable(): CommittedOperation[] {
    if (this.unsynced.every((committed) => committed.operation.durable)) return [];
    const notDurable = this.unsynced.filter((committed) => !committed.operation.durable);
    this.unsynced = this.unsynced.filter((committed) => committed.operation.durable);
    return notDurable;
  }

  private takeUnsynced(): CommittedOperation[] {
    const taken = this.unsynced;
    this.unsynced = [];
    return taken;
  }

  private fail(committed: readonly CommittedOperation[], error: unknown): void {
    this.broken = error;
    for (const { operation } of committed) operation.reject(unusable(error));
    for (const operation of this.pending) operation.reject(unusable(error));
    this.pending = [];
    this.pendingNotDurable = 0;
    this.pendingWeight = 0;
    this.gatherTimer?.();
    this.gatherTimer = null;
  }
}

/** Answers each caller: its value (after its notifications) or its own error. */
function settle(committed: readonly CommittedOperation[]): void {
  for (const { operation, outcome } of committed) {
    if (!outcome.ok) {
      operation.reject(outcome.error);
      continue;
    }
    operation.afterCommit(outcome.value);
    operation.resolve(outcome.value);
  }
}

function unusable(cause: unknown): TicklerError {
  return new TicklerError('unavailable', 'the database could not be synced to disk; restart the server', { cause });
}
