/**
 * The client side of the `tickler` command: `jobs`, `runs`, `dlq` and `clock`, each a thin
 * call through `TicklerClient` whose answer is printed as pretty JSON on stdout. The request
 * bodies are built by pure functions so their parsing is testable on its own.
 */
import type { Command } from 'commander';
import { TicklerClient } from '../worker/client.js';
import { batchJobsMax } from '../limits.js';
import type { JobCreateRequest, ListRunsQuery, ScheduleRequest } from '../worker/wire.js';
import { CliUsageError, integerIn, type Environment } from './serve-options.js';

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

/** `--json BODY` is the base; the other flags set or replace its fields. */
export function jobCreateBodyOf(flags: JobCreateFlags): JobCreateRequest {
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
  if (body.schedule === undefined) throw new CliUsageError('a job needs a schedule: --cron, --at or --delay-s (or --json)');
  if (body.pool === undefined) throw new CliUsageError('a job needs --pool (or "pool" in --json)');
  return body as JobCreateRequest;
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

/** Adds `jobs`, `runs`, `dlq` and `clock` to the program; `clientOf` builds a client from the global flags. */
export function addApiCommands(program: Command, clientOf: () => TicklerClient, print: (value: unknown) => void): void {
  const call = <A extends unknown[]>(action: (client: TicklerClient, ...args: A) => Promise<unknown>) =>
    async (...args: A): Promise<void> => print(await action(clientOf(), ...args));

  const jobs = program.command('jobs').description('create, list and change jobs');
  jobs.command('create').description('create a job (prints it)')
    .option('--cron <expr>', 'cron schedule').option('--tz <zone>', 'IANA time zone of --cron (default UTC)')
    .option('--at <time>', 'one shot at an RFC 3339 time').option('--delay-s <seconds>', 'one shot after a delay')
    .option('--pool <pool>', 'worker pool').option('--payload <json>', 'payload (JSON)')
    .option('--key <key>', 'idempotency key, unique per team').option('--lane <lane>', 'P0, P1 or P2')
    .option('--json <body>', 'the whole request body as JSON; other flags override its fields')
    .action(call((client, flags: JobCreateFlags) => client.createJob(jobCreateBodyOf(flags))));
  jobs.command('ls').description('list jobs, newest first')
    .option('--state <state>').option('--pool <pool>').option('--label <k=v>').option('--team <team>', 'admin only')
    .option('--cursor <cursor>').option('--limit <n>')
    .action(call((client, flags: Record<string, string | undefined>) => client.listJobs({
      state: flags['state'] as never, pool: flags['pool'], label: flags['label'], team: flags['team'],
      cursor: flags['cursor'], limit: limitOf(flags['limit']),
    })));
  jobs.command('silent').description("the dead man's switch: active jobs whose last success is older than their max_silence_s")
    .option('--team <team>', 'admin only').option('--cursor <cursor>').option('--limit <n>')
    .action(call((client, flags: Record<string, string | undefined>) =>
      client.listSilentJobs({ team: flags['team'], cursor: flags['cursor'], limit: limitOf(flags['limit']) })));
  jobs.command('get <job_id>').action(call((client, jobId: string) => client.getJob(jobId)));
  jobs.command('cancel [job_ids...]')
    .description('cancel a job; several (up to 1,000) in one request, each answering for itself; or with --key-prefix every job whose key starts so')
    .option('--key-prefix <prefix>')
    .action(call((client, jobIds: string[], flags: { keyPrefix?: string }) => {
      if ((jobIds.length === 0) === (flags.keyPrefix === undefined)) {
        throw new CliUsageError('give job ids or --key-prefix, not both');
      }
      if (jobIds.length > batchJobsMax) throw new CliUsageError(`at most ${batchJobsMax} job ids at once`);
      if (jobIds.length === 0) return client.cancelJobsByKeyPrefix(flags.keyPrefix!);
      return jobIds.length === 1 ? client.cancelJob(jobIds[0]!) : client.cancelJobs(jobIds);
    }));
  jobs.command('pause <job_id>').action(call((client, jobId: string) => client.pauseJob(jobId)));
  jobs.command('resume <job_id>').action(call((client, jobId: string) => client.resumeJob(jobId)));
  jobs.command('trigger <job_id>').description('run it now, once, outside its schedule')
    .action(call((client, jobId: string) => client.triggerJob(jobId)));

  const runs = program.command('runs').description('the run ledger: did it run?');
  runs.command('ls').description("the team's runs (or one job's with --job), newest first")
    .option('--job <job_id>').option('--since <time>').option('--until <time>').option('--status <status>')
    .option('--pool <pool>').option('--team <team>', 'admin only').option('--cursor <cursor>').option('--limit <n>')
    .action(call((client, flags: Record<string, string | undefined>) => (flags['job'] === undefined
      ? client.listRuns(runsQueryOf(flags))
      : client.listJobRuns(flags['job'], runsQueryOf(flags)))));
  runs.command('get <run_id>').description('one run with its events')
    .action(call((client, runId: string) => client.getRun(runId)));

  const dlq = program.command('dlq').description('dead runs');
  dlq.command('ls').option('--pool <pool>').option('--team <team>', 'admin only').option('--cursor <cursor>')
    .option('--limit <n>')
    .action(call((client, flags: Record<string, string | undefined>) => client.listDlq({
      pool: flags['pool'], team: flags['team'], cursor: flags['cursor'], limit: limitOf(flags['limit']),
    })));
  dlq.command('replay <run_id>').description('a dead run back to ready, same run_id, fresh retry budget')
    .action(call((client, runId: string) => client.replayRun(runId)));

  const clock = program.command('clock').description('virtual time of a server started with --virtual-clock');
  clock.command('get').action(call((client) => client.getClock()));
  clock.command('advance <seconds>').description('step time forward; answers once everything due has happened')
    .action(call((client, seconds: string) => client.advanceClock(integerIn(seconds, 'seconds', 0, 10 * 366 * 86_400))));
}
