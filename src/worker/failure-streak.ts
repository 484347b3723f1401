/**
 * The log of a request that keeps failing while it is retried (a server not listening, a 503):
 * one warning when the failures start, then at most one every `intervalMs` while they last,
 * and one line when a request succeeds again. A worker retrying a refused connection every
 * ~0.2 s would otherwise write a warning per attempt for as long as the server is away.
 */
import type { Clock } from '../clock.js';
import { workerFailureLogIntervalMsDefault } from '../limits.js';
import { describe } from './client.js';
import type { WorkerLogger } from './run-attempt.js';

export class FailureStreak {
  private failures = 0;
  private firstFailureAtMs = 0;
  private lastWarningAtMs = 0;

  constructor(
    /** What fails, as the lines name it: "lease requests". */
    private readonly what: string,
    private readonly context: object,
    private readonly logger: WorkerLogger,
    private readonly clock: Clock,
    private readonly intervalMs = workerFailureLogIntervalMsDefault,
  ) {}

  failed(error: unknown): void {
    const nowMs = this.clock.nowMs();
    this.failures += 1;
    if (this.failures === 1) {
      this.firstFailureAtMs = nowMs;
      this.lastWarningAtMs = nowMs;
      this.logger.warn({ ...this.context, error: describe(error) }, `${this.what} fail; retrying with backoff`);
    } else if (nowMs - this.lastWarningAtMs >= this.intervalMs) {
      this.lastWarningAtMs = nowMs;
      this.logger.warn({ ...this.context, failures: this.failures, failingForMs: nowMs - this.firstFailureAtMs, error: describe(error) },
        `${this.what} still fail; retrying with backoff`);
    }
  }

  succeeded(): void {
    if (this.failures === 0) return;
    this.logger.info({ ...this.context, failures: this.failures, failedForMs: this.clock.nowMs() - this.firstFailureAtMs },
      `${this.what} succeed again`);
    this.failures = 0;
  }
}
