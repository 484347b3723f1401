/**
 * What every benchmark gets from the runner and what it must answer. A benchmark owns its
 * servers and temp directories and releases them, even when it fails, through `defer`.
 */
import type { BenchResult } from './report.js';

export interface BenchContext {
  /** Tiny counts so the harness itself can be tested; targets are not judged. */
  readonly quick: boolean;
  /** Start servers under `node --cpu-prof` and summarise the profile in the notes. */
  readonly cpuProfile: boolean;
  /** `--size NAME=N` settings, for benchmarks whose sizes are flags. */
  readonly sizes?: Readonly<Record<string, number>>;
  log(message: string): void;
  /** A fresh temp directory, removed when the benchmark ends. */
  tempDir(prefix: string): string;
  /** Where this benchmark's CPU profiles go (kept after the run, under artifacts/). */
  profileDir(label: string): string;
  /** Runs `cleanup` when the benchmark ends, in reverse order of registration. */
  defer(cleanup: () => Promise<void> | void): void;
}

export interface Benchmark {
  name: string;
  title: string;
  run(context: BenchContext): Promise<BenchResult>;
}
