// Running npm and other commands from tests the way a person would in a shell.
import { spawnSync, type ChildProcess } from 'node:child_process';

/** The environment of a shell, less what `npm run` exports to its scripts (npm_config_* would steer an inner npm). */
export function cleanEnvironment(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const entries = Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_'));
  return { ...Object.fromEntries(entries), ...extra };
}

/** Runs a command to completion; throws with its output when it exits non-zero. */
export function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = cleanEnvironment()):
  { stdout: string; stderr: string } {
  const result = spawnSync(command, args, { cwd, env, encoding: 'utf8', timeout: 300_000 });
  if (result.status !== 0) {
    throw new Error(`${command} ${args.join(' ')} exited ${result.status}:\n${result.stdout}\n${result.stderr}`);
  }
  return { stdout: result.stdout, stderr: result.stderr };
}

/** Resolves once `tickler serve`, started as `child`, has printed its readiness line; rejects if `ended` first. */
export function whenListening(child: ChildProcess, ended: Promise<unknown>, stderr: () => string): Promise<void> {
  return new Promise<void>((resolveReady, reject) => {
    let stdout = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes('"msg":"tickler listening on')) resolveReady();
    });
    void ended.then((how) => reject(new Error(`the server ended (${String(how)}) before listening:\n${stderr()}`)));
  });
}
