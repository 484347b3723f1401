/**
 * A crontab read as cron reads it, turned into tickler job specs (docs/migration.md):
 *
 * - User crontabs (`crontab -l`: five time fields, then the command) and system crontabs
 *   (`/etc/crontab`, `/etc/cron.d/*`: a user field after the time fields).
 * - `NAME=value` lines set the environment of the entries after them (cron's rule); the
 *   environment goes into each job's payload. `CRON_TZ=zone` (cronie) sets the zone the
 *   following schedules are read in; `TZ=zone` is only environment, as in cronie and Vixie
 *   cron: schedules are read in the cron daemon's zone (`--tz`) unless `CRON_TZ` says
 *   otherwise. `MAILTO` is reported: tickler sends no mail; the output's tail is kept in the
 *   run's result instead. `SHELL` chooses the shell, as in cron; `HOME` the working directory.
 * - `%` in a command: the first unescaped `%` ends the command and the rest is its stdin,
 *   each further unescaped `%` a newline; `\%` is a literal `%` (Vixie cron's do_command.c).
 * - The macros `@yearly` … `@hourly` map to tickler's; `@reboot` and lines tickler cannot
 *   read are refused, one reason per line.
 *
 * tickler's cron reads the day fields as Vixie cron does (both restricted: either matches;
 * a field starting with `*` does not restrict), and its default DST policy is Vixie cron's
 * (a fixed time in a spring-forward gap runs at the end of the gap, one in a repeated hour
 * once), so schedules carry over unchanged. Each job allows overlap, as cron starts an entry
 * whether or not its previous run ended.
 */
import { createHash } from 'node:crypto';
import { parseCron } from '../domain/schedule/cron-expression.js';
import { isValidTimeZone } from '../domain/schedule/time-zone.js';
import { TicklerError } from '../errors.js';
import type { ExecSpec } from '../cli/exec-handler.js';

/** A job spec of a jobs file (docs/API.md's create body, `key` required, plus `paused`). */
export interface JobFileSpec {
  key: string;
  schedule: { cron: string; tz: string };
  pool: string;
  payload: ExecPayload;
  overlap?: 'allow' | 'forbid' | 'replace' | 'buffer_one';
  catch_up_window_s?: number;
  labels: Record<string, string>;
  paused?: boolean;
}

/** What `tickler worker --exec @payload` runs: `exec` (src/cli/exec-handler.ts `execSpecOf`). */
export interface ExecPayload {
  exec: ExecSpec;
  source: Record<string, string | number>;
}

export interface ImportProblem {
  line: number;
  text: string;
  reason: string;
}

export interface ImportResult {
  jobs: JobFileSpec[];
  refused: ImportProblem[];
  /** Lines read but not carried over as such (MAILTO, cronie's `-` prefix), reported. */
  notes: ImportProblem[];
}

export interface CrontabOptions {
  /** Host the crontab comes from: part of every key and label. */
  host: string;
  /** A user crontab's owner; null for a system crontab, whose lines name their user. */
  user: string | null;
  /** The cron daemon's zone: schedules are read in it unless `CRON_TZ` says otherwise. */
  tz: string;
  pool: string;
  /** Where the crontab was read from, for the jobs' `source`. */
  file: string;
}

const macros = new Set(['@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly']);
const environmentLine = /^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/;

/** A value as cron reads it: surrounding quotes (single or double) removed, nothing else. */
function unquote(value: string): string {
  const trimmed = value.trim();
  const quote = trimmed[0];
  if (trimmed.length >= 2 && (quote === '"' || quote === '\'') && trimmed.endsWith(quote)) return trimmed.slice(1, -1);
  return trimmed;
}

/**
 * Splits a crontab command at its first unescaped `%`: the command (`\%` made `%`) and its
 * stdin (`%` made newlines, `\%` made `%`), as Vixie cron's do_command.c does.
 */
export function splitPercent(raw: string): { command: string; stdin: string | null } {
  let command = '';
  let index = 0;
  for (; index < raw.length; index++) {
    const ch = raw[index]!;
    if (ch === '\\' && raw[index + 1] === '%') {
      command += '%';
      index++;
    } else if (ch === '%') {
      break;
    } else {
      command += ch;
    }
  }
  if (index >= raw.length) return { command, stdin: null };
  let stdin = '';
  for (index++; index < raw.length; index++) {
    const ch = raw[index]!;
    if (ch === '\\' && raw[index + 1] === '%') {
      stdin += '%';
      index++;
    } else {
      stdin += ch === '%' ? '\n' : ch;
    }
  }
  return { command, stdin };
}

/** Splits off `count` whitespace-separated fields; the rest of the line, as written, follows. */
function takeFields(text: string, count: number): { fields: string[]; rest: string } | null {
  const fields: string[] = [];
  let rest = text;
  for (let field = 0; field < count; field++) {
    const match = /^\s*(\S+)/.exec(rest);
    if (match === null) return null;
    fields.push(match[1]!);
    rest = rest.slice(match[0].length);
  }
  return { fields, rest: rest.replace(/^[ \t]+/, '') };
}

