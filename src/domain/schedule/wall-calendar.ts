/**
 * Matching a cron expression against wall-clock time, with no time zone in sight. Wall time
 * is counted in "wall seconds": the seconds since 1970-01-01T00:00 of the local calendar, as
 * if the zone were UTC. The DST rules in occurrence-stream.ts map wall seconds to instants.
 *
 * Dates use Howard Hinnant's days-from-civil arithmetic (proleptic Gregorian) instead of
 * Date objects: the search for "no occurrence in the next years" walks thousands of days.
 */
import type { CronExpression } from './cron-expression.js';

export const daySeconds = 86_400;

export interface CivilDate {
  year: number;
  /** 1..12 */
  month: number;
  /** 1..31 */
  day: number;
}

function floorDivide(dividend: number, divisor: number): number {
  return Math.floor(dividend / divisor);
}

export function daysFromCivil(year: number, month: number, day: number): number {
  const shiftedYear = month <= 2 ? year - 1 : year;
  const era = floorDivide(shiftedYear, 400);
  const yearOfEra = shiftedYear - era * 400;
  const dayOfYear = floorDivide(153 * (month + (month > 2 ? -3 : 9)) + 2, 5) + day - 1;
  const dayOfEra = yearOfEra * 365 + floorDivide(yearOfEra, 4) - floorDivide(yearOfEra, 100) + dayOfYear;
  return era * 146_097 + dayOfEra - 719_468;
}

export function civilFromDays(days: number): CivilDate {
  const shifted = days + 719_468;
  const era = floorDivide(shifted, 146_097);
  const dayOfEra = shifted - era * 146_097;
  const yearOfEra = floorDivide(dayOfEra - floorDivide(dayOfEra, 1_460) + floorDivide(dayOfEra, 36_524)
    - floorDivide(dayOfEra, 146_096), 365);
  const dayOfYear = dayOfEra - (365 * yearOfEra + floorDivide(yearOfEra, 4) - floorDivide(yearOfEra, 100));
  const monthIndex = floorDivide(5 * dayOfYear + 2, 153);
  const day = dayOfYear - floorDivide(153 * monthIndex + 2, 5) + 1;
  const month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9;
  return { year: yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day };
}

export function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** 0 = Sunday; 1970-01-01 was a Thursday. */
export function dayOfWeekOf(days: number): number {
  return (((days + 4) % 7) + 7) % 7;
}

/** The weekday nearest to `target` inside its month (cron `W`); 0 when the month is shorter. */
function nearestWeekday(year: number, month: number, target: number): number {
  const monthLength = daysInMonth(year, month);
  if (target > monthLength) return 0;
  const weekday = dayOfWeekOf(daysFromCivil(year, month, target));
  if (weekday === 6) return target === 1 ? 3 : target - 1;
  if (weekday === 0) return target === monthLength ? target - 2 : target + 1;
  return target;
}

function lastWeekdayOfMonth(year: number, month: number): number {
  const monthLength = daysInMonth(year, month);
  const weekday = dayOfWeekOf(daysFromCivil(year, month, monthLength));
  if (weekday === 6) return monthLength - 1;
  if (weekday === 0) return monthLength - 2;
  return monthLength;
}

function dayOfMonthMatches(expression: CronExpression, date: CivilDate): boolean {
  const rule = expression.dayOfMonth;
  if (rule.days[date.day] === true) return true;
  if (rule.lastDay && date.day === daysInMonth(date.year, date.month)) return true;
  if (rule.lastWeekday && date.day === lastWeekdayOfMonth(date.year, date.month)) return true;
  return rule.nearestWeekdayTo.some((target) => nearestWeekday(date.year, date.month, target) === date.day);
}

function dayOfWeekMatches(expression: CronExpression, date: CivilDate, weekday: number): boolean {
  const rule = expression.dayOfWeek;
  if (rule.days[weekday] === true) return true;
  if (rule.lastOfMonth.includes(weekday) && date.day + 7 > daysInMonth(date.year, date.month)) return true;
  const nth = Math.ceil(date.day / 7);
  return rule.nthOfMonth.some((entry) => entry.dayOfWeek === weekday && entry.nth === nth);
}

/**
 * Month and day fields, with Vixie's rule: when both day fields are restricted either one
 * matching is enough; when one starts with `*` both must match (so a stepped star such as `*\/2` in day-of-month
 * with `1` in day-of-week means odd-numbered Mondays, as in Vixie cron).
 */
export function dayMatches(expression: CronExpression, days: number): boolean {
  const date = civilFromDays(days);
  if (expression.months[date.month] !== true) return false;
  const weekday = dayOfWeekOf(days);
  if (expression.dayOfMonthRestricted && expression.dayOfWeekRestricted) {
    return dayOfMonthMatches(expression, date) || dayOfWeekMatches(expression, date, weekday);
  }
  return dayOfMonthMatches(expression, date) && dayOfWeekMatches(expression, date, weekday);
}

/**
 * The first matching day in [fromDays, untilDays), skipping whole months the month field
 * excludes; null if none (days before 1970 are negative, so no number can be the sentinel).
 */
export function nextMatchingDay(expression: CronExpression, fromDays: number, untilDays: number): number | null {
  let days = fromDays;
  while (days < untilDays) {
    const date = civilFromDays(days);
    if (expression.months[date.month] !== true) {
      days = date.month === 12 ? daysFromCivil(date.year + 1, 1, 1) : daysFromCivil(date.year, date.month + 1, 1);
      continue;
    }
    if (dayMatches(expression, days)) return days;
    days++;
  }
  return null;
}

