/**
 * CPU time of processes on this machine, from Linux's /proc (user + system, all threads), for
 * benchmarks that split a workload's CPU between the server, PostgreSQL and themselves.
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
