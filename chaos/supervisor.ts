/**
 * Supervises the real processes of a chaos run: starts each with its output appended to a log
 * file, waits until it is ready, and applies faults to it — SIGKILL, SIGSTOP and SIGCONT —
 * and restarts it. Each start is a new incarnation (its counters start again at zero). An exit
 * the supervisor did not cause is remembered: a node that dies of a database restart is a
 * finding, not noise. A process that exits before it is ready fails its start instead
 * (`StartFailure`, with the process's own last words: a node whose port was taken says so),
 * and its caller decides what that means.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync, readSync, statSync } from 'node:fs';

export interface ProcessSpec {
  name: string;
  command: string;
  /** Or a function, asked at every start (a port chosen after the spec was made, say). */
  args: readonly string[] | (() => readonly string[]);
  env?: Readonly<Record<string, string>>;
  cwd?: string;
  logPath: string;
  /** Ready once this URL answers 200. */
  readyUrl?: string;
  /** Or once this text appears in the log written since the start. */
  readyLogText?: string;
  readyTimeoutMs?: number;
}

export type ProcessState = 'down' | 'running' | 'stopped';

export interface UnexpectedExit {
  name: string;
  incarnation: number;
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A start that failed: the process exited before it was ready, or never became ready. */
export class StartFailure extends Error {
  readonly processName: string;
  /** The process's own account: its last error line, or its last line. */
  readonly reason: string;
  readonly exited: boolean;

  constructor(processName: string, reason: string, exited: boolean, message: string) {
    super(message);
    this.name = 'StartFailure';
    this.processName = processName;
    this.reason = reason;
    this.exited = exited;
  }
}

const readyPollIntervalMs = 100;
const readyTimeoutMsDefault = 30_000;

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export class ManagedProcess {
  readonly spec: ProcessSpec;
  incarnation = 0;
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();
  private expectingExit = false;
  private stateValue: ProcessState = 'down';
  private readonly onUnexpectedExit: (exit: UnexpectedExit) => void;

  constructor(spec: ProcessSpec, onUnexpectedExit: (exit: UnexpectedExit) => void) {
    this.spec = spec;
    this.onUnexpectedExit = onUnexpectedExit;
  }

  get state(): ProcessState {
    return this.stateValue;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  async start(): Promise<void> {
    if (this.stateValue !== 'down') throw new Error(`${this.spec.name} is ${this.stateValue}; cannot start it`);
    const logOffset = fileSize(this.spec.logPath);
    const logFd = openSync(this.spec.logPath, 'a');
    this.incarnation += 1;
    const incarnation = this.incarnation;
    const args = typeof this.spec.args === 'function' ? this.spec.args() : this.spec.args;
    let child: ChildProcess;
    try {
      child = spawn(this.spec.command, [...args], {
        cwd: this.spec.cwd, env: { ...process.env, ...this.spec.env }, stdio: ['ignore', logFd, logFd],
      });
    } finally {
      closeSync(logFd);
    }
    this.child = child;
    this.expectingExit = false;
    this.stateValue = 'running';
    let ready = false;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | null = null;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        exit = { code, signal };
        if (this.child === child) {
          this.child = null;
          this.stateValue = 'down';
        }
        // An exit before ready is the start's failure, answered to whoever started it.
        if (!this.expectingExit && ready) this.onUnexpectedExit({ name: this.spec.name, incarnation, code, signal });
        resolve();
      });
    });
    let spawnError: Error | undefined;
    child.once('error', (error) => {
      spawnError = error;
    });
    await this.waitReady(logOffset, child, () => spawnError, () => exit);
    ready = true;
  }

  private async waitReady(logOffset: number, child: ChildProcess, spawnError: () => Error | undefined,
    exit: () => { code: number | null; signal: NodeJS.Signals | null } | null): Promise<void> {
    const { name, logPath } = this.spec;
    const deadlineMs = performance.now() + (this.spec.readyTimeoutMs ?? readyTimeoutMsDefault);
    while (performance.now() < deadlineMs) {
      const error = spawnError();
      if (error !== undefined) throw new Error(`${name} could not be started`, { cause: error });
      if (this.child !== child) {
        // The exit event comes before the streams are flushed to the log; give them a moment.
        await delay(readyPollIntervalMs);
        const reason = lastWords(readFrom(logPath, logOffset));
        const how = exit()?.signal == null ? `code ${exit()?.code ?? 'unknown'}` : `signal ${exit()?.signal}`;
        throw new StartFailure(name, reason, true, `${name} exited before it was ready (${how}): ${reason}; see ${logPath}`);
      }
      if (await this.isReady(logOffset)) return;
      await delay(readyPollIntervalMs);
    }
    const reason = lastWords(readFrom(logPath, logOffset));
    throw new StartFailure(name, reason, false,
      `${name} was not ready within ${this.spec.readyTimeoutMs ?? readyTimeoutMsDefault} ms (${reason}); see ${logPath}`);
  }

  private async isReady(logOffset: number): Promise<boolean> {
    if (this.spec.readyUrl !== undefined) {
      try {
        const response = await fetch(this.spec.readyUrl, { signal: AbortSignal.timeout(1_000) });
        await response.arrayBuffer();
        return response.ok;
      } catch {
        return false; // not listening yet: the loop asks again
      }
    }
    if (this.spec.readyLogText !== undefined) return readFrom(this.spec.logPath, logOffset).includes(this.spec.readyLogText);
    return true;
  }

  /** SIGKILL, and wait for the exit. */
  async kill(): Promise<void> {
    if (this.child === null) return;
    this.expectingExit = true;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  /** SIGSTOP: the process keeps its sockets and leases but runs no code. */
  pause(): void {
    if (this.child === null || this.stateValue !== 'running') throw new Error(`${this.spec.name} is not running`);
    this.child.kill('SIGSTOP');
    this.stateValue = 'stopped';
  }

  /**
   * Arms the node's pause-before-dispatch hook with `signal` and waits up to `waitMs` for the
   * process to stop itself; if it has not, stops it with SIGSTOP. Answers which happened.
   */
  async pauseAtNextDispatch(signal: NodeJS.Signals, waitMs: number): Promise<'self' | 'forced'> {
    const child = this.child;
    if (child === null || this.stateValue !== 'running') throw new Error(`${this.spec.name} is not running`);
    child.kill(signal);
    const deadlineMs = performance.now() + waitMs;
    while (performance.now() < deadlineMs) {
      if (this.child !== child) throw new Error(`${this.spec.name} exited while armed to pause`);
      if (isStopped(child.pid)) {
        this.stateValue = 'stopped';
        return 'self';
      }
      await delay(20);
    }
    this.pause();
    return 'forced';
  }

  resume(): void {
    if (this.child === null || this.stateValue !== 'stopped') return;
    this.child.kill('SIGCONT');
    this.stateValue = 'running';
  }

  /**
   * Sends SIGCONT every few tens of milliseconds for `forMs`: after a forced stop, a node that
   * handles its arming signal only once continued may stop itself once more; this lets it go.
   */
  async keepContinuing(forMs: number): Promise<void> {
    const deadlineMs = performance.now() + forMs;
    while (performance.now() < deadlineMs && this.child !== null && this.stateValue === 'running') {
      this.child.kill('SIGCONT');
      await delay(50);
    }
  }

  /** SIGTERM (after SIGCONT if stopped), SIGKILL if it has not exited within `timeoutMs`. */
  async terminate(timeoutMs: number): Promise<{ graceful: boolean }> {
    const child = this.child;
    if (child === null) return { graceful: true };
    this.expectingExit = true;
    if (this.stateValue === 'stopped') this.resume();
    // Also when it looks running: a node may have stopped itself (pause-before-dispatch)
    // after an arming the harness gave up on; a stopped process would sit on the SIGTERM.
    child.kill('SIGCONT');
    child.kill('SIGTERM');
    const graceful = await Promise.race([this.exited.then(() => true), delay(timeoutMs).then(() => false)]);
    if (!graceful) await this.kill();
    return { graceful };
  }

  /** Synchronous last resort when the harness itself is exiting. */
  killNow(): void {
    if (this.child === null) return;
    this.expectingExit = true;
    this.child.kill('SIGKILL');
  }
}

