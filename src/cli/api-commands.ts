/**
 * The client side of the `tickler` command: `jobs`, `runs`, `dlq` and `clock`, each a thin
 * call through `TicklerClient`. Lists print as tables (src/cli/table.ts), or with `--json` as
 * the server's answer; everything else prints the answer as pretty JSON on stdout. The request
 * bodies are built by pure functions so their parsing is testable on its own.
 */
import { Option, type Command } from 'commander';
import { jobStates, lanes, runStatuses, type JobState } from '../domain/types.js';
import { TicklerClient } from '../worker/client.js';
import { batchJobsMax } from '../limits.js';
import type { JobCreateRequest, JobPatchRequest, ListPage, ListRunsQuery, ScheduleRequest } from '../worker/wire.js';
import { CliUsageError, integerIn, type Environment } from './serve-options.js';
import { deadRunColumns, formatPage, jobColumns, runColumns, silentJobColumns, type Column } from './table.js';

export const urlDefault = 'http://127.0.0.1:7070';

export interface ConnectionFlags {
  url?: string;
  apiKey?: string;
}

/** `--url` / `TICKLER_URL` / default, and `--api-key` / `TICKLER_API_KEY`. */
export function connectionOf(flags: ConnectionFlags, env: Environment): { baseUrl: string; apiKey?: string } {
  const baseUrl = flags.url ?? (env['TICKLER_URL'] || urlDefault);
  const apiKey = flags.apiKey ?? (env['TICKLER_API_KEY'] || undefined);
  if (!/^https?:\/\//.test(baseUrl)) throw new CliUsageError(`--url must be an http(s) URL, got ${baseUrl}`);
  return apiKey === undefined ? { baseUrl } : { baseUrl, apiKey };
}

export interface JobCreateFlags {
  json?: string;
  cron?: string;
  tz?: string;
  at?: string;
  delayS?: string;
  pool?: string;
  payload?: string;
  key?: string;
  lane?: string;
}

/** `--json BODY` is the base; the other flags set or replace its fields. Create and PATCH share it. */
function jobBodyOf(flags: JobCreateFlags): Partial<JobCreateRequest> & Record<string, unknown> {
  const base = flags.json === undefined ? {} : jsonFlag(flags.json, '--json');
  if (typeof base !== 'object' || base === null || Array.isArray(base)) {
    throw new CliUsageError('--json must be a JSON object (a job as in API.md)');
  }
  const body = { ...base } as Partial<JobCreateRequest> & Record<string, unknown>;
  const schedules = [flags.cron, flags.at, flags.delayS].filter((value) => value !== undefined).length;
  if (schedules > 1) throw new CliUsageError('give one of --cron, --at, --delay-s');
  if (flags.tz !== undefined && flags.cron === undefined) throw new CliUsageError('--tz goes with --cron');
  let schedule: ScheduleRequest | undefined;
  if (flags.cron !== undefined) schedule = flags.tz === undefined ? { cron: flags.cron } : { cron: flags.cron, tz: flags.tz };
  if (flags.at !== undefined) schedule = { at: flags.at };
  if (flags.delayS !== undefined) schedule = { delay_s: integerIn(flags.delayS, '--delay-s', 0, 10 * 366 * 86_400) };
  if (schedule !== undefined) body.schedule = schedule;
  if (flags.pool !== undefined) body.pool = flags.pool;
  if (flags.payload !== undefined) body.payload = jsonFlag(flags.payload, '--payload');
  if (flags.key !== undefined) body.key = flags.key;
  if (flags.lane !== undefined) body.lane = flags.lane as JobCreateRequest['lane'];
  return body;
}

export function jobCreateBodyOf(flags: JobCreateFlags): JobCreateRequest {
  const body = jobBodyOf(flags);
  if (body.schedule === undefined) throw new CliUsageError('a job needs a schedule: --cron, --at or --delay-s (or --json)');
  if (body.pool === undefined) throw new CliUsageError('a job needs --pool (or "pool" in --json)');
  return body as JobCreateRequest;
}

/** A PATCH body: only what the flags name (API.md: schedule, payload or policies). */
export function jobPatchBodyOf(flags: Omit<JobCreateFlags, 'key'>): JobPatchRequest {
  const body = jobBodyOf(flags);
  if (Object.keys(body).length === 0) {
    throw new CliUsageError('nothing to change: give --cron, --at, --delay-s, --pool, --payload, --lane or --json');
  }
  return body;
}

export function jsonFlag(text: string, name: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new CliUsageError(`${name} is not valid JSON: ${(error as Error).message}`);
  }
}

