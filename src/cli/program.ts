/**
 * The `tickler` command's parser: `serve` runs the service; `worker` runs a shell command per
 * run; `schedules preview` works offline; `jobs`, `runs`, `dlq` and `clock` talk to a running
 * server (lists as tables, `--json` for scripts, everything else as the server's JSON).
 * Every subcommand's `--help` lists its own options and the global ones. Usage mistakes exit
 * 2, failed API calls exit 1 with the server's error on stderr, and a failure waiting cannot
 * heal (a data directory in use, a schema from a newer build, a refused API key) exits 1 with
 * one line saying what to do.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { isFatalError } from '../fatal-error.js';
import { TicklerClient } from '../worker/client.js';
import { TicklerApiError, TicklerNetworkError } from '../worker/errors.js';
import { addApiCommands, connectionOf, urlDefault, type ConnectionFlags, type Output } from './api-commands.js';
import { addMigrateCommands } from './migrate-commands.js';
import { addScheduleCommands } from './schedule-preview.js';
import { runServe } from './serve-command.js';
import { CliUsageError, logLevels, serveDefaults, type ServeFlags } from './serve-options.js';
import { runExecWorker, workerHelpText, type WorkerFlags } from './worker-command.js';

/** The package's version: package.json sits two folders up from both src/cli/ and dist/cli/. */
export function packageVersion(): string {
  const text = readFileSync(new URL('../../package.json', import.meta.url), 'utf8');
  return (JSON.parse(text) as { version: string }).version;
}

const serveHelpText = `
Every flag also reads TICKLER_<NAME> (TICKLER_HOST, TICKLER_PORT, TICKLER_DATA_DIR, TICKLER_STORE,
TICKLER_ROLES, TICKLER_NODE_ID, TICKLER_VIRTUAL_CLOCK=1, TICKLER_START_AT, TICKLER_LOG_LEVEL,
TICKLER_CRON_TOLERANCE_DEFAULT_S, TICKLER_PAYLOAD_BYTES_MAX); a flag wins over its variable.
API keys: --api-keys FILE (or TICKLER_API_KEYS_FILE) holds lines "team=KEY" or a JSON object
{"team": "KEY"}; TICKLER_API_KEYS takes them inline: "team-a=KEY1,admin=KEY0". The team "admin"
is an admin. Without keys the server runs open and must bind to loopback.
Timing overrides (tests, chaos runs): TICKLER_TIMING_<FIELD> or TICKLER_<FIELD> in milliseconds,
e.g. TICKLER_SHARD_LEASE_TTL_MS, TICKLER_SHARD_LEASE_RENEW_INTERVAL_MS,
TICKLER_SHARD_LEASE_SAFETY_MARGIN_MS, TICKLER_LOAD_HORIZON_MS, TICKLER_LOAD_REFRESH_INTERVAL_MS,
TICKLER_RECONCILE_INTERVAL_MS, TICKLER_LEASE_SWEEP_INTERVAL_MS.
On SIGTERM or SIGINT it stops taking work, releases its shard leases and exits 0 (1 after 10 s).`;

