/**
 * Applies a fault plan to the running cluster and records each fault's window in the history:
 * `fault_start` just before the signal, `fault_end` once the process is back (restarted and
 * ready, or continued) or the database restart has returned. Faults run concurrently; the
 * plan keeps them from taking the whole cluster down at once.
 */
import type { Clock } from '../src/clock.js';
import { pauseArmWindowMs } from '../src/store/postgres/pause-before-dispatch.js';
import type { ChaosDatabase } from './database.js';
import type { PlannedFault } from './fault-plan.js';
import type { HistoryRecorder } from './recorder.js';
import { describeError as describe } from './driver.js';
import { StartFailure, type ManagedProcess, type Supervisor } from './supervisor.js';

export interface FaultInjectorDeps {
  supervisor: Supervisor;
  database: ChaosDatabase;
  recorder: HistoryRecorder;
  clock: Clock;
  schedulers: readonly string[];
  /** Resolves `busy-owner` to a running scheduler, or null. */
  busiestOwner: (running: readonly string[]) => Promise<string | null>;
  log: (message: string) => void;
}

const restartTriesMax = 5;
/** Arms a scheduler's pause-before-dispatch hook (TICKLER_CHAOS_PAUSE_SIGNAL in cluster.ts). */
export const zombieArmSignal = 'SIGUSR2';
/** Within the node's arm window (pause-before-dispatch.ts), so a forced stop never meets a live arming. */
const zombieArmWaitMs = 2_800;

export class FaultInjector {
  private readonly deps: FaultInjectorDeps;
  readonly applied: PlannedFault[] = [];
  readonly skipped: { fault: PlannedFault; reason: string }[] = [];
  /** Faults that could not be undone (a process that would not restart): findings of the run. */
  readonly failures: string[] = [];
  /** Processes under a fault right now: a second fault waits its turn rather than race the first. */
  private readonly faulted = new Set<string>();

  constructor(deps: FaultInjectorDeps) {
    this.deps = deps;
  }

  async play(plan: readonly PlannedFault[], phaseStartMs: number): Promise<void> {
    const running: Promise<void>[] = [];
    for (const fault of plan) {
      await this.waitUntil(phaseStartMs + fault.startOffsetMs);
      running.push(this.apply(fault).catch((error: unknown) => {
        const message = `fault ${fault.faultId} (${fault.kind} of ${fault.target}) failed: ${describe(error)}`;
        this.failures.push(message);
        this.deps.log(message);
      }));
    }
    await Promise.all(running);
  }

  private waitUntil(atMs: number): Promise<void> {
    const { clock } = this.deps;
    if (clock.nowMs() >= atMs) return Promise.resolve();
    return new Promise((resolve) => clock.setTimer(atMs, resolve));
  }

  private async apply(fault: PlannedFault): Promise<void> {
    const { supervisor, database } = this.deps;
    if (fault.kind === 'postgres_restart') {
      if (database.restart === null) {
        this.skipped.push({ fault, reason: 'no private cluster' });
        return;
      }
      this.deps.recorder.record({ type: 'fault_start', faultId: fault.faultId, kind: fault.kind, target: 'postgres' });
      this.deps.log(`fault ${fault.faultId}: postgres restart -m immediate`);
      await database.restart();
      this.deps.recorder.record({ type: 'fault_end', faultId: fault.faultId });
      this.applied.push(fault);
      return;
    }
    const target = await this.resolveTarget(fault);
    if (target === null) {
      this.skipped.push({ fault, reason: `${fault.target} is not running or already faulted` });
      return;
    }
    const managed = supervisor.get(target);
    this.faulted.add(target);
    try {
      await this.applyToProcess(fault, managed);
    } finally {
      this.faulted.delete(target);
    }
  }

  private async applyToProcess(fault: PlannedFault, managed: ManagedProcess): Promise<void> {
    const { recorder } = this.deps;
    const target = managed.spec.name;
    recorder.record({ type: 'fault_start', faultId: fault.faultId, kind: fault.kind, target });
    this.deps.log(`fault ${fault.faultId}: ${fault.kind} of ${target} for ${fault.durationMs} ms`);
    if (fault.kind === 'scheduler_kill' || fault.kind === 'worker_kill' || fault.kind === 'api_kill') {
      await managed.kill();
      await this.waitUntil(this.deps.clock.nowMs() + fault.durationMs);
      await this.restart(managed);
    } else if (fault.midDispatch === true) {
      const how = await managed.pauseAtNextDispatch(zombieArmSignal, zombieArmWaitMs);
      this.deps.log(`fault ${fault.faultId}: ${target} ${how === 'self' ? 'stopped itself before a dispatch' : 'had no dispatch to stop at; SIGSTOP'}`);
      await this.waitUntil(this.deps.clock.nowMs() + fault.durationMs);
      managed.resume();
      if (how === 'forced') await managed.keepContinuing(pauseArmWindowMs + 500);
    } else {
      managed.pause();
      await this.waitUntil(this.deps.clock.nowMs() + fault.durationMs);
      managed.resume();
    }
    recorder.record({ type: 'fault_end', faultId: fault.faultId });
    this.applied.push({ ...fault, target });
  }

  private async resolveTarget(fault: PlannedFault): Promise<string | null> {
    const { supervisor, schedulers } = this.deps;
    const isRunning = (name: string): boolean => supervisor.get(name).state === 'running' && !this.faulted.has(name);
    if (fault.target !== 'busy-owner') return isRunning(fault.target) ? fault.target : null;
    const running = schedulers.filter(isRunning);
    const owner = await this.deps.busiestOwner(running);
    return owner ?? running[0] ?? null;
  }

  /**
   * Starts a killed process again, on its port; a start can time out while the database
   * restarts, so it is tried again. A process that exits at its start (its port taken by
   * another process, say) is a finding and a `node_start_failed` in the history, as is a
   * restart that never succeeds.
   */
  async restart(managed: ManagedProcess): Promise<void> {
    const name = managed.spec.name;
    for (let tryNumber = 1; ; tryNumber++) {
      try {
        await managed.start();
        return;
      } catch (error) {
        const exited = error instanceof StartFailure && error.exited;
        if (exited || tryNumber >= restartTriesMax) {
          const reason = error instanceof StartFailure ? error.reason : describe(error);
          this.deps.recorder.record({ type: 'node_start_failed', process: name, reason });
          if (exited) this.failures.push(`${name} exited at its restart: ${reason}`);
        }
        if (tryNumber >= restartTriesMax) {
          throw new Error(`${name} did not restart after ${tryNumber} tries`, { cause: error });
        }
        this.deps.log(`restart of ${managed.spec.name} failed (${(error as Error).message}); trying again`);
        await managed.kill();
        await this.waitUntil(this.deps.clock.nowMs() + 1_000);
      }
    }
  }
}