function limitOf(text: string | undefined): number | undefined {
  return text === undefined ? undefined : integerIn(text, '--limit', 1, 1_000);
}

function runsQueryOf(flags: Record<string, string | undefined>): ListRunsQuery {
  return {
    since: flags['since'], until: flags['until'], status: flags['status'] as ListRunsQuery['status'],
    pool: flags['pool'], team: flags['team'], cursor: flags['cursor'], limit: limitOf(flags['limit']),
  };
}

/** How the answers reach the terminal: JSON as the server sent it, or text made for people. */
export interface Output {
  json(value: unknown): void;
  text(value: string): void;
}

type ListFlags = Record<string, string | undefined> & { json?: boolean };

const jsonListOption = ['--json', 'print the JSON answer (items and next_cursor) instead of a table'] as const;
const teamOption = ['--team <team>', 'another team\'s (admin keys only)'] as const;
const cursorOption = ['--cursor <cursor>', 'the next page: the cursor a previous page ended with'] as const;
const limitOption = ['--limit <n>', 'items per page, 1..1000 (default 100)'] as const;

function withScheduleOptions(command: Command): Command {
  return command
    .option('--cron <expr>', 'cron schedule (5 fields, or 6 with seconds)').option('--tz <zone>', 'IANA time zone of --cron (default UTC)')
    .option('--at <time>', 'one shot at an RFC 3339 time').option('--delay-s <seconds>', 'one shot after this many seconds')
    .option('--pool <pool>', 'worker pool').option('--payload <json>', 'payload (JSON)')
    .addOption(new Option('--lane <lane>', 'priority lane').choices(lanes));
}

