/** Every workload of issue 5, in the order `--workload all` runs them. */
import type { Workload } from './common.js';
import { herdWorkload, precisionWorkload, throughputWorkload } from './timing.js';

export const workloads: readonly Workload[] = [precisionWorkload, throughputWorkload, herdWorkload];
