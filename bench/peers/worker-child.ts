/**
 * A peer's workers in a process of their own, for the workloads that kill the scheduling
 * process (W8) or weigh it (W7): for BullMQ, graphile-worker and pg-boss the worker is what
 * promotes and fires due jobs. Usage: `worker-child.ts <system> <attach JSON>`. It attaches
 * to the store the harness created, starts the same workers as in-process runs, prints
 * `ready`, then one line `index dueAtMs handledAtMs` per handler start. Lines are written
 * with a synchronous write to the pipe, so every start a handler made before a kill -9 is
 * already in the harness's pipe when the process dies.
 */
import { writeSync } from 'node:fs';
import { makeAdapter } from './systems/index.js';
import { systemNames, type SystemName } from './types.js';

const [systemArgument, attachArgument] = process.argv.slice(2);
if (!systemNames.includes(systemArgument as SystemName) || attachArgument === undefined) {
  process.stderr.write(`usage: worker-child.ts <${systemNames.join('|')}> <attach JSON>\n`);
  process.exit(2);
}
const adapter = makeAdapter(systemArgument as SystemName, { attached: JSON.parse(attachArgument) as Record<string, string> });
await adapter.start();
await adapter.startWorkers(({ index, dueAtMs, handledAtMs }) => {
  writeSync(1, `${index} ${dueAtMs} ${handledAtMs}\n`);
});
writeSync(1, 'ready\n');
process.on('SIGTERM', () => {
  void adapter.stop().then(() => process.exit(0), (error: unknown) => {
    process.stderr.write(`stopping failed: ${(error as Error).message}\n`);
    process.exit(1);
  });
});
