/**
 * Progress while a workload runs: one stderr line per second naming the workload, the system,
 * the phase and what the phase has done so far, so a long run shows where it is.
 */
const progressIntervalMs = 1_000;

export class Progress {
  private readonly label: string;
  private readonly enabled: boolean;
  private timer: NodeJS.Timeout | undefined;

  constructor(label: string, enabled = true) {
    this.label = label;
    this.enabled = enabled;
  }

  /** Reports `detail()` every second until the next phase or `done()`. */
  phase(name: string, detail: () => string = () => ''): void {
    this.done();
    if (!this.enabled) return;
    const startedMs = performance.now();
    const print = (): void => {
      const elapsedS = ((performance.now() - startedMs) / 1_000).toFixed(0);
      process.stderr.write(`[${this.label}] ${name} ${elapsedS}s ${detail()}\n`);
    };
    print();
    this.timer = setInterval(print, progressIntervalMs);
    this.timer.unref();
  }

  note(message: string): void {
    if (this.enabled) process.stderr.write(`[${this.label}] ${message}\n`);
  }

  done(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}
