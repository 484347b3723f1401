/**
 * Fixed wall-clock times of a cron schedule that a zone's DST changes skip or repeat within
 * a year, on days it runs: `tickler apply --dry-run` warns of them, since such an occurrence runs shifted
 * (gap), once or twice (repeat) by the job's `dst` policy rather than at its written time.
 * Interval-like expressions (a `*` in the second, minute or hour field) follow real time and
 * are never warned of.
 */
import { parseCron } from '../domain/schedule/cron-expression.js';
import { nextTransition, localWallTime } from '../domain/schedule/time-zone.js';
import { dayMatches } from '../domain/schedule/wall-calendar.js';

const dayMs = 86_400_000;

export interface DstWarning {
  kind: 'gap' | 'repeat';
  /** The transition's instant, as local wall time. */
  at: string;
  /** The schedule's times of day ("02:30") that fall into it. */
  times: string[];
}

function hhmm(minuteOfDay: number): string {
  return `${String(Math.floor(minuteOfDay / 60)).padStart(2, '0')}:${String(minuteOfDay % 60).padStart(2, '0')}`;
}

export function dstWarnings(cron: string, tz: string, fromMs: number, horizonMs = 366 * dayMs): DstWarning[] {
  const expression = parseCron(cron);
  if (expression.intervalLike) return [];
  const minutesOfDay = expression.hours.flatMap((hour) => expression.minutes.map((minute) => hour * 60 + minute));
  const warnings: DstWarning[] = [];
  let afterMs = fromMs;
  for (let transition = nextTransition(tz, afterMs, fromMs + horizonMs); transition !== null;
    transition = nextTransition(tz, afterMs, fromMs + horizonMs)) {
    afterMs = transition.atMs;
    const shiftMs = transition.offsetAfterMs - transition.offsetBeforeMs;
    // Local wall minutes of day covered twice (repeat) or never (gap) by the change.
    const wallStartMs = transition.atMs + Math.min(transition.offsetBeforeMs, transition.offsetAfterMs);
    const startMinute = Math.floor(((wallStartMs % dayMs) + dayMs) % dayMs / 60_000);
    const lengthMinutes = Math.abs(shiftMs) / 60_000;
    const hit = minutesOfDay.filter((minute) => ((minute - startMinute + 1440) % 1440) < lengthMinutes);
    if (hit.length > 0 && dayMatches(expression, Math.floor(wallStartMs / dayMs))) {
      warnings.push({ kind: shiftMs > 0 ? 'gap' : 'repeat', at: localWallTime(transition.atMs, tz), times: hit.map(hhmm) });
    }
  }
  return warnings;
}
