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
 */
import { spawn } from 'node:child_process';
import { SystemClock, type Clock } from '../clock.js';
import { PermanentError } from '../worker/errors.js';
import type { RunHandler, WorkerLogger, WorkerRun } from '../worker/run-attempt.js';

export const exitCodeSucceeded = 0;
export const exitCodePermanent = 65;
export const exitCodeTemporary = 75;
export const stderrTailBytesMax = 4_096;
const killGraceMsDefault = 5_000;

export interface ExecHandlerOptions {
  command: string;
  pool: string;
  /** Between SIGTERM and SIGKILL once the run's signal aborts. */
  killGraceMs?: number;
  clock?: Clock;
  /** Where the child's stderr is copied as it arrives (besides the kept tail); default our stderr. */
  stderrSink?: (chunk: Buffer) => void;
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
  const killGraceMs = options.killGraceMs ?? killGraceMsDefault;
  const stderrSink = options.stderrSink ?? ((chunk: Buffer) => process.stderr.write(chunk));
  return (run, { signal }) => new Promise<void>((resolve, reject) => {
    const stderrTail = new TailBuffer(stderrTailBytesMax);
    // Its own process group, so that a kill reaches whatever the shell started too: a
    // grandchild left alive would keep the stderr pipe open and the run from ending.
    const child = spawn('/bin/sh', ['-c', options.command], {
      env: { ...process.env, ...runEnvironment(run, options.pool) },
      stdio: ['pipe', 'inherit', 'pipe'],
      detached: true,
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
    child.stdin.end(JSON.stringify(run.payload ?? null));
    let killTimer: { cancel(): void } | undefined;
    let closed = false;
    const onAbort = (): void => {
      signalChild('SIGTERM');
      killTimer = clock.setTimer(clock.nowMs() + killGraceMs, () => {
        if (!closed) signalChild('SIGKILL');
      });
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    child.on('error', (error) => {
      signal.removeEventListener('abort', onAbort);
      if (pid !== undefined) options.running?.delete(pid);
      options.logger?.warn({ runId: run.run_id, jobId: run.job_id, attempt: run.attempt, err: error }, 'command could not start');
      reject(new Error(`cannot run ${options.command}: ${error.message}`, { cause: error }));
    });
    child.on('close', (code, killedBy) => {
      closed = true;
      signal.removeEventListener('abort', onAbort);
      if (pid !== undefined) options.running?.delete(pid);
      killTimer?.cancel();
      const outcome = code === exitCodeSucceeded ? 'succeeded' : code === exitCodePermanent ? 'failed_permanent' : 'failed';
      const details = {
        runId: run.run_id, jobId: run.job_id, attempt: run.attempt, outcome, exitCode: code, signal: killedBy,
        durationMs: clock.nowMs() - startedMs,
      };
      if (code === exitCodeSucceeded) {
        options.logger?.info(details, 'command succeeded');
        resolve();
        return;
      }
      options.logger?.warn(details, `command ${outcome === 'failed_permanent' ? 'failed permanently' : 'failed'}`);
      const tail = stderrTail.text().trimEnd();
      const how = code === null ? `killed by ${killedBy ?? 'a signal'}` : `exited with code ${code}`;
      const message = tail === '' ? `command ${how}` : `command ${how}: ${tail}`;
      reject(code === exitCodePermanent ? new PermanentError(message) : new Error(message));
    });
  });
}
