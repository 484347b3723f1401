// One contender of the data-dir lock race (data-dir-lock.test.ts), kept alive across rounds so a
// round costs no process start. Reads commands from stdin, one a line, and answers each with a
// JSON line on stdout:
//   take <dir>  -> {"pid", "outcome": "won", "tookOver"} or {"pid", "outcome": "refused", "message"}
//   release     -> {"pid", "outcome": "released"} (after releasing the lock it won, if any)
// It exits when stdin closes.
import { createInterface } from 'node:readline';
import { acquireDataDirLock, type DataDirLock } from '../../src/data-dir-lock.js';

let held: DataDirLock | null = null;

function answer(value: object): void {
  process.stdout.write(`${JSON.stringify({ pid: process.pid, ...value })}\n`);
}

for await (const line of createInterface({ input: process.stdin })) {
  const [command, dir] = line.split(' ');
  if (command === 'take' && dir !== undefined) {
    try {
      held = acquireDataDirLock(dir);
      answer({ outcome: 'won', tookOver: held.tookOverFromDeadProcess });
    } catch (error) {
      answer({ outcome: 'refused', message: error instanceof Error ? error.message : String(error) });
    }
  } else if (command === 'release') {
    held?.release();
    held = null;
    answer({ outcome: 'released' });
  } else {
    throw new Error(`unknown command ${JSON.stringify(line)}`);
  }
}
