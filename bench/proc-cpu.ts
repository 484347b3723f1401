/**
 * CPU time of processes on this machine, from Linux's /proc (user + system, all threads), for
 * benchmarks that split a workload's CPU between the server, PostgreSQL and themselves; and of
 * the whole machine, for benchmarks that price a workload in every process it wakes.
 */
import { readdirSync, readFileSync } from 'node:fs';

const clockTicksPerS = 100;

/** User + system CPU in a /proc `stat` text (of a process or a thread), in ms. */
function statCpuMs(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(') ') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1_000) / clockTicksPerS;
}

/** User + system CPU of a process so far, in ms. */
export function processCpuMs(pid: number): number {
  return statCpuMs(readFileSync(`/proc/${pid}/stat`, 'utf8'));
}

/**
 * User + system CPU of each thread of a process so far, in ms, keyed `name#tid` (Node's own
 * threads are all named `node`, so the name alone does not tell V8's from libuv's).
 */
export function threadCpuMs(pid: number): Map<string, number> {
  const byThread = new Map<string, number>();
  for (const thread of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${thread}/stat`, 'utf8');
      byThread.set(`${stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'))}#${thread}`, statCpuMs(stat));
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return byThread;
}

/**
 * CPU of every PostgreSQL process on the machine so far, in ms (backends, WAL writer,
 * checkpointer, autovacuum): meaningful while nothing else uses the server.
 */
export function postgresCpuMs(): number {
  let totalMs = 0;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() !== 'postgres') continue;
      totalMs += processCpuMs(Number(entry));
    } catch {
      // The process ended between the listing and the read.
    }
  }
  return totalMs;
}

/**
 * CPU the whole machine has spent so far, in ms, summed over its cores: user, nice, system,
 * irq and softirq time from /proc/stat (not idle, not iowait, and not steal: time the
 * hypervisor gave another guest is not work done here). The difference across a
 * phase is what every process on the machine spent in it: client, server, database, kernel.
 */
export function machineCpuMs(): number {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/);
  // cpu user nice system idle iowait irq softirq steal ...
  const ticks = [1, 2, 3, 6, 7].reduce((total, index) => total + Number(fields[index] ?? 0), 0);
  return (ticks * 1_000) / clockTicksPerS;
}
