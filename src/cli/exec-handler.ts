/**
 * `tickler worker --exec CMD`: each leased run runs CMD through `/bin/sh -c`, with the payload
 * JSON on stdin and the run's identity in the environment. The exit code is the outcome:
 *
 *   0   succeeded
 *   65  (EX_DATAERR) failed_permanent: the run goes straight to the DLQ
 *   75  (EX_TEMPFAIL) failed: a temporary failure, retried under the job's retry policy
 *   any other code, or death by a signal: failed, retried like 75
 *
 * The last 4 KiB of the child's stderr become the completion's `error`. When the run's signal
 * aborts (lease lost, run cancelled, worker stopping) the child's process group gets SIGTERM,
 * then SIGKILL after a grace period. Each child runs in a process group of its own, so a
 * terminal's Ctrl-C reaches only the worker: `RunningCommands` lets the worker signal the
 * groups still running when it exits. Each command's outcome is logged with its run id.
 *
 * With CMD `@payload` the run's payload names the command (`{"exec": {...}}`, as `tickler
 * import` writes it; `execSpecOf`): its shell, environment (over the worker's), working
 * directory, stdin text and timeout. The last 4 KiB of its stdout and stderr together are
 * kept in the run's result (`{"exit_code", "output_tail"}`) and in the error of a failure.
 * A payload that names no command fails permanently.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { SystemClock, type Clock } from '../clock.js';
import { PermanentError } from '../worker/errors.js';
import type { RunHandler, WorkerLogger, WorkerRun } from '../worker/run-attempt.js';
import { cliExecKillGraceMsDefault, cliExecStderrTailBytesMax } from '../limits.js';

export const exitCodeSucceeded = 0;
export const exitCodePermanent = 65;
export const exitCodeTemporary = 75;

/** The CMD of `tickler worker --exec` that runs each run's own command from its payload. */
export const payloadCommand = '@payload';

/** A command a payload names: `payload.exec` (src/migrate/crontab.ts `ExecPayload`). */
export interface ExecSpec {
  command: string;
  shell?: string;
  stdin?: string;
  env?: Record<string, string>;
  cwd?: string;
  timeout_s?: number;
}

/** The payload's `exec`, checked field by field; a PermanentError names what is wrong. */
export function execSpecOf(payload: unknown): ExecSpec {
  const exec = (payload as { exec?: unknown } | null)?.exec;
  const fail = (what: string): never => {
    throw new PermanentError(`--exec ${payloadCommand}: the payload's ${what}`);
  };
  if (exec === null || typeof exec !== 'object' || Array.isArray(exec)) return fail('"exec" must be an object naming a command');
  const spec = exec as Record<string, unknown>;
  if (typeof spec['command'] !== 'string' || spec['command'] === '') fail('exec.command must be a non-empty string');
  for (const field of ['shell', 'stdin', 'cwd'] as const) {
    if (spec[field] !== undefined && typeof spec[field] !== 'string') fail(`exec.${field} must be a string`);
  }
  const timeout = spec['timeout_s'];
  if (timeout !== undefined && !(typeof timeout === 'number' && Number.isInteger(timeout) && timeout > 0)) {
    fail('exec.timeout_s must be a positive integer');
  }
  const env = spec['env'];
  if (env !== undefined && (env === null || typeof env !== 'object' || Array.isArray(env) ||
    Object.values(env).some((value) => typeof value !== 'string'))) {
    fail('exec.env must map names to strings');
  }
  return spec as unknown as ExecSpec;
}

export interface ExecHandlerOptions {
  command: string;
  pool: string;
  /** Between SIGTERM and SIGKILL once the run's signal aborts. */
  killGraceMs?: number;
  clock?: Clock;
  /** Where the child's stderr is copied as it arrives (besides the kept tail); default our stderr. */
  stderrSink?: (chunk: Buffer) => void;
  /** Where a payload command's stdout is copied as it arrives (besides the kept tail); default our stdout. */
  stdoutSink?: (chunk: Buffer) => void;
  /** Where each command's outcome is logged (info when it succeeded, warn otherwise). */
  logger?: Pick<WorkerLogger, 'info' | 'warn'>;
  /** Where the running children's process groups are kept, for `killAll` when the worker exits. */
  running?: RunningCommands;
}

/** The process groups of the commands running now. */
export class RunningCommands {
  private readonly groups = new Set<number>();

  add(pid: number): void {
    this.groups.add(pid);
  }

  delete(pid: number): void {
    this.groups.delete(pid);
  }

  get size(): number {
    return this.groups.size;
  }

  /** Signals every group still running; synchronous, so it can run in a process 'exit' handler. */
  signalAll(signalName: NodeJS.Signals): void {
    for (const pid of this.groups) killGroup(pid, signalName, () => undefined);
  }
}

/** Signals a process group; a group already gone (ESRCH) is what the kill wanted, anything else goes to `onError`. */
function killGroup(pid: number, signalName: NodeJS.Signals, onError: (message: string) => void): void {
  try {
    process.kill(-pid, signalName);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ESRCH') onError(`tickler: ${signalName} failed: ${code ?? String(error)}\n`);
  }
}

/** The environment a child sees, on top of the worker's own. */
export function runEnvironment(run: WorkerRun, pool: string): Record<string, string> {
  return {
    TICKLER_RUN_ID: run.run_id,
    TICKLER_JOB_ID: run.job_id,
    TICKLER_ATTEMPT: String(run.attempt),
    TICKLER_SCHEDULED_AT: run.scheduled_at,
    TICKLER_FIRE_AT: run.fire_at,
    TICKLER_POOL: pool,
  };
}

