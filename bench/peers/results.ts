/**
 * The shape of one workload's outcome on one system, as written to the results JSON and
 * read back by the report and chart writers. Figures carry their unit and which direction
 * is better, so the report can compute ratios against tickler without knowing the workload.
 */
import type { SystemName } from './types.js';

export const workloadIds = ['W1', 'W2', 'W3', 'W4', 'W5', 'W6', 'W7', 'W8'] as const;
export type WorkloadId = (typeof workloadIds)[number];

export interface PeerFigure {
  /** Stable key, e.g. `lag_p99`. */
  key: string;
  label: string;
  value: number | null;
  unit: 'ms' | 's' | 'jobs/s' | 'count' | 'MB';
  /** `zero`: a correctness count that must be 0. */
  better: 'lower' | 'higher' | 'zero';
  /** Drawn in the workload's chart. */
  chart?: 'lag' | 'rate' | 'time' | 'memory';
}

export interface WorkloadRun {
  workload: WorkloadId;
  system: SystemName;
  settings: string;
  figures: PeerFigure[];
  notes: string[];
  /** Set when the run failed; figures may be partial. */
  error?: string;
  startedAt: string;
  durationMs: number;
  /** The commit measured (see `sourceRevision`). */
  revision?: string;
  /** The job counts' multiplier when it was not 1 (`--scale`). */
  scale?: number;
  /** How many interleaved rounds the figures are the median of (`--rounds`), when more than one. */
  rounds?: number;
  /**
   * The machine it ran on (`machineDescription()`). Runs land on different machines and a
   * results file accumulates runs across them; runs from before 2026-12-03 did not record it.
   */
  machine?: string;
}

export interface ResultsFile {
  startedAt: string;
  finishedAt: string;
  command: string;
  machine: string;
  quick: boolean;
  runs: WorkloadRun[];
}

export function figure(key: string, label: string, value: number | null, unit: PeerFigure['unit'],
  better: PeerFigure['better'], chart?: PeerFigure['chart']): PeerFigure {
  return { key, label, value, unit, better, ...(chart === undefined ? {} : { chart }) };
}
