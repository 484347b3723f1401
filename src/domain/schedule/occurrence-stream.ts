/**
 * The occurrences of a cron schedule in a time zone, with the DST rules of docs/schedules.md. Real time is
 * cut into segments of constant UTC offset (between two zone transitions); inside a segment
 * an instant occurs when its wall time matches. The rules only act next to a transition T
 * that moves the offset from `before` to `after`:
 *
 * - interval-like schedules: nothing more. A spring-forward gap has no wall times to match;
 *   a fall-back repeat is matched on both passes, because both passes are real time.
 * - fixed-time schedules, gap (after > before): the missing wall times W are read with the
 *   offset before T, i.e. at W − before, which lies in [T, T + gap). `dst.gap: skip` keeps
 *   that instant (so the skipped run has a stable run_id) and flags it.
 * - fixed-time, repeat (after < before): `first` drops the second pass, [T, T + d);
 *   `last` drops the first pass, [T − d, T); `both` keeps both.
 *
 * So every rule acts within |after − before| of T. Counting uses that: far from transitions
 * the count is arithmetic over wall days; near them it enumerates.
 */
import type { DstSpec } from '../types.js';
import type { CronExpression } from './cron-expression.js';
import { countWallMatches, wallMatches } from './wall-calendar.js';
import { nextTransition, offsetAtMs, previousTransition, type ZoneTransition } from './time-zone.js';

export interface Occurrence {
  /** The UTC instant, pre-jitter. For a `gap: skip` day, the instant the shifted time would have had. */
  scheduledAtMs: number;
  /** True only for a fixed-time schedule with `gap: skip`, on a wall time inside a spring-forward gap. */
  skippedDst: boolean;
}

export interface CronStreamSchedule {
  readonly expression: CronExpression;
  readonly timeZone: string;
  readonly dst: DstSpec;
}

const secondMs = 1_000;
const dayMs = 86_400_000;
/** Segments are cut at least yearly so that a zone without DST is not scanned to the horizon at once. */
const segmentChunkMs = 366 * dayMs;
/** No transition moves the offset by a day or more (Pacific/Apia 2011 moved exactly a day). */
const transitionReachMs = 2 * dayMs;

function spreadMs(transition: ZoneTransition): number {
  return Math.abs(transition.offsetAfterMs - transition.offsetBeforeMs);
}

function isGap(transition: ZoneTransition | null): transition is ZoneTransition {
  return transition !== null && transition.offsetAfterMs > transition.offsetBeforeMs;
}

function isRepeat(transition: ZoneTransition | null): transition is ZoneTransition {
  return transition !== null && transition.offsetAfterMs < transition.offsetBeforeMs;
}

interface Segment {
  readonly startMs: number;
  readonly endMs: number;
  readonly offsetMs: number;
  /** The transition that began this segment, if it is recent enough to matter. */
  readonly previous: ZoneTransition | null;
  /** The transition that ends this segment, if any before the chunk's end. */
  readonly next: ZoneTransition | null;
}

function segmentAt(timeZone: string, startMs: number, untilMs: number): Segment {
  const chunkEndMs = Math.min(startMs + segmentChunkMs, untilMs);
  const next = nextTransition(timeZone, startMs, chunkEndMs + transitionReachMs);
  return {
    startMs,
    endMs: next === null ? chunkEndMs : Math.min(next.atMs, untilMs),
    offsetMs: offsetAtMs(timeZone, startMs),
    previous: previousTransition(timeZone, startMs, transitionReachMs),
    next,
  };
}

/** Wall seconds whose instant (wall − offset) lies in [fromMs, untilMs). */
function wallRange(fromMs: number, untilMs: number, offsetMs: number): [number, number] {
  return [Math.ceil((fromMs + offsetMs) / secondMs), Math.ceil((untilMs + offsetMs) / secondMs)];
}

function* regularOccurrences(schedule: CronStreamSchedule, segment: Segment): Generator<Occurrence> {
  const fixedTime = !schedule.expression.intervalLike;
  const { previous, next, offsetMs } = segment;
  // Instants in [dropFromMs, dropUntilMs) ranges are the pass of a repeat the rule leaves out.
  const dropSecondPass = fixedTime && isRepeat(previous) && schedule.dst.repeat === 'first'
    ? { fromMs: previous.atMs, untilMs: previous.atMs + spreadMs(previous) } : null;
  const dropFirstPass = fixedTime && isRepeat(next) && schedule.dst.repeat === 'last'
    ? { fromMs: next.atMs - spreadMs(next), untilMs: next.atMs } : null;
  const [fromWall, untilWall] = wallRange(segment.startMs, segment.endMs, offsetMs);
  for (const wallSeconds of wallMatches(schedule.expression, fromWall, untilWall)) {
    const instantMs = wallSeconds * secondMs - offsetMs;
    if (dropSecondPass !== null && instantMs >= dropSecondPass.fromMs && instantMs < dropSecondPass.untilMs) continue;
    if (dropFirstPass !== null && instantMs >= dropFirstPass.fromMs && instantMs < dropFirstPass.untilMs) continue;
    yield { scheduledAtMs: instantMs, skippedDst: false };
  }
}

/** Fixed-time wall times inside the gap that began this segment, read with the offset before it. */
function* shiftedGapOccurrences(schedule: CronStreamSchedule, segment: Segment): Generator<Occurrence> {
  const previous = segment.previous;
  if (schedule.expression.intervalLike || !isGap(previous)) return;
  const fromWall = Math.ceil((Math.max(previous.atMs, segment.startMs) + previous.offsetBeforeMs) / secondMs);
  const untilWall = (previous.atMs + previous.offsetAfterMs) / secondMs;
  const skippedDst = schedule.dst.gap === 'skip';
  for (const wallSeconds of wallMatches(schedule.expression, fromWall, untilWall)) {
    yield { scheduledAtMs: wallSeconds * secondMs - previous.offsetBeforeMs, skippedDst };
  }
}