/** Keeps the last `bytesMax` bytes of a stream. */
export class TailBuffer {
  private chunks: Buffer[] = [];
  private bytes = 0;

  constructor(private readonly bytesMax: number) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.bytes += chunk.length;
    while (this.bytes - (this.chunks[0]?.length ?? 0) >= this.bytesMax) {
      this.bytes -= this.chunks.shift()!.length;
    }
  }

  text(): string {
    const all = Buffer.concat(this.chunks);
    return all.subarray(Math.max(0, all.length - this.bytesMax)).toString('utf8');
  }
}

export function createExecHandler(options: ExecHandlerOptions): RunHandler {
  const clock = options.clock ?? new SystemClock();
  const killGraceMs = options.killGraceMs ?? cliExecKillGraceMsDefault;
  const stderrSink = options.stderrSink ?? ((chunk: Buffer) => process.stderr.write(chunk));
  const stdoutSink = options.stdoutSink ?? ((chunk: Buffer) => process.stdout.write(chunk));
  const fromPayload = options.command === payloadCommand;
  return (run, { signal }) => new Promise<unknown>((resolve, reject) => {
    const spec: ExecSpec = fromPayload ? execSpecOf(run.payload) : { command: options.command };
    const stderrTail = new TailBuffer(cliExecStderrTailBytesMax);
    // Its own process group, so that a kill reaches whatever the shell started too: a
    // grandchild left alive would keep the stderr pipe open and the run from ending.
    const child = spawn(spec.shell ?? '/bin/sh', ['-c', spec.command], {
      env: { ...process.env, ...spec.env, ...runEnvironment(run, options.pool) },
      stdio: ['pipe', fromPayload ? 'pipe' : 'inherit', 'pipe'],
      detached: true,
      ...(spec.cwd === undefined ? {} : { cwd: spec.cwd }),
    }) as ChildProcessByStdio<Writable, Readable | null, Readable>;
    // A payload's command: stdout and stderr together, for the result.
    child.stdout?.on('data', (chunk: Buffer) => {
      stderrTail.push(chunk);
      stdoutSink(chunk);
    });
    const startedMs = clock.nowMs();
    const pid = child.pid;
    if (pid !== undefined) options.running?.add(pid);
    // A failed kill is reported with the run's outcome, since there is no caller to throw to.
    const signalChild = (signalName: NodeJS.Signals): void => {
      if (pid !== undefined) killGroup(pid, signalName, (message) => stderrTail.push(Buffer.from(message)));
    };
    child.stderr.on('data', (chunk: Buffer) => {
      stderrTail.push(chunk);
      stderrSink(chunk);
    });
    child.stdin.on('error', (error: NodeJS.ErrnoException) => {
      // A command that never reads its stdin closes the pipe early; its exit code still decides.
      if (error.code !== 'EPIPE') stderrTail.push(Buffer.from(`tickler: writing the payload failed: ${error.message}\n`));
    });
    child.stdin.end(fromPayload ? (spec.stdin ?? '') : JSON.stringify(run.payload ?? null));
    let killTimer: { cancel(): void } | undefined;
    let closed = false;
    let timedOut = false;
    const onAbort = (): void => {
      signalChild('SIGTERM');
      killTimer = clock.setTimer(clock.nowMs() + killGraceMs, () => {
        if (!closed) signalChild('SIGKILL');
      });
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    const timeoutTimer = spec.timeout_s === undefined ? undefined : clock.setTimer(clock.nowMs() + spec.timeout_s * 1_000, () => {
      timedOut = true;
      onAbort();
    });
    child.on('error', (error) => {
      signal.removeEventListener('abort', onAbort);
      if (pid !== undefined) options.running?.delete(pid);
      options.logger?.warn({ runId: run.run_id, jobId: run.job_id, attempt: run.attempt, err: error }, 'command could not start');
      reject(new Error(`cannot run ${options.command}: ${error.message}`, { cause: error }));
    });
    child.on('close', (code, killedBy) => {
      closed = true;
      signal.removeEventListener('abort', onAbort);
      killTimer?.cancel();
      timeoutTimer?.cancel();
      if (pid !== undefined) options.running?.delete(pid);
      const succeeded = code === exitCodeSucceeded && !timedOut;
      const outcome = succeeded ? 'succeeded' : code === exitCodePermanent ? 'failed_permanent' : 'failed';
      const details = {
        runId: run.run_id, jobId: run.job_id, attempt: run.attempt, outcome, exitCode: code, signal: killedBy, timedOut,
        durationMs: clock.nowMs() - startedMs,
      };
      if (succeeded) {
        options.logger?.info(details, 'command succeeded');
        resolve(fromPayload ? { exit_code: 0, output_tail: stderrTail.text() } : undefined);
        return;
      }
      options.logger?.warn(details, `command ${outcome === 'failed_permanent' ? 'failed permanently' : 'failed'}`);
      const tail = stderrTail.text().trimEnd();
      const killed = code === null ? `killed by ${killedBy ?? 'a signal'}` : `exited with code ${code}`;
      const how = timedOut ? `timed out after ${spec.timeout_s} s and was ${killed}` : killed;
      const message = tail === '' ? `command ${how}` : `command ${how}: ${tail}`;
      reject(code === exitCodePermanent ? new PermanentError(message) : new Error(message));
    });
  });
}
