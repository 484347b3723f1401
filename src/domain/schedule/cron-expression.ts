/**
 * The cron grammar (docs/schedules.md), parsed into sets over wall-clock fields. Our own parser
 * rather than croner's, because the DST rules need the fields themselves (is the hour field
 * a `*`?) and because hostile input must cost linear time and fail only with a TicklerError.
 *
 * Grammar: 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first;
 * per field a comma list of `*`, `?` (day fields), `N`, `N-M`, each optionally `/STEP`
 * (`N/STEP` runs to the field's end); names `JAN`–`DEC`, `SUN`–`SAT`; day-of-month `L`,
 * `LW`, `NW`; day-of-week `NL` (last N-day of the month), `N#K` (K-th N-day), 7 = Sunday;
 * the macros `@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually`.
 */
import { TicklerError } from '../errors.js';
import { cronLengthMax } from '../limits.js';

export interface DayOfMonthRule {
  /** Index 1..31. */
  readonly days: readonly boolean[];
  readonly lastDay: boolean;
  readonly lastWeekday: boolean;
  /** `15W`: the weekday nearest the 15th, inside the month. */
  readonly nearestWeekdayTo: readonly number[];
}

export interface DayOfWeekRule {
  /** Index 0..6, Sunday 0. */
  readonly days: readonly boolean[];
  /** `5L`: the last Friday of the month. */
  readonly lastOfMonth: readonly number[];
  /** `1#2`: the second Monday. */
  readonly nthOfMonth: readonly { readonly dayOfWeek: number; readonly nth: number }[];
}

export interface CronExpression {
  /** Sorted, distinct. */
  readonly seconds: readonly number[];
  readonly minutes: readonly number[];
  readonly hours: readonly number[];
  /** Index 1..12. */
  readonly months: readonly boolean[];
  readonly dayOfMonth: DayOfMonthRule;
  readonly dayOfWeek: DayOfWeekRule;
  /** A day field not starting with `*` or `?` restricts; both restricted means either matches (Vixie). */
  readonly dayOfMonthRestricted: boolean;
  readonly dayOfWeekRestricted: boolean;
  /** Second, minute or hour field begins with `*` (Vixie cron's split). */
  readonly intervalLike: boolean;
}

const macros: Record<string, string> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};

