/**
 * `tickler schedules preview "30 2 * * *" --tz America/New_York`: the next occurrences of a
 * cron expression, computed here with the scheduler's own domain code (no server needed),
 * each with its local wall time, its UTC instant and, next to a DST transition, a note of
 * what the job's `dst` rules do there (docs/API.md "Schedules"). A `gap: skip` occurrence is
 * listed, marked skipped, since the ledger records it as a `skipped_dst` run.
 */
import { Option, type Command } from 'commander';
import { TicklerError } from '../errors.js';
import { dstGapRules, dstRepeatRules, type DstSpec } from '../domain/types.js';
import { compileSchedule, occurrencesAfter, type Occurrence } from '../domain/schedule.js';
import { formatOffset, localWallTime, nextTransition, previousTransition, type ZoneTransition } from '../domain/schedule/time-zone.js';
import { iso } from '../service/job-spec.js';
import type { Output } from './api-commands.js';
import { CliUsageError, integerIn } from './serve-options.js';
import { formatTable, shortTime, type Column } from './table.js';

export interface SchedulePreviewRequest {
  cron: string;
  tz: string;
  fromMs: number;
  count: number;
  dst: DstSpec;
}

export interface PreviewRow {
  scheduled_at: string;
  /** Local wall time with its offset; for a skipped occurrence, the time the shift would have given. */
  local: string;
  skipped: boolean;
  /** What the DST rules did to this occurrence, or null away from a transition. */
  note: string | null;
}

/** No zone's offset changes by more than this at once (Lord Howe: 30 min; Troll: 2 h). */
const transitionReachMs = 3 * 3_600_000;
const weekdays = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];

/** Throws the domain's TicklerError (invalid_schedule, invalid_timezone) for a bad expression or zone. */
export function previewRows(request: SchedulePreviewRequest): PreviewRow[] {
  const schedule = compileSchedule({ cron: request.cron, tz: request.tz }, request.dst);
  // The same schedule under `gap: skip` flags exactly the occurrences that a gap moved.
  const skipping = compileSchedule({ cron: request.cron, tz: request.tz }, { ...request.dst, gap: 'skip' });
  const context: NoteContext = {
    tz: request.tz, dst: request.dst, intervalLike: schedule.intervalLike, noted: new Set<number>(),
    movedByGap: (atMs) => occurrencesAfter(skipping, atMs - 1, 1)[0]?.skippedDst === true,
  };
  return occurrencesAfter(schedule, request.fromMs, request.count).map((occurrence) => ({
    scheduled_at: iso(occurrence.scheduledAtMs),
    local: localWallTime(occurrence.scheduledAtMs, request.tz),
    skipped: occurrence.skippedDst,
    note: dstNoteOf(occurrence, context),
  }));
}

interface NoteContext {
  tz: string;
  dst: DstSpec;
  intervalLike: boolean;
  /** Transitions already noted (an interval-like schedule notes each once). */
  noted: Set<number>;
  /** Whether the occurrence at this instant is a wall time the spring-forward gap moved. */
  movedByGap: (atMs: number) => boolean;
}

/** `2027-03-14T03:30:00.000-04:00` as `Sun 2027-03-14 03:30:00 -04:00`. */
export function readableLocal(local: string): string {
  const match = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}:\d{2}:\d{2})(?:\.\d+)?([+-]\d{2}:\d{2}(?::\d{2})?)$/.exec(local);
  if (match === null) return local;
  const [, year, month, day, time, offset] = match;
  const weekday = weekdays[new Date(Date.UTC(Number(year), Number(month) - 1, Number(day))).getUTCDay()];
  return `${weekday} ${year}-${month}-${day} ${time} ${offset}`;
}

function wallClock(instantMs: number, offsetMs: number): string {
  return new Date(instantMs + offsetMs).toISOString().slice(11, 16);
}

function wallDate(instantMs: number, offsetMs: number): string {
  return new Date(instantMs + offsetMs).toISOString().slice(0, 10);
}

function jump(transition: ZoneTransition): string {
  const { atMs, offsetBeforeMs, offsetAfterMs } = transition;
  return `clocks go from ${wallClock(atMs, offsetBeforeMs)} to ${wallClock(atMs, offsetAfterMs)}, ` +
    `${formatOffset(offsetBeforeMs)} to ${formatOffset(offsetAfterMs)}`;
}

/**
 * The rules act only within the size of a transition's shift of it (occurrence-stream.ts):
 * after a spring-forward T, [T, T + shift) holds the shifted (or skipped) wall times; around a
 * fall-back T, [T − shift, T) is a repeated hour's first pass and [T, T + shift) its second.
 */
