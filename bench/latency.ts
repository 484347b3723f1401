/**
 * Latency figures with hdr-histogram-js, recorded in microseconds so that sub-millisecond
 * lags keep three significant digits. A negative lag (a dispatch before its fire time) is
 * not folded into the histogram: it is counted apart, because it would be a correctness bug
 * rather than a fast dispatch.
 */
import * as hdr from 'hdr-histogram-js';
import type { Figure } from './report.js';

export interface LatencySummary {
  count: number;
  /** Samples below zero: dispatched or started before they were due. */
  earlyCount: number;
  minMs: number | null;
  p50Ms: number | null;
  p90Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
}

/** One hour in microseconds: anything later is clamped and still shows as a huge max. */
const highestTrackableUs = 3_600_000_000;

export class LatencyRecorder {
  private readonly histogram = hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: highestTrackableUs,
    numberOfSignificantValueDigits: 3,
  });
  private earlyCount = 0;
  private exactMaxMs = Number.NEGATIVE_INFINITY;

  record(latencyMs: number): void {
    if (!Number.isFinite(latencyMs)) throw new RangeError(`latency must be finite, got ${latencyMs}`);
    if (latencyMs < 0) {
      this.earlyCount += 1;
      return;
    }
    this.exactMaxMs = Math.max(this.exactMaxMs, latencyMs);
    this.histogram.recordValue(Math.min(Math.round(latencyMs * 1_000), highestTrackableUs));
  }

  summary(): LatencySummary {
    const count = this.histogram.totalCount;
    // A bucket's upper edge may lie above every sample in it (10,007 us for 10,000): no
    // quantile is above the exact maximum, so none is reported above it.
    const atMs = (percentile: number): number | null =>
      count === 0 ? null : Math.min(this.histogram.getValueAtPercentile(percentile) / 1_000, this.exactMaxMs);
    return {
      count,
      earlyCount: this.earlyCount,
      minMs: count === 0 ? null : this.histogram.minNonZeroValue / 1_000,
      p50Ms: atMs(50),
      p90Ms: atMs(90),
      p99Ms: atMs(99),
      // The exact maximum, not the histogram's bucket edge, because max has a hard target.
      maxMs: count === 0 ? null : this.exactMaxMs,
    };
  }
}

export function summarise(latenciesMs: Iterable<number>): LatencySummary {
  const recorder = new LatencyRecorder();
  for (const latencyMs of latenciesMs) recorder.record(latencyMs);
  return recorder.summary();
}

/** p50, p99 and max of a summary as figures; targets apply to p99 and max where given. */
export function latencyFigures(label: string, summary: LatencySummary,
  targets: { p99Ms?: number; maxMs?: number } = {}): Figure[] {
  return [
    { label: `${label} p50`, value: summary.p50Ms, unit: 'ms' },
    { label: `${label} p99`, value: summary.p99Ms, unit: 'ms',
      ...(targets.p99Ms === undefined ? {} : { target: { comparison: '<=' as const, value: targets.p99Ms } }) },
    { label: `${label} max`, value: summary.maxMs, unit: 'ms',
      ...(targets.maxMs === undefined ? {} : { target: { comparison: '<=' as const, value: targets.maxMs } }) },
  ];
}
