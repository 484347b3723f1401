/**
 * WAL checkpoints off the event loop. SQLite's automatic checkpoint runs inside the COMMIT
 * that crosses `wal_autocheckpoint`: it copies the whole WAL into the database file and
 * fsyncs it, on whichever thread committed — here the event loop. Measured on this machine
 * (load 7): 35 ms for 1,000 WAL pages, 213 ms for 10,000, during which no timer fires and no
 * request is read. So the store's own connection checkpoints only as a last resort (a WAL
 * of `fallbackAutocheckpointPages`), and a worker thread with a connection of its own runs
 * `wal_checkpoint(PASSIVE)` while the loop goes on.
 *
 * A PASSIVE checkpoint takes no lock a writer waits for: commits keep appending frames
 * while it copies those before them, and the next write transaction after a complete one
 * starts the WAL over. Durability is as before: with `synchronous=NORMAL` the checkpoint
 * syncs the WAL before copying and the database after, and WalSync's fdatasync still makes
 * each acknowledged commit durable.
 *
 * A PASSIVE checkpoint copies only the frames that were in the WAL when it began, and the WAL
 * starts over only at a write that begins with every frame copied. Under commits that never
 * pause, the thread's pass always ends a few commits behind, so the WAL never started over:
 * bench:peers W3 on the embedded store grew it to 515 MB (the loop's own safety net would
 * have caught up at 800), every frame appended to new blocks, whose fdatasync costs more than
 * one over blocks already written (~240 against ~135 us here). So after a pass that found a
 * WAL of `catchUpFramesMin` frames or more, the store's connection, the only writer, copies
 * what came in during the pass (`catchUp`, between two commits, on the loop): then nothing is
 * left and the next commit starts the WAL over. It cost 1-12 ms of the loop once a second at
 * ~20,000 runs/s and kept W3's WAL at 123-159 MB (W7's store, 1,000,000 pending: 1,362 ->
 * 673 MB on disk), W2's lag p99 unchanged; a store that pauses between writes starts its WAL
 * over by itself and never gets here.
 *
 * A checkpoint needs room: the pages the WAL adds to the database must fit on the disk before
 * the WAL can start over, and a WAL that grew into the disk's last free bytes can never be
 * copied at all (every commit then fails for good, and freeing space does not help when a
 * steady load lets the WAL grow back into it within a second). So after a commit, at most
 * every `roomCheckIntervalMs`, the WAL's size is held against the disk's free space; when
 * the WAL is the larger, the store's connection copies it and truncates it at once (`room`):
 * the WAL then never outgrows the room its own checkpoint needs, and a nearly full disk gets
 * the WAL's space back. Measuring costs ~12 us (a statfs and a stat).
 *
 * It runs at most once per `intervalMs` of writing and only after a commit, so an idle store
 * never wakes the thread; the thread starts on the first checkpoint (a store that writes
 * little, like most tests', never starts one). If the thread fails, the connection's own
 * automatic checkpoint takes over again at the usual size.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { Logger } from '../../obs/log.js';

/** The loop's own checkpoint, kept as a safety net: 100,000 pages of 8 KiB. */
export const fallbackAutocheckpointPages = 100_000;
/** The loop's checkpoint again, at the size used before, when the thread is gone. */
const autocheckpointPagesWithoutThread = 10_000;
const intervalMsDefault = 1_000;
/** 16 MiB of 8 KiB frames: a WAL smaller than this after a pass is left to start over by itself. */
const catchUpFramesMinDefault = 2_048;
/** How often, at most, a commit holds the WAL's size against the disk's free space. */
const roomCheckIntervalMs = 10;