export function buildProgram(env: NodeJS.ProcessEnv = process.env): Command {
  const program = new Command('tickler')
    .description('durable timers and cron jobs, dispatched at least once to pulling workers')
    .version(packageVersion(), '-V, --version', 'print the version')
    .option('--url <url>', `server URL (env TICKLER_URL, default ${urlDefault})`)
    .option('--api-key <key>', 'API key (env TICKLER_API_KEY)')
    // Set before the subcommands are added: each copies these settings from its parent.
    .configureHelp({ showGlobalOptions: true })
    .exitOverride()
    // A usage mistake is one line and exit 2, as the CLI's own are (main: reportFailure).
    .configureOutput({ outputError: (text, write) => write(`tickler: ${text.trim().replace(/^error: /, '')} (see --help)\n`) });
  const connection = (): { baseUrl: string; apiKey?: string } => connectionOf(program.opts<ConnectionFlags>(), env);
  const output: Output = {
    json: (value) => process.stdout.write(`${JSON.stringify(value, null, 2)}\n`),
    text: (value) => process.stdout.write(`${value}\n`),
  };

  program.command('serve').description('run the API and a scheduler (one process, embedded SQLite by default)')
    .option('--host <host>', `bind address (default ${serveDefaults.host})`)
    .option('--port <port>', `port (default ${serveDefaults.port}; 0 picks a free one)`)
    .option('--data-dir <dir>', `data directory (default ${serveDefaults.dataDir})`)
    .option('--store <url>', 'sqlite:PATH (default sqlite:<data-dir>/tickler.db) or postgres://...')
    .option('--roles <roles>', `api, scheduler or both (default ${serveDefaults.roles})`)
    .option('--node-id <id>', 'this node\'s name (default host-pid)')
    .option('--api-keys <file>', 'API keys file: team=KEY lines or {"team": "KEY"}')
    .option('--limits <file>', 'team limits stored at start: {"default": {"create_per_s": 100, "pending_max": 100000}, "team-a": {...}}')
    .option('--virtual-clock', 'time moves only through POST /v1/clock/advance')
    .option('--start-at <time>', 'virtual clock start (RFC 3339)')
    .addOption(new Option('--log-level <level>', `log level (default ${serveDefaults.logLevel})`).choices(logLevels))
    .option('--cron-tolerance-default-s <seconds>', 'default tolerance_s of cron jobs (default 300)')
    .option('--p2-share <fraction>', 'P2\'s share of a pool\'s leases while P0 or P1 have ready runs (default 0.2)')
    .option('--payload-bytes-max <bytes>', 'payload limit (default 65536)')
    .option('--headers-timeout-s <seconds>', 'time a client has to send a request\'s line and headers (default 10)')
    .option('--request-timeout-s <seconds>', 'time a client has to send a whole request, body included; a long-poll\'s wait is not counted (default 30)')
    .option('--idle-timeout-s <seconds>', 'how long a kept-alive connection may sit idle between requests (default 72)')
    .option('--connections-max <n>', 'open connections at most; more are answered 503 and closed (default 1024)')
    .option('--require-max-silence-label <label>', 'jobs with this label (name or name=value) must set max_silence_s')
    .option('--alert-webhook <url>', 'POST silence alerts here, HMAC-signed (secret: TICKLER_ALERT_WEBHOOK_SECRET or --alert-webhook-secret-file)')
    .option('--alert-webhook-secret-file <file>', 'file holding the alert webhook\'s HMAC secret')
    .addHelpText('after', serveHelpText)
    .action((flags: ServeFlags) => runServe(flags, env));

  program.command('worker').description('pull runs of a pool and run a shell command for each')
    .requiredOption('--pool <pool>', 'worker pool to pull from')
    .requiredOption('--exec <command>', 'shell command run per run (see below)')
    .option('--concurrency <n>', 'commands running at once (default 1)')
    .option('--lease-s <seconds>', 'lease per run, 5..900 (default: the job\'s lease_s)')
    .option('--wait-s <seconds>', 'long-poll wait, 0..60 (default 20)')
    .option('--lease-ahead-ms <ms>', 'lease runs already written up to this long before they are ready and start each at its time, 0..10000 (default 0; docs/tuning.md)')
    .option('--worker-id <id>', 'name shown in the run ledger')
    .option('--stop-timeout-s <seconds>', 'on SIGTERM or SIGINT, let running commands finish for this long, then send them SIGTERM, and SIGKILL 5 s later (default 0: at once)')
    .option('--store <url>', 'postgres://...: lease and complete straight against the servers\' database instead of --url')
    .option('--team <team>', 'with --store: only this team\'s runs (default: every team)')
    .addOption(new Option('--log-level <level>', 'log level (default info)').choices(logLevels).env('TICKLER_LOG_LEVEL'))
    .addHelpText('after', workerHelpText)
    .action((flags: WorkerFlags) => runExecWorker(flags, connection()));

  addApiCommands(program, () => new TicklerClient(connection()), output);
  addScheduleCommands(program, output, () => Date.now());
  addMigrateCommands(program, () => new TicklerClient(connection()));
  return program;
}

/** Runs the program and turns expected failures into a message and an exit code. */
export async function main(argv: string[] = process.argv): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (error) {
    process.exitCode = reportFailure(error);
  }
}

function reportFailure(error: unknown): number {
  // Commander has printed its message (or the help, or the version) already.
  if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
  if (error instanceof CliUsageError) {
    process.stderr.write(`tickler: ${error.message}\n`);
    return error.exitCode;
  }
  // What waiting cannot heal (a data directory in use, a newer schema, a refused key): one line.
  if (isFatalError(error)) {
    process.stderr.write(`tickler: ${error.message}\n`);
    return 1;
  }
  if (error instanceof TicklerApiError) {
    const field = error.field === undefined ? '' : ` (field ${error.field})`;
    process.stderr.write(`tickler: ${error.status} ${error.code}: ${error.message}${field}\n`);
    return 1;
  }
  if (error instanceof TicklerNetworkError) {
    process.stderr.write(`tickler: ${error.message}\n`);
    return 1;
  }
  process.stderr.write(`tickler: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  return 1;
}