function dstNoteOf(occurrence: Occurrence, context: NoteContext): string | null {
  const atMs = occurrence.scheduledAtMs;
  const before = previousTransition(context.tz, atMs, transitionReachMs);
  if (before !== null && atMs - before.atMs < Math.abs(before.offsetAfterMs - before.offsetBeforeMs)) {
    if (before.offsetAfterMs > before.offsetBeforeMs) return springNote(occurrence, before, context);
    return repeatNote(atMs, before, 'second', context);
  }
  const after = nextTransition(context.tz, atMs, atMs + transitionReachMs);
  if (after !== null && after.offsetAfterMs < after.offsetBeforeMs && after.atMs - atMs <= after.offsetBeforeMs - after.offsetAfterMs) {
    return repeatNote(atMs, after, 'first', context);
  }
  return null;
}

function springNote(occurrence: Occurrence, transition: ZoneTransition, context: NoteContext): string | null {
  const date = wallDate(transition.atMs, transition.offsetAfterMs);
  if (context.intervalLike) {
    if (context.noted.has(transition.atMs)) return null;
    context.noted.add(transition.atMs);
    return `${date}: ${jump(transition)}; the wall times between do not exist and have no runs`;
  }
  if (!occurrence.skippedDst && !context.movedByGap(occurrence.scheduledAtMs)) return null;
  const wanted = wallClock(occurrence.scheduledAtMs, transition.offsetBeforeMs);
  const missing = `${wanted} does not exist on ${date} (${jump(transition)})`;
  if (occurrence.skippedDst) return `${missing}: skipped (dst.gap skip), recorded as a skipped_dst run`;
  return `${missing}: runs at ${wallClock(occurrence.scheduledAtMs, transition.offsetAfterMs)} instead (dst.gap ${context.dst.gap})`;
}

function repeatNote(atMs: number, transition: ZoneTransition, pass: 'first' | 'second', context: NoteContext): string {
  const offsetMs = pass === 'first' ? transition.offsetBeforeMs : transition.offsetAfterMs;
  const rule = context.intervalLike ? 'interval-like schedules run on both' : `dst.repeat ${context.dst.repeat}`;
  return `${wallClock(atMs, offsetMs)} happens twice on ${wallDate(atMs, offsetMs)} (${jump(transition)}): ` +
    `this is the ${pass} time (${rule})`;
}

const previewColumns = (tz: string): Column<PreviewRow>[] => [
  { header: `LOCAL (${tz})`, cell: (row) => (row.skipped ? `(${readableLocal(row.local)})` : readableLocal(row.local)) },
  { header: 'UTC', cell: (row) => shortTime(row.scheduled_at) },
  { header: 'NOTE', cell: (row) => row.note ?? '', whole: true },
];

export function formatPreview(request: SchedulePreviewRequest, rows: readonly PreviewRow[]): string {
  const heading = `${request.cron} in ${request.tz} (dst.gap ${request.dst.gap}, dst.repeat ${request.dst.repeat}), ` +
    `the next ${rows.length} after ${shortTime(iso(request.fromMs))}, before jitter:`;
  return rows.length === 0 ? `${heading}\n(none)` : `${heading}\n\n${formatTable(previewColumns(request.tz), rows)}`;
}

interface PreviewFlags {
  tz: string;
  count: string;
  from?: string;
  gap: DstSpec['gap'];
  repeat: DstSpec['repeat'];
  json?: boolean;
}

/** `schedules preview`: computed here, so it needs no server; `nowMs` is when "now" is. */
export function addScheduleCommands(program: Command, output: Output, nowMs: () => number): void {
  const schedules = program.command('schedules').description('cron schedules, worked out offline');
  schedules.command('preview <cron>').description('the next occurrences of a cron expression, local and UTC, with DST notes')
    .option('--tz <zone>', 'IANA time zone', 'UTC')
    .option('--count <n>', 'how many, 1..1000', '10')
    .option('--from <time>', 'list occurrences strictly after this RFC 3339 time (default now)')
    .addOption(new Option('--gap <rule>', 'dst.gap: a wall time a spring-forward skips').choices(dstGapRules).default('shift'))
    .addOption(new Option('--repeat <rule>', 'dst.repeat: a wall time a fall-back repeats').choices(dstRepeatRules).default('first'))
    .option('--json', 'print {"items": [{scheduled_at, local, skipped, note}]} instead of a table')
    .action((cron: string, flags: PreviewFlags) => {
      const fromMs = flags.from === undefined ? nowMs() : Date.parse(flags.from);
      if (flags.from !== undefined && (!/^\d{4}-\d{2}-\d{2}T/.test(flags.from) || Number.isNaN(fromMs))) {
        throw new CliUsageError(`--from must be an RFC 3339 time such as 2027-03-14T00:00:00Z, got ${flags.from}`);
      }
      const request = {
        cron, tz: flags.tz, fromMs, count: integerIn(flags.count, '--count', 1, 1_000), dst: { gap: flags.gap, repeat: flags.repeat },
      };
      let rows: PreviewRow[];
      try {
        rows = previewRows(request);
      } catch (error) {
        if (error instanceof TicklerError) throw new CliUsageError(`${error.code}: ${error.message}`);
        throw error;
      }
      if (flags.json === true) output.json({ items: rows });
      else output.text(formatPreview(request, rows));
    });
}
