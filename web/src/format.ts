/** Times, durations and cron expressions in words. */

const pad = (n: number) => String(n).padStart(2, '0');

export function utc(iso: string | null): string {
  if (iso === null) return '';
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
}

/** The instant in the browser's time zone, `2026-03-29 04:00:00`. */
export function local(iso: string | null): string {
  if (iso === null) return '';
  const d = new Date(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** The instant's wall time in `tz`, `2026-03-29 02:00 CEST`. */
export function inZone(iso: string | null, tz: string): string {
  if (iso === null) return '';
  try {
    const parts = new Intl.DateTimeFormat('en-GB', {
      timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', hour12: false,
      timeZoneName: 'short',
    }).formatToParts(new Date(iso));
    const part = (type: string) => parts.find((p) => p.type === type)?.value ?? '';
    return `${part('year')}-${part('month')}-${part('day')} ${part('hour')}:${part('minute')} ${part('timeZoneName')}`;
  } catch {
    return utc(iso);
  }
}

export function ago(iso: string | null, nowMs: number): string {
  if (iso === null) return '';
  const s = Math.round((nowMs - Date.parse(iso)) / 1000);
  const future = s < 0;
  const text = duration(Math.abs(s));
  return future ? `in ${text}` : `${text} ago`;
}

export function duration(seconds: number): string {
  if (seconds < 60) return `${Math.round(seconds)}s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)}m`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)}h ${Math.round((seconds % 3600) / 60)}m`;
  return `${Math.floor(seconds / 86_400)}d ${Math.round((seconds % 86_400) / 3600)}h`;
}

export function lag(seconds: number | null): string {
  if (seconds === null) return '';
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  return duration(seconds);
}

const dayNames = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const monthNames = ['', 'January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October',
  'November', 'December'];

const isNumber = (field: string) => /^\d+$/.test(field);

function listOf(field: string, names: string[] | null, word: string): string | null {
  if (field === '*' || field === '?') return null;
  const step = /^\*\/(\d+)$/.exec(field);
  if (step !== null) return `every ${step[1]} ${word}s`;
  if (names !== null && /^[\d,-]+$/.test(field)) {
    return field.split(',').map((item) => item.split('-').map((n) => names[Number(n) % names.length] ?? n).join(' to ')).join(', ');
  }
  return `${word} ${field}`;
}

/** Common five-field cron expressions in words; anything else as written. */
export function cronInWords(cron: string): string {
  const fields = cron.trim().split(/\s+/);
  if (fields.length !== 5) return cron;
  const [minute, hour, dom, month, dow] = fields as [string, string, string, string, string];
  let time: string;
  if (isNumber(minute) && isNumber(hour)) time = `at ${pad(Number(hour))}:${pad(Number(minute))}`;
  else if (isNumber(minute) && /^[\d,]+$/.test(hour)) time = `at minute ${minute} of hours ${hour}`;
  else if (isNumber(minute) && hour === '*') time = minute === '0' ? 'every hour' : `at minute ${minute} of every hour`;
  else if (minute === '*' && hour === '*') time = 'every minute';
  else if (/^\*\/\d+$/.test(minute) && hour === '*') time = `every ${minute.slice(2)} minutes`;
  else if (isNumber(minute) && /^\*\/\d+$/.test(hour)) time = `at minute ${minute} every ${hour.slice(2)} hours`;
  else return cron;
  const days: string[] = [];
  const weekdays = listOf(dow, dayNames, 'weekday');
  const monthDays = listOf(dom, null, 'day');
  const months = listOf(month, monthNames, 'month');
  if (monthDays !== null) days.push(`on ${monthDays.replace(/^day /, 'day ')} of the month`);
  if (weekdays !== null) days.push(`on ${weekdays}`);
  if (months !== null) days.push(`in ${months}`);
  if (days.length === 0 && (time.startsWith('at ') && isNumber(hour))) days.push('every day');
  return [time, ...days].join(' ');
}

export function scheduleInWords(schedule: { cron: string; tz: string } | { at: string }): string {
  if ('cron' in schedule) return `${cronInWords(schedule.cron)} (${schedule.tz})`;
  return `once, at ${utc(schedule.at)}`;
}