/** Adds `jobs`, `runs`, `dlq` and `clock` to the program; `clientOf` builds a client from the global flags. */
export function addApiCommands(program: Command, clientOf: () => TicklerClient, output: Output): void {
  const call = <A extends unknown[]>(action: (client: TicklerClient, ...args: A) => Promise<unknown>) =>
    async (...args: A): Promise<void> => output.json(await action(clientOf(), ...args));
  /** A list: a table unless `--json`. */
  const list = <T>(columns: readonly Column<T>[], fetch: (client: TicklerClient, flags: ListFlags) => Promise<ListPage<T>>) =>
    async (flags: ListFlags): Promise<void> => {
      const page = await fetch(clientOf(), flags);
      if (flags.json === true) output.json(page);
      else output.text(formatPage(columns, page));
    };

  const jobs = program.command('jobs').description('create, list and change jobs');
  withScheduleOptions(jobs.command('create').description('create a job (prints it as JSON)'))
    .option('--key <key>', 'idempotency key, unique per team')
    .option('--json <body>', 'the whole request body as JSON; other flags override its fields')
    .action(call((client, flags: JobCreateFlags) => client.createJob(jobCreateBodyOf(flags))));
  withScheduleOptions(jobs.command('patch <job_id>').description('change a job\'s schedule, pool, payload or policies (prints it as JSON)'))
    .option('--json <body>', 'the PATCH body as JSON (any of a job\'s fields but key); other flags override its fields')
    .action(call((client, jobId: string, flags: JobCreateFlags) => client.patchJob(jobId, jobPatchBodyOf(flags))));
  jobs.command('ls').description('list jobs, newest first')
    .addOption(new Option('--state <state>', 'only jobs in this state').choices(jobStates))
    .option('--pool <pool>', 'only this pool\'s').option('--label <k=v>', 'only jobs with this label')
    .option(...teamOption).option(...cursorOption).option(...limitOption).option(...jsonListOption)
    .action(list(jobColumns, (client, flags) => client.listJobs({
      state: flags['state'] as JobState | undefined, pool: flags['pool'], label: flags['label'], team: flags['team'],
      cursor: flags['cursor'], limit: limitOf(flags['limit']),
    })));
  jobs.command('silent').description("the dead man's switch: active jobs whose last success is older than their max_silence_s")
    .option(...teamOption).option(...cursorOption).option(...limitOption).option(...jsonListOption)
    .action(list(silentJobColumns, (client, flags) =>
      client.listSilentJobs({ team: flags['team'], cursor: flags['cursor'], limit: limitOf(flags['limit']) })));
  jobs.command('get <job_id>').description('one job (JSON)').action(call((client, jobId: string) => client.getJob(jobId)));
  jobs.command('cancel [job_ids...]')
    .description('cancel a job; several (up to 1,000) in one request, each answering for itself; or with --key-prefix every job whose key starts so')
    .option('--key-prefix <prefix>', 'cancel every job of the team whose key starts with this')
    .action(call((client, jobIds: string[], flags: { keyPrefix?: string }) => {
      if ((jobIds.length === 0) === (flags.keyPrefix === undefined)) {
        throw new CliUsageError('give job ids or --key-prefix, not both');
      }
      if (jobIds.length > batchJobsMax) throw new CliUsageError(`at most ${batchJobsMax} job ids at once`);
      if (jobIds.length === 0) return client.cancelJobsByKeyPrefix(flags.keyPrefix!);
      return jobIds.length === 1 ? client.cancelJob(jobIds[0]!) : client.cancelJobs(jobIds);
    }));
  jobs.command('pause <job_id>').description('stop firing until resumed').action(call((client, jobId: string) => client.pauseJob(jobId)));
  jobs.command('resume <job_id>').description('fire again from now on').action(call((client, jobId: string) => client.resumeJob(jobId)));
  jobs.command('trigger <job_id>').description('run it now, once, outside its schedule')
    .action(call((client, jobId: string) => client.triggerJob(jobId)));

  const runs = program.command('runs').description('the run ledger: did it run?');
  runs.command('ls').description("the team's runs (or one job's with --job), newest first")
    .option('--job <job_id>', 'only this job\'s runs').option('--since <time>', 'scheduled at or after (RFC 3339)')
    .option('--until <time>', 'scheduled before (RFC 3339)')
    .addOption(new Option('--status <status>', 'only runs in this status').choices(runStatuses))
    .option('--pool <pool>', 'only this pool\'s').option(...teamOption).option(...cursorOption).option(...limitOption)
    .option(...jsonListOption)
    .action(list(runColumns, (client, flags) => (flags['job'] === undefined
      ? client.listRuns(runsQueryOf(flags))
      : client.listJobRuns(flags['job'], runsQueryOf(flags)))));
  runs.command('get <run_id>').description('one run with its events (JSON)')
    .action(call((client, runId: string) => client.getRun(runId)));

  const dlq = program.command('dlq').description('dead runs');
  dlq.command('ls').description('dead runs, newest first')
    .option('--pool <pool>', 'only this pool\'s').option(...teamOption).option(...cursorOption).option(...limitOption)
    .option(...jsonListOption)
    .action(list(deadRunColumns, (client, flags) => client.listDlq({
      pool: flags['pool'], team: flags['team'], cursor: flags['cursor'], limit: limitOf(flags['limit']),
    })));
  dlq.command('replay <run_id>').description('a dead run back to ready, same run_id, fresh retry budget')
    .action(call((client, runId: string) => client.replayRun(runId)));

  const clock = program.command('clock').description('virtual time of a server started with --virtual-clock');
  clock.command('get').description('the server\'s time').action(call((client) => client.getClock()));
  clock.command('advance <seconds>').description('step time forward; answers once everything due has happened')
    .action(call((client, seconds: string) => client.advanceClock(integerIn(seconds, 'seconds', 0, 10 * 366 * 86_400))));
}
