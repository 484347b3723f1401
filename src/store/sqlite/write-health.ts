/**
 * Whether the embedded store's writes commit, and its way back when they stop. On a full
 * disk (or a disk failing with I/O errors) every commit fails while reads go on: writers get
 * 503 and readiness says not ready (`SqliteStore.ping`). Nothing else would ever make room:
 * the background checkpoint runs only after a commit, and the WAL file, which never shrinks
 * by itself, keeps the space it grew to. Worse, under a steady load a freed disk fills up
 * again within a second as the WAL grows, and then stays full for good.
 *
 * So while commits fail, `heal` is tried every `intervalMs` of real time (I/O plumbing, as
 * the database reconnects at start: a virtual clock standing still must not keep a store
 * broken): the store copies the WAL into the database and truncates it to nothing
 * (`wal_checkpoint(TRUNCATE)`), which gives the WAL's space back once the copy fits, and
 * commits a probe write. The first commit that succeeds, the probe's or a caller's, ends the
 * failure. Each failure, each failed attempt and the recovery are logged.
 */
import type { Logger } from '../../obs/log.js';

const healIntervalMsDefault = 1_000;

/** SQLite errors that say the file cannot be written now (as against a busy lock or a bad statement). */
const diskFailureCodes = /^SQLITE_(FULL|IOERR|CANTOPEN|READONLY)/;

export function isDiskFailure(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && diskFailureCodes.test(code);
}

export class WriteHealth {
  private failure: { error: unknown; sinceMs: number; failedCommits: number } | null = null;
  private timer: NodeJS.Timeout | null = null;
  private healing = false;
  private closed = false;

  constructor(
    private readonly options: {
      /** Makes room and commits a probe write; rejects while the disk still refuses. */
      heal(): Promise<void>;
      logger?: Logger;
      intervalMs?: number;
    },
  ) {}

  /** Null while writes commit; otherwise what the last failed commit said. */
  get failing(): string | null {
    if (this.failure === null) return null;
    const error = this.failure.error;
    return error instanceof Error ? error.message : String(error);
  }

  /** After each commit attempt: `error` is the disk failure that ended it, or null when it committed. */
  noteCommit(error: unknown): void {
    if (error === null) {
      if (this.failure !== null) this.recover();
      return;
    }
    if (this.failure !== null) {
      this.failure.failedCommits++;
      return;
    }
    this.failure = { error, sinceMs: Date.now(), failedCommits: 1 };
    this.options.logger?.error({ err: error }, 'the store cannot commit writes; answering them 503 and trying to make room');
    this.schedule();
  }

  close(): void {
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private recover(): void {
    const failure = this.failure!;
    this.failure = null;
    this.options.logger?.warn({ failedCommits: failure.failedCommits, failedForMs: Date.now() - failure.sinceMs },
      'the store commits writes again');
  }

  private schedule(): void {
    if (this.closed || this.timer !== null || this.failure === null) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.attempt();
    }, this.options.intervalMs ?? healIntervalMsDefault);
    // A store failing its writes must not keep a process alive that is otherwise done.
    this.timer.unref();
  }

  private async attempt(): Promise<void> {
    if (this.closed || this.failure === null || this.healing) return;
    this.healing = true;
    try {
      await this.options.heal();
    } catch (error) {
      this.options.logger?.warn({ err: error, failedCommits: this.failure?.failedCommits ?? 0 },
        'the store still cannot commit writes; trying again');
    } finally {
      this.healing = false;
    }
    this.schedule();
  }
}