function shortHash(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 12);
}

/** A name safe inside a key and a label value. */
function keyPart(text: string): string {
  return text.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 64) || '_';
}

/**
 * The deterministic key of an entry: host, user and the command (with its stdin) hashed,
 * so importing the same crontab again gives the same keys, a changed schedule or environment
 * updates the job in place, and reordering lines changes nothing. The n-th repeat of the
 * same command by the same user gets `-n`.
 */
export function entryKey(host: string, user: string, command: string, repeat: number): string {
  const base = `crontab:${keyPart(host)}:${keyPart(user)}:${shortHash(`${host}\n${user}\n${command}`)}`;
  return repeat === 1 ? base : `${base}-${repeat}`;
}

export function importCrontab(text: string, options: CrontabOptions): ImportResult {
  if (!isValidTimeZone(options.tz)) {
    throw new TicklerError('invalid_timezone', `--tz ${JSON.stringify(options.tz)} is not an IANA time zone`, { field: 'tz' });
  }
  const jobs: JobFileSpec[] = [];
  const refused: ImportProblem[] = [];
  const notes: ImportProblem[] = [];
  const env: Record<string, string> = {};
  let cronTz = options.tz;
  const repeats = new Map<string, number>();
  text.split(/\r?\n/).forEach((rawLine, index) => {
    const line = index + 1;
    const trimmed = rawLine.trim();
    if (trimmed === '' || trimmed.startsWith('#')) return;
    const refuse = (reason: string): void => {
      refused.push({ line, text: rawLine, reason });
    };
    const assignment = environmentLine.exec(trimmed);
    if (assignment !== null && !/^[@*\d]/.test(trimmed)) {
      const [, name, rawValue] = assignment as unknown as [string, string, string];
      const value = unquote(rawValue);
      if (name === 'CRON_TZ') {
        if (!isValidTimeZone(value)) return refuse(`CRON_TZ=${value} is not an IANA time zone; the entries after it are read in ${cronTz}`);
        cronTz = value;
        return;
      }
      if (name === 'MAILTO') {
        notes.push({ line, text: rawLine, reason: `MAILTO=${value}: tickler sends no mail; each run keeps the tail of its output in its result` });
      }
      env[name] = value;
      return;
    }
    let entry = trimmed;
    if (entry.startsWith('-')) {
      notes.push({ line, text: rawLine, reason: 'the leading "-" (cronie: do not log) has no meaning in tickler; the run ledger records every run' });
      entry = entry.slice(1);
    }
    let cron: string;
    let afterTime: string;
    if (entry.startsWith('@')) {
      const split = takeFields(entry, 1);
      const macro = split?.fields[0]?.toLowerCase() ?? '';
      if (macro === '@reboot') {
        return refuse('@reboot: tickler has no boot event; run it from the host\'s init system (a systemd unit, say)');
      }
      if (!macros.has(macro)) return refuse(`${split?.fields[0] ?? entry}: not a schedule cron knows`);
      cron = macro;
      afterTime = split!.rest;
    } else {
      const split = takeFields(entry, 5);
      if (split === null) return refuse('not a crontab entry: fewer than five time fields and a command');
      cron = split.fields.join(' ');
      afterTime = split.rest;
    }
    let user = options.user;
    if (user === null) {
      const split = takeFields(afterTime, 1);
      if (split === null) return refuse('a system crontab entry names its user after the time fields; this one has no user and command');
      user = split.fields[0]!;
      afterTime = split.rest;
    }
    if (afterTime.trim() === '') return refuse('no command');
    try {
      parseCron(cron);
    } catch (error) {
      return refuse(`${cron}: ${(error as Error).message}`);
    }
    const { command, stdin } = splitPercent(afterTime);
    const identity = stdin === null ? command : `${command}%${stdin}`;
    const repeatKey = `${user}\n${identity}`;
    const repeat = (repeats.get(repeatKey) ?? 0) + 1;
    repeats.set(repeatKey, repeat);
    const { SHELL: shell, HOME: home, ...environment } = env;
    const exec: ExecPayload['exec'] = { command };
    if (shell !== undefined && shell !== '/bin/sh') exec.shell = shell;
    if (stdin !== null) exec.stdin = stdin;
    if (Object.keys(environment).length > 0) exec.env = { ...environment };
    if (home !== undefined) {
      exec.cwd = home;
      exec.env = { ...exec.env, HOME: home };
    }
    jobs.push({
      key: entryKey(options.host, user, identity, repeat),
      schedule: { cron, tz: cronTz },
      pool: options.pool,
      payload: { exec, source: { host: options.host, user, file: options.file, line } },
      overlap: 'allow',
      labels: { source: 'crontab', host: keyPart(options.host), cron_user: keyPart(user) },
    });
  });
  return { jobs, refused, notes };
}