// CommonJS, evaluated in the thread: it needs no TypeScript loader.
const threadSource = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driverPath);
const db = new Database(workerData.path);
db.pragma('busy_timeout = 5000');
db.pragma('synchronous = NORMAL');
parentPort.on('message', (message) => {
  if (message === 'close') {
    db.close();
    parentPort.close();
    return;
  }
  try {
    const [result] = db.pragma('wal_checkpoint(PASSIVE)');
    parentPort.postMessage({ ok: true, busy: result.busy, log: result.log, checkpointed: result.checkpointed });
  } catch (error) {
    parentPort.postMessage({ ok: false, error: String(error && error.message || error) });
  }
});
`;

type Reply = { ok: true; busy: number; log: number; checkpointed: number } | { ok: false; error: string };

export class Checkpointer {
  private thread: Worker | null = null;
  private inFlight = false;
  private failed = false;
  private closing: Promise<void> | null = null;
  /** From the open: a store that writes for less than an interval never starts the thread. */
  private lastStartedMs = performance.now();
  /** Checkpoints done by the thread, and WAL frames they copied: for tests and diagnosis. */
  readonly stats = { checkpoints: 0, framesCheckpointed: 0, failures: 0, catchUps: 0, truncations: 0 };
  private lastRoomCheckMs = Number.NEGATIVE_INFINITY;
  private readonly waiters: (() => void)[] = [];

  constructor(
    private readonly options: {
      path: string;
      /** Hands the checkpoint back to the store's connection (sets its `wal_autocheckpoint`). */
      setAutocheckpoint(pages: number): void;
      /** A PASSIVE checkpoint on the store's own connection, outside any transaction. */
      catchUp?(): void;
      /** Frames a pass must have found in the WAL before the store's connection catches up. */
      catchUpFramesMin?: number;
      /** The WAL's size and the disk's free space, and a TRUNCATE checkpoint on the store's connection. */
      room?: { measure(): { walBytes: number; freeBytes: number }; truncate(): void };
      logger?: Logger;
      intervalMs?: number;
    },
  ) {}

  /** Called after each commit: starts a checkpoint when none ran for an interval. */
  afterCommit(): void {
    this.keepRoom();
    if (this.inFlight || this.failed || this.closing !== null) return;
    const nowMs = performance.now();
    if (nowMs - this.lastStartedMs < (this.options.intervalMs ?? intervalMsDefault)) return;
    this.lastStartedMs = nowMs;
    this.start();
  }

  /** Waits for a checkpoint in flight, then closes the thread's connection. Idempotent. */
  close(): Promise<void> {
    // Referenced while closing: an unreferenced thread would let the process exit mid-await.
    this.thread?.ref();
    this.closing ??= this.whenIdle().then(async () => {
      const thread = this.thread;
      this.thread = null;
      if (thread === null) return;
      const exited = new Promise<void>((resolve) => thread.once('exit', () => resolve()));
      thread.postMessage('close');
      await exited;
    });
    return this.closing;
  }

  private start(): void {
    const thread = this.threadOrNull();
    if (thread === null) return;
    this.inFlight = true;
    thread.postMessage('checkpoint');
  }

  private threadOrNull(): Worker | null {
    if (this.thread !== null || this.failed) return this.thread;
    const driverPath = createRequire(import.meta.url).resolve('better-sqlite3');
    const thread = new Worker(threadSource, { eval: true, workerData: { path: this.options.path, driverPath } });
    thread.unref();
    thread.on('message', (reply: Reply) => this.onReply(reply));
    thread.on('error', (error) => this.giveUp(error));
    thread.on('exit', (code) => {
      if (this.closing === null) this.giveUp(new Error(`checkpoint thread exited with code ${code}`));
    });
    this.thread = thread;
    return thread;
  }

  private onReply(reply: Reply): void {
    this.inFlight = false;
    if (reply.ok) {
      this.stats.checkpoints++;
      this.stats.framesCheckpointed += Math.max(0, reply.checkpointed);
      if (reply.busy === 0 && reply.log >= (this.options.catchUpFramesMin ?? catchUpFramesMinDefault)) this.catchUp();
    } else {
      // A busy database or a full disk: the next commit's interval tries again.
      this.stats.failures++;
      this.options.logger?.warn({ error: reply.error }, 'background WAL checkpoint failed; retrying later');
    }
    this.settleWaiters();
  }

  private catchUp(): void {
    if (this.options.catchUp === undefined) return;
    try {
      this.options.catchUp();
      this.stats.catchUps++;
    } catch (error) {
      // The thread's next pass and the connection's own checkpoint remain.
      this.options.logger?.warn({ err: error }, 'WAL catch-up checkpoint failed');
    }
  }

  /** Copies and truncates the WAL when it has grown larger than the disk's free space. */
  private keepRoom(): void {
    const room = this.options.room;
    if (room === undefined || this.closing !== null) return;
    const nowMs = performance.now();
    if (nowMs - this.lastRoomCheckMs < roomCheckIntervalMs) return;
    this.lastRoomCheckMs = nowMs;
    try {
      const { walBytes, freeBytes } = room.measure();
      // The thread's pass holds the checkpoint lock, so a TRUNCATE now would only answer busy.
      if (walBytes <= freeBytes || this.inFlight) return;
      room.truncate();
      this.stats.truncations++;
    } catch (error) {
      // No room even for that copy: the commits that fail next say so, and WriteHealth retries.
      this.stats.failures++;
      this.options.logger?.warn({ err: error }, 'WAL checkpoint to keep room on the disk failed');
    }
  }

  private giveUp(error: unknown): void {
    if (this.failed) return;
    this.failed = true;
    this.inFlight = false;
    this.thread = null;
    this.options.setAutocheckpoint(autocheckpointPagesWithoutThread);
    this.options.logger?.error({ err: error }, 'the WAL checkpoint thread failed; checkpoints run on the event loop again');
    this.settleWaiters();
  }

  /** Resolves once no checkpoint is in flight. */
  whenIdle(): Promise<void> {
    if (!this.inFlight) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private settleWaiters(): void {
    for (const resolve of this.waiters.splice(0)) resolve();
  }
}
