/** Every workload, in the order `--workload all` runs them. */
import type { Workload } from './common.js';
import { cancelWorkload, createWorkload } from './lifecycle.js';
import { recurringWorkload } from './recurring.js';
import { crashWorkload, memoryWorkload } from './resilience.js';
import { herdWorkload, precisionWorkload, throughputWorkload } from './timing.js';

export const workloads: readonly Workload[] = [
  createWorkload, precisionWorkload, throughputWorkload, herdWorkload, cancelWorkload, recurringWorkload, memoryWorkload, crashWorkload,
];
