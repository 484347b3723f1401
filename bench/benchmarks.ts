/** The benchmarks `npm run bench` knows, in the order a full run takes them. */
import { createBenchmark } from './bench-create.js';
import type { Benchmark } from './context.js';

export const benchmarks: Benchmark[] = [
  createBenchmark,
];
