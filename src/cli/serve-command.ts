/**
 * `tickler serve`: resolves the options, starts the server, prints one JSON line on stdout
 * when it is ready (`{"msg": "tickler listening on URL (roles R, node N)", "url": ..., ...}`, as pino writes its
 * lines; the logs go to stderr), and on SIGTERM or SIGINT closes it (stop taking work, release shard leases, close
 * the store) and exits 0. A close that takes longer than 10 s exits 1 rather than hang the
 * deployment that sent the signal. A node that cannot bind its port closes what it opened,
 * prints one line naming the address and exits 1.
 */
import { readFileSync } from 'node:fs';
import { pino } from 'pino';
import { ListenError, startServer, type RunningServer } from '../server.js';
import { resolveServeOptions, type Environment, type ServeFlags } from './serve-options.js';
import { cliServeShutdownDeadlineMs } from '../limits.js';

export async function runServe(flags: ServeFlags, env: Environment): Promise<void> {
  const options = resolveServeOptions(flags, env, (path) => readFileSync(path, 'utf8'));
  let server: RunningServer;
  try {
    server = await startServer(options);
  } catch (error) {
    if (!(error instanceof ListenError)) throw error;
    // Loud and at once: whoever started this node must not go on to talk to whatever else
    // answers on that port.
    process.stderr.write(`tickler: ${error.message}\n`);
    process.exit(1);
  }
  let closing = false;
  const shutdown = (signalName: NodeJS.Signals): void => {
    if (closing) {
      process.stderr.write(`tickler: ${signalName} again during shutdown; exiting now\n`);
      process.exit(1);
    }
    closing = true;
    const deadline = setTimeout(() => {
      process.stderr.write(`tickler: shutdown took longer than ${cliServeShutdownDeadlineMs} ms; exiting\n`);
      process.exit(1);
    }, cliServeShutdownDeadlineMs);
    deadline.unref();
    server.close().then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`tickler: shutdown failed: ${error instanceof Error ? error.stack : String(error)}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  // The handlers first: a supervisor that signals the moment it reads the line below must not
  // find the process without them (it would die of the signal instead of shutting down).
  // Every node listens (a scheduler-only node serves /healthz, /readyz and /metrics), so every
  // node prints the same line, whatever its log level; scripts and tests wait for it.
  pino({ name: 'tickler', level: 'info' }, pino.destination({ dest: 1, sync: true }))
    .info({ url: server.url, roles: options.roles, nodeId: server.nodeId },
      `tickler listening on ${server.url} (roles ${options.roles.join(',')}, node ${server.nodeId})`);
}