const monthNames = ['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC'];
const dayNames = ['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];

function invalid(message: string): TicklerError {
  return new TicklerError('invalid_schedule', message, { field: 'schedule.cron' });
}

interface FieldSpec {
  readonly label: string;
  readonly min: number;
  readonly max: number;
  /** Names mapped to min + index. */
  readonly names?: readonly string[];
  /** `?` ("no specific value") is a day-field wildcard only. */
  readonly allowsQuestionMark?: boolean;
}

const secondField: FieldSpec = { label: 'second', min: 0, max: 59 };
const minuteField: FieldSpec = { label: 'minute', min: 0, max: 59 };
const hourField: FieldSpec = { label: 'hour', min: 0, max: 23 };
const dayOfMonthField: FieldSpec = { label: 'day-of-month', min: 1, max: 31, allowsQuestionMark: true };
const monthField: FieldSpec = { label: 'month', min: 1, max: 12, names: monthNames };
/** 7 is accepted as Sunday and folded to 0 after expansion. */
const dayOfWeekField: FieldSpec = { label: 'day-of-week', min: 0, max: 7, names: dayNames, allowsQuestionMark: true };

function parseValue(text: string, field: FieldSpec): number {
  let value: number;
  if (/^\d{1,4}$/.test(text)) {
    value = Number(text);
  } else {
    const index = field.names?.indexOf(text.toUpperCase()) ?? -1;
    if (index < 0) throw invalid(`${field.label} field: "${text.slice(0, 32)}" is not a number or name`);
    value = field.min + index;
  }
  if (value < field.min || value > field.max) {
    throw invalid(`${field.label} field: ${value} is outside ${field.min}-${field.max}`);
  }
  return value;
}

/** Marks the values one list item (`*`, `N`, `N-M`, with optional `/STEP`) stands for. */
function markItem(item: string, field: FieldSpec, marks: boolean[]): void {
  const slash = item.indexOf('/');
  const rangeText = slash < 0 ? item : item.slice(0, slash);
  let step = 1;
  if (slash >= 0) {
    const stepText = item.slice(slash + 1);
    if (!/^\d{1,4}$/.test(stepText)) throw invalid(`${field.label} field: step "${stepText.slice(0, 32)}" is not a number`);
    step = Number(stepText);
    if (step < 1 || step > field.max) throw invalid(`${field.label} field: step ${step} is outside 1-${field.max}`);
  }
  let first: number;
  let last: number;
  if (rangeText === '*' || (rangeText === '?' && field.allowsQuestionMark === true)) {
    first = field.min;
    last = field.max;
  } else {
    const dash = rangeText.indexOf('-', 1);
    if (dash < 0) {
      first = parseValue(rangeText, field);
      last = slash < 0 ? first : field.max;
    } else {
      first = parseValue(rangeText.slice(0, dash), field);
      last = parseValue(rangeText.slice(dash + 1), field);
      if (first > last) throw invalid(`${field.label} field: range ${rangeText} runs backwards`);
    }
  }
  for (let value = first; value <= last; value += step) marks[value] = true;
}

function markList(text: string, field: FieldSpec, special?: (item: string) => boolean): boolean[] {
  const marks: boolean[] = new Array<boolean>(field.max + 1).fill(false);
  for (const item of text.split(',')) {
    if (item.length === 0) throw invalid(`${field.label} field: empty list item`);
    if (special?.(item) === true) continue;
    markItem(item, field, marks);
  }
  return marks;
}

function sortedValues(marks: readonly boolean[]): number[] {
  const values: number[] = [];
  marks.forEach((marked, value) => {
    if (marked) values.push(value);
  });
  return values;
}

function parseDayOfMonth(text: string): DayOfMonthRule {
  let lastDay = false;
  let lastWeekday = false;
  const nearestWeekdayTo: number[] = [];
  const days = markList(text, dayOfMonthField, (item) => {
    const upper = item.toUpperCase();
    if (upper === 'L') return (lastDay = true);
    if (upper === 'LW') return (lastWeekday = true);
    if (upper.endsWith('W')) {
      nearestWeekdayTo.push(parseValue(item.slice(0, -1), dayOfMonthField));
      return true;
    }
    return false;
  });
  return { days, lastDay, lastWeekday, nearestWeekdayTo };
}

function parseDayOfWeek(text: string): DayOfWeekRule {
  const lastOfMonth: number[] = [];
  const nthOfMonth: { dayOfWeek: number; nth: number }[] = [];
  const marks = markList(text, dayOfWeekField, (item) => {
    const hash = item.indexOf('#');
    if (hash >= 0) {
      const nthText = item.slice(hash + 1);
      if (!/^[1-5]$/.test(nthText)) throw invalid(`day-of-week field: "#${nthText.slice(0, 32)}" must be #1 to #5`);
      nthOfMonth.push({ dayOfWeek: parseValue(item.slice(0, hash), dayOfWeekField) % 7, nth: Number(nthText) });
      return true;
    }
    if (item.length > 1 && item.toUpperCase().endsWith('L')) {
      lastOfMonth.push(parseValue(item.slice(0, -1), dayOfWeekField) % 7);
      return true;
    }
    return false;
  });
  const days = marks.slice(0, 7);
  if (marks[7] === true) days[0] = true;
  return { days, lastOfMonth, nthOfMonth };
}

function splitFields(source: string): string[] {
  if (typeof source !== 'string') throw invalid('cron must be a string');
  if (source.length > cronLengthMax) throw invalid(`cron is longer than ${cronLengthMax} characters`);
  const trimmed = source.trim();
  if (trimmed.length === 0) throw invalid('cron is empty');
  const expanded = trimmed.startsWith('@') ? macros[trimmed.toLowerCase()] : trimmed;
  if (expanded === undefined) throw invalid(`unknown macro "${trimmed.slice(0, 32)}"`);
  const fields = expanded.split(/\s+/);
  if (fields.length !== 5 && fields.length !== 6) {
    throw invalid(`cron needs 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, got ${fields.length}`);
  }
  return fields.length === 5 ? ['0', ...fields] : fields;
}

function isWildcard(field: string): boolean {
  return field.startsWith('*') || field.startsWith('?');
}

/** Parses a cron expression; throws TicklerError('invalid_schedule') on anything else. */
export function parseCron(source: string): CronExpression {
  const [secondText, minuteText, hourText, dayOfMonthText, monthText, dayOfWeekText] = splitFields(source) as
    [string, string, string, string, string, string];
  const seconds = sortedValues(markList(secondText, secondField));
  const minutes = sortedValues(markList(minuteText, minuteField));
  const hours = sortedValues(markList(hourText, hourField));
  const months = markList(monthText, monthField);
  return {
    seconds,
    minutes,
    hours,
    months,
    dayOfMonth: parseDayOfMonth(dayOfMonthText),
    dayOfWeek: parseDayOfWeek(dayOfWeekText),
    dayOfMonthRestricted: !isWildcard(dayOfMonthText),
    dayOfWeekRestricted: !isWildcard(dayOfWeekText),
    intervalLike: secondText.startsWith('*') || minuteText.startsWith('*') || hourText.startsWith('*'),
  };
}
