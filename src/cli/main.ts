/**
 * The `tickler` command: `serve` runs the service; `worker` runs a shell command per run;
 * `jobs`, `runs`, `dlq` and `clock` talk to a running server and print its JSON answers.
 * Usage mistakes (an unknown or missing option, a bad value) exit 2, failed API calls exit 1
 * with the server's error on stderr, and a failure waiting cannot heal (a data directory in
 * use, a schema from a newer build, a refused API key) exits 1 with one line saying what to do.
 */
import { Command, CommanderError, Option } from 'commander';
import { isFatalError } from '../fatal-error.js';
import { TicklerClient } from '../worker/client.js';
import { TicklerApiError, TicklerNetworkError } from '../worker/errors.js';
import { addApiCommands, connectionOf, urlDefault, type ConnectionFlags } from './api-commands.js';
import { runServe } from './serve-command.js';
import { CliUsageError, serveDefaults, type ServeFlags } from './serve-options.js';
import { runExecWorker, workerHelpText, type WorkerFlags } from './worker-command.js';

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
    .option('--url <url>', `server URL (env TICKLER_URL, default ${urlDefault})`)
    .option('--api-key <key>', 'API key (env TICKLER_API_KEY)')
    // Commander's own usage errors (unknown option, missing argument) as one line and exit 2,
    // as the CLI's: subcommands made after this inherit both settings.
    .exitOverride()
    .configureOutput({ outputError: (text, write) => write(`tickler: ${text.trim().replace(/^error: /, '')} (see --help)\n`) });
  const connection = (): { baseUrl: string; apiKey?: string } => connectionOf(program.opts<ConnectionFlags>(), env);
  const print = (value: unknown): void => {
    process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
  };

  program.command('serve').description('run the API and a scheduler (one process, embedded SQLite by default)')
    .option('--host <host>', `bind address (default ${serveDefaults.host})`)
    .option('--port <port>', `port (default ${serveDefaults.port}; 0 picks a free one)`)
    .option('--data-dir <dir>', `data directory (default ${serveDefaults.dataDir})`)
    .option('--store <url>', 'sqlite:PATH (default sqlite:<data-dir>/tickler.db) or postgres://...')
    .option('--roles <roles>', `api, scheduler or both (default ${serveDefaults.roles})`)
    .option('--node-id <id>', 'this node\'s name (default host-pid)')
    .option('--api-keys <file>', 'API keys file: team=KEY lines or {"team": "KEY"}')
    .option('--virtual-clock', 'time moves only through POST /v1/clock/advance')
    .option('--start-at <time>', 'virtual clock start (RFC 3339)')
    .option('--log-level <level>', `fatal|error|warn|info|debug|trace|silent (default ${serveDefaults.logLevel})`)
    .option('--cron-tolerance-default-s <seconds>', 'default tolerance_s of cron jobs (default 300)')
    .option('--payload-bytes-max <bytes>', 'payload limit (default 65536)')
    .option('--require-max-silence-label <label>', 'jobs with this label (name or name=value) must set max_silence_s')
    .option('--alert-webhook <url>', 'POST silence alerts here, HMAC-signed (secret: TICKLER_ALERT_WEBHOOK_SECRET or --alert-webhook-secret-file)')
    .option('--alert-webhook-secret-file <file>', 'file holding the alert webhook\'s HMAC secret')
    .option('--headers-timeout-s <seconds>', 'time a client has to send a request\'s line and headers (default 10)')
    .option('--request-timeout-s <seconds>', 'time a client has to send a whole request, body included; a long-poll\'s wait is not counted (default 30)')
    .option('--idle-timeout-s <seconds>', 'how long a kept-alive connection may sit idle between requests (default 72)')
    .option('--connections-max <n>', 'open connections at most; more are answered 503 and closed (default 1024)')
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
    .option('--stop-timeout-s <seconds>', 'on SIGTERM, kill commands still running after this long (default: wait)')
    .option('--store <url>', 'postgres://...: lease and complete straight against the servers\' database instead of --url')
    .option('--team <team>', 'with --store: only this team\'s runs (default: every team)')
    .addOption(new Option('--log-level <level>').env('TICKLER_LOG_LEVEL'))
    .addHelpText('after', workerHelpText)
    .action((flags: WorkerFlags) => runExecWorker(flags, connection()));

  addApiCommands(program, () => new TicklerClient(connection()), print);
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
  // Commander printed its message already (configureOutput above); `--help` exits 0, a
  // usage mistake 2, as a CliUsageError does.
  if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
  if (error instanceof CliUsageError) {
    process.stderr.write(`tickler: ${error.message}\n`);
    return error.exitCode;
  }
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

await main();