/** The first matching second of the day at or after `fromSecond` (0..86 399); −1 if none. */
export function nextTimeOfDay(expression: CronExpression, fromSecond: number): number {
  const fromHour = Math.floor(fromSecond / 3600);
  const fromMinute = Math.floor((fromSecond % 3600) / 60);
  const fromSecondOfMinute = fromSecond % 60;
  for (const hour of expression.hours) {
    if (hour < fromHour) continue;
    for (const minute of expression.minutes) {
      if (hour === fromHour && minute < fromMinute) continue;
      const firstSecond = hour === fromHour && minute === fromMinute ? fromSecondOfMinute : 0;
      for (const second of expression.seconds) {
        if (second >= firstSecond) return hour * 3600 + minute * 60 + second;
      }
    }
  }
  return -1;
}

/** How many matching seconds of a day are at or after `fromSecond`, counted without enumerating. */
function countTimesOfDayFrom(expression: CronExpression, fromSecond: number): number {
  if (fromSecond >= daySeconds) return 0;
  const fromHour = Math.floor(fromSecond / 3600);
  const fromMinute = Math.floor((fromSecond % 3600) / 60);
  const fromSecondOfMinute = fromSecond % 60;
  const perMinute = expression.seconds.length;
  let count = 0;
  for (const hour of expression.hours) {
    if (hour > fromHour) count += expression.minutes.length * perMinute;
    if (hour !== fromHour) continue;
    for (const minute of expression.minutes) {
      if (minute > fromMinute) count += perMinute;
      else if (minute === fromMinute) count += expression.seconds.filter((second) => second >= fromSecondOfMinute).length;
    }
  }
  return count;
}

/** Matching wall seconds in [fromWallSeconds, untilWallSeconds), in order, lazily. */
export function* wallMatches(expression: CronExpression, fromWallSeconds: number,
  untilWallSeconds: number): Generator<number> {
  let days = floorDivide(fromWallSeconds, daySeconds);
  let fromSecond = fromWallSeconds - days * daySeconds;
  const untilDays = floorDivide(untilWallSeconds - 1, daySeconds) + 1;
  while (days < untilDays) {
    const matchingDays = nextMatchingDay(expression, days, untilDays);
    if (matchingDays === null) return;
    if (matchingDays !== days) fromSecond = 0;
    days = matchingDays;
    for (let time = nextTimeOfDay(expression, fromSecond); time >= 0; time = nextTimeOfDay(expression, time + 1)) {
      const wallSeconds = days * daySeconds + time;
      if (wallSeconds >= untilWallSeconds) return;
      yield wallSeconds;
      if (time + 1 >= daySeconds) break;
    }
    days++;
    fromSecond = 0;
  }
}

/** How many wall seconds in [fromWallSeconds, untilWallSeconds) match; O(days), not O(matches). */
export function countWallMatches(expression: CronExpression, fromWallSeconds: number, untilWallSeconds: number): number {
  if (untilWallSeconds <= fromWallSeconds) return 0;
  const firstDays = floorDivide(fromWallSeconds, daySeconds);
  const lastDays = floorDivide(untilWallSeconds - 1, daySeconds);
  const perDay = expression.hours.length * expression.minutes.length * expression.seconds.length;
  let count = 0;
  for (let days = nextMatchingDay(expression, firstDays, lastDays + 1); days !== null;
    days = nextMatchingDay(expression, days + 1, lastDays + 1)) {
    const fromSecond = days === firstDays ? fromWallSeconds - days * daySeconds : 0;
    const untilSecond = days === lastDays ? untilWallSeconds - days * daySeconds : daySeconds;
    count += fromSecond === 0 && untilSecond === daySeconds
      ? perDay
      : countTimesOfDayFrom(expression, fromSecond) - countTimesOfDayFrom(expression, untilSecond);
  }
  return count;
}

/**
 * The smallest wall-clock gap between two matching seconds, as if every day matched. The
 * matching seconds of a day are the product hours × minutes × seconds in lexicographic order,
 * so consecutive ones differ in the seconds field, at a minute boundary, at an hour boundary or
 * at midnight: four minima over the sorted fields, without enumerating the day's seconds (for
 * `* * * * * *` that walk was 86,400 steps, some 20 ms, on every create).
 */
export function minTimeOfDayGapSeconds(expression: CronExpression): number {
  const { hours, minutes, seconds } = expression;
  if (hours.length === 0 || minutes.length === 0 || seconds.length === 0) return daySeconds;
  const secondsSpan = seconds[seconds.length - 1]! - seconds[0]!;
  const minutesSpanSeconds = (minutes[minutes.length - 1]! - minutes[0]!) * 60 + secondsSpan;
  let gapSecondsMin = seconds[0]! + daySeconds - (hours[hours.length - 1]! * 3600 + minutes[minutes.length - 1]! * 60
    + seconds[seconds.length - 1]!) + hours[0]! * 3600 + minutes[0]! * 60;
  gapSecondsMin = Math.min(gapSecondsMin, smallestStep(seconds));
  gapSecondsMin = Math.min(gapSecondsMin, smallestStep(minutes) * 60 - secondsSpan);
  gapSecondsMin = Math.min(gapSecondsMin, smallestStep(hours) * 3600 - minutesSpanSeconds);
  return gapSecondsMin;
}

/** The smallest difference between neighbours of a sorted, distinct list; Infinity for fewer than two. */
function smallestStep(sorted: readonly number[]): number {
  let step = Infinity;
  for (let i = 1; i < sorted.length; i++) step = Math.min(step, sorted[i]! - sorted[i - 1]!);
  return step;
}