/** Merges two increasing streams; one instant is one occurrence, and a real fire beats a skipped one. */
function* mergeOccurrences(left: Iterator<Occurrence>, right: Iterator<Occurrence>): Generator<Occurrence> {
  let leftNext = left.next();
  let rightNext = right.next();
  while (leftNext.done !== true || rightNext.done !== true) {
    if (rightNext.done === true || (leftNext.done !== true && leftNext.value.scheduledAtMs < rightNext.value.scheduledAtMs)) {
      yield leftNext.value as Occurrence;
      leftNext = left.next();
    } else if (leftNext.done === true || rightNext.value.scheduledAtMs < leftNext.value.scheduledAtMs) {
      yield rightNext.value;
      rightNext = right.next();
    } else {
      yield { scheduledAtMs: leftNext.value.scheduledAtMs, skippedDst: leftNext.value.skippedDst && rightNext.value.skippedDst };
      leftNext = left.next();
      rightNext = right.next();
    }
  }
}

/** Occurrences strictly after `afterMs` and strictly before `untilMs`, increasing, lazily. */
export function* cronOccurrences(schedule: CronStreamSchedule, afterMs: number, untilMs: number): Generator<Occurrence> {
  let startMs = (Math.floor(afterMs / secondMs) + 1) * secondMs;
  let lastMs = afterMs;
  while (startMs < untilMs) {
    const segment = segmentAt(schedule.timeZone, startMs, untilMs);
    const merged = mergeOccurrences(regularOccurrences(schedule, segment), shiftedGapOccurrences(schedule, segment));
    for (const occurrence of merged) {
      if (occurrence.scheduledAtMs >= untilMs) return;
      // Only zones with transitions closer together than their shift could reorder; keep the promise.
      if (occurrence.scheduledAtMs <= lastMs) continue;
      lastMs = occurrence.scheduledAtMs;
      yield occurrence;
    }
    startMs = segment.endMs;
  }
}

function countByEnumeration(schedule: CronStreamSchedule, fromMs: number, untilMs: number): number {
  let count = 0;
  for (const _occurrence of cronOccurrences(schedule, fromMs - 1, untilMs)) count++;
  return count;
}

/**
 * How many occurrences lie strictly after `afterMs` and strictly before `untilMs`, without
 * enumerating them: O(days + transitions × matches near a transition).
 */
export function countCronOccurrences(schedule: CronStreamSchedule, afterMs: number, untilMs: number): number {
  const timeZone = schedule.timeZone;
  let fromMs = Math.floor(afterMs) + 1;
  let count = 0;
  while (fromMs < untilMs) {
    const previous = previousTransition(timeZone, fromMs, transitionReachMs);
    if (previous !== null && fromMs < previous.atMs + spreadMs(previous)) {
      const endMs = Math.min(previous.atMs + spreadMs(previous), untilMs);
      count += countByEnumeration(schedule, fromMs, endMs);
      fromMs = endMs;
      continue;
    }
    const chunkEndMs = Math.min(fromMs + segmentChunkMs, untilMs);
    const next = nextTransition(timeZone, fromMs, chunkEndMs + transitionReachMs);
    if (next !== null && next.atMs - spreadMs(next) <= fromMs) {
      const endMs = Math.min(next.atMs + spreadMs(next), untilMs);
      count += countByEnumeration(schedule, fromMs, endMs);
      fromMs = endMs;
      continue;
    }
    const quietEndMs = next === null ? chunkEndMs : Math.min(next.atMs - spreadMs(next), untilMs);
    const [fromWall, untilWall] = wallRange(fromMs, quietEndMs, offsetAtMs(timeZone, fromMs));
    count += countWallMatches(schedule.expression, fromWall, untilWall);
    fromMs = quietEndMs;
  }
  return count;
}

/**
 * The newest `countMax` occurrences strictly between `afterMs` and `untilMs`, increasing.
 * Found by widening a window back from `untilMs` and bisecting on counts, so a backlog of
 * millions is never walked.
 */
export function newestCronOccurrences(schedule: CronStreamSchedule, afterMs: number, untilMs: number,
  countMax: number): Occurrence[] {
  if (countMax <= 0 || untilMs <= afterMs) return [];
  // Widen [lowMs, untilMs) until it holds more than countMax; highMs holds at most countMax.
  let highMs = untilMs;
  let spanMs = secondMs;
  let lowMs: number;
  for (;;) {
    lowMs = Math.max(untilMs - spanMs, afterMs);
    if (countCronOccurrences(schedule, lowMs, untilMs) > countMax) break;
    if (lowMs === afterMs) return [...cronOccurrences(schedule, afterMs, untilMs)];
    highMs = lowMs;
    spanMs *= 2;
  }
  // Bisect to one second: (lowMs, highMs] then holds the one instant that tips the count.
  while (highMs - lowMs > secondMs) {
    const middleMs = lowMs + Math.floor((highMs - lowMs) / 2 / secondMs) * secondMs;
    if (countCronOccurrences(schedule, middleMs, untilMs) > countMax) lowMs = middleMs;
    else highMs = middleMs;
  }
  return [...cronOccurrences(schedule, highMs, untilMs)].slice(-countMax);
}
