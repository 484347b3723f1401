// Runs the `tickler` command (bin/tickler.js) as a process with only PATH and `env` in its
// environment, and answers its exit code and output.
import { execFile } from 'node:child_process';

export interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

export function tickler(args: string[], env: Record<string, string> = {}): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['bin/tickler.js', ...args], {
      env: { PATH: process.env['PATH'] ?? '', ...env },
      timeout: 30_000,
    }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : (typeof error.code === 'number' ? error.code : -1), stdout, stderr });
    });
  });
}
