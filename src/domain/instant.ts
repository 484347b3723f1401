/**
 * Instants in the one text form most clients send: what `toISOString` writes. Pure, in the
 * domain, so both the schedule compiler and the API's answer writer read it the same way.
 */
const daysInMonth = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** The number written by `length` ASCII digits at `start`, or NaN if any is not a digit. */
function digitsAt(text: string, start: number, length: number): number {
  let value = 0;
  for (let index = start; index < start + length; index++) {
    const digit = text.charCodeAt(index) - 0x30;
    if (digit < 0 || digit > 9) return Number.NaN;
    value = value * 10 + digit;
  }
  return value;
}

/**
 * The instant of a text in exactly the form `toISOString` writes (`2026-12-01T09:00:00.000Z`,
 * which is what the SDK sends), from 1970 on; null for any other text, which then takes the
 * general path of `parseInstant`. A text it accepts is its own normal form, so it is kept as
 * given instead of being formatted again. Reading it digit by digit instead of by regular
 * expression, calendar check, `Date.parse` and `toISOString` took the schedule of a one-shot
 * create from ~1.0 to ~0.3 us (100,000 canonical texts, CPU time).
 */
export function canonicalInstantMs(text: string): number | null {
  if (text.length !== 24 || text[4] !== '-' || text[7] !== '-' || text[10] !== 'T' || text[13] !== ':'
    || text[16] !== ':' || text[19] !== '.' || text[23] !== 'Z') return null;
  const year = digitsAt(text, 0, 4);
  const month = digitsAt(text, 5, 2);
  const day = digitsAt(text, 8, 2);
  const hour = digitsAt(text, 11, 2);
  const minute = digitsAt(text, 14, 2);
  const second = digitsAt(text, 17, 2);
  const milli = digitsAt(text, 20, 3);
  // NaN fails every comparison, so a non-digit anywhere ends here too.
  if (!(year >= 1970 && month >= 1 && month <= 12 && day >= 1 && hour <= 23 && minute <= 59 && second <= 59 && milli >= 0)) {
    return null;
  }
  const leapDay = month === 2 && year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 1 : 0;
  if (day > daysInMonth[month - 1]! + leapDay) return null;
  return Date.UTC(year, month - 1, day, hour, minute, second, milli);
}

