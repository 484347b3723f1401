/** The benchmarks `npm run bench` knows, in the order a full run takes them. */
import { clusterFailoverBenchmark, clusterPrecisionBenchmark, clusterThroughputBenchmark } from './bench-cluster.js';
import { createBenchmark } from './bench-create.js';
import { fairnessBenchmark } from './bench-fairness.js';
import { cronHerdRealBenchmark, cronHerdVirtualBenchmark } from './bench-cron-herd.js';
import { herdBenchmark } from './bench-herd.js';
import { idleBenchmark } from './bench-idle.js';
import { memoryBenchmark } from './bench-memory.js';
import { precisionBenchmark } from './bench-precision.js';
import { restartBenchmark } from './bench-restart.js';
import { retryWakeupBenchmark } from './bench-retry-wakeup.js';
import { runNowBenchmark } from './bench-run-now.js';
import type { Benchmark } from './context.js';

export const benchmarks: Benchmark[] = [
  createBenchmark,
  precisionBenchmark,
  herdBenchmark,
  idleBenchmark,
  retryWakeupBenchmark,
  runNowBenchmark,
  memoryBenchmark,
  restartBenchmark,
  cronHerdVirtualBenchmark,
  cronHerdRealBenchmark,
  clusterThroughputBenchmark,
  clusterPrecisionBenchmark,
  clusterFailoverBenchmark,
  fairnessBenchmark,
];
