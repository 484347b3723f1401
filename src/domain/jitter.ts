/**
 * Jitter inside a job's tolerance window (docs/schedules.md, the midnight herd): each job fires at a fixed
 * offset after its scheduled time, drawn once from its id, so 100 000 jobs on `0 0 * * *`
 * spread over the window while each one keeps a steady rhythm. The window never exceeds
 * half the smallest gap between two occurrences, so a jittered fire stays nearer its own
 * occurrence than the next one. The run id uses the pre-jitter time, never this offset.
 */
import { createHash } from 'node:crypto';

/** 2^48: six bytes of sha256 give a uniform fraction with more resolution than any window needs. */
const fractionScale = 2 ** 48;

/** The window in ms: min(toleranceS × 1000, floor(minGapMs / 2)); 0 for a bad or zero tolerance. */
export function jitterWindowMs(toleranceS: number, minGapMs: number): number {
  if (!(toleranceS > 0) || !(minGapMs > 0)) return 0;
  return Math.floor(Math.min(toleranceS * 1_000, Math.floor(minGapMs / 2)));
}

/** Deterministic offset in [0, window], window = min(toleranceS*1000, floor(minGapMs/2)); 0 when tolerance 0. */
export function jitterOffsetMs(jobId: string, toleranceS: number, minGapMs: number): number {
  const windowMs = jitterWindowMs(toleranceS, minGapMs);
  if (windowMs === 0) return 0;
  const digest = createHash('sha256').update(`jitter|${jobId}`).digest();
  const fraction = digest.readUIntBE(0, 6) / fractionScale;
  return Math.floor(fraction * (windowMs + 1));
}
