/**
 * CPU time of processes on this machine, from Linux's /proc (user + system, all threads), for
 * benchmarks that split a workload's CPU between the server, PostgreSQL and themselves; and of
 * the whole machine, for benchmarks that price a workload in every process it wakes.
 */
import { readdirSync, readFileSync } from 'node:fs';

const clockTicksPerS = 100;

/** User + system CPU of a process so far, in ms. */
export function processCpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1_000) / clockTicksPerS;
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