export class Supervisor {
  readonly processes = new Map<string, ManagedProcess>();
  readonly unexpectedExits: UnexpectedExit[] = [];
  private readonly onUnexpectedExit: (exit: UnexpectedExit) => void;

  constructor(onUnexpectedExit: (exit: UnexpectedExit) => void = () => undefined) {
    this.onUnexpectedExit = onUnexpectedExit;
    // A harness that dies must not leave nodes running against the database.
    process.once('exit', () => this.killAllNow());
  }

  add(spec: ProcessSpec): ManagedProcess {
    if (this.processes.has(spec.name)) throw new Error(`process ${spec.name} is already supervised`);
    const managed = new ManagedProcess(spec, (exit) => {
      this.unexpectedExits.push(exit);
      this.onUnexpectedExit(exit);
    });
    this.processes.set(spec.name, managed);
    return managed;
  }

  get(name: string): ManagedProcess {
    const managed = this.processes.get(name);
    if (managed === undefined) throw new Error(`no process named ${name}`);
    return managed;
  }

  async terminateAll(timeoutMs: number): Promise<string[]> {
    const results = await Promise.all([...this.processes.values()].map(async (managed) =>
      ({ name: managed.spec.name, ...(await managed.terminate(timeoutMs)) })));
    return results.filter((result) => !result.graceful).map((result) => result.name);
  }

  killAllNow(): void {
    for (const managed of this.processes.values()) managed.killNow();
  }
}

/** Whether a process with this pid exists (signal 0 reaches it, or would but for permission). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Linux: the process state in /proc/PID/stat is `T` once SIGSTOP has taken hold. */
function isStopped(pid: number | undefined): boolean {
  if (pid === undefined) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'T';
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
}

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw error;
  }
}

/** What a process said last about itself: its last error line (`tickler: ...`, `... failed: ...`), else its last line. */
export function lastWords(log: string): string {
  const lines = log.split('\n').map((line) => line.trim()).filter((line) => line !== '');
  const telling = lines.filter((line) => /^tickler: |failed: |^Error: /.test(line));
  const chosen = telling.at(-1) ?? lines.at(-1) ?? 'it wrote nothing';
  return chosen.length > 300 ? `${chosen.slice(0, 300)}...` : chosen;
}

function readFrom(path: string, offset: number): string {
  const size = fileSize(path);
  if (size <= offset) return '';
  const fd = openSync(path, 'r');
  try {
    const buffer = Buffer.alloc(size - offset);
    readSync(fd, buffer, 0, buffer.length, offset);
    return buffer.toString('utf8');
  } finally {
    closeSync(fd);
  }
}
