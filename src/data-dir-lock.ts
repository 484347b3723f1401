/**
 * In embedded mode a data directory belongs to one process (API.md "Server"). The lock is a
 * file created exclusively and holding the owner's pid. A second process finds a live pid
 * and refuses to start with a clear message; a process restarted after a crash finds a dead
 * pid and takes over at once — and tells the scheduler it may take the shard leases the
 * dead process still held, instead of waiting out their TTL.
 */
import { closeSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { TicklerError } from './errors.js';

export interface DataDirLock {
  /** True when a previous owner had died without releasing the lock. */
  readonly tookOverFromDeadProcess: boolean;
  release(): void;
}

const lockFileName = 'tickler.lock';

export function acquireDataDirLock(dataDir: string): DataDirLock {
  const path = join(dataDir, lockFileName);
  let tookOver = false;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fd = openSync(path, 'wx');
      writeSync(fd, JSON.stringify({ pid: process.pid, startedAt: new Date().toISOString() }));
      closeSync(fd);
      return {
        tookOverFromDeadProcess: tookOver,
        release: () => releaseIfOurs(path),
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holderPid = readHolderPid(path);
      if (holderPid !== null && holderPid !== process.pid && isAlive(holderPid)) {
        throw new TicklerError('unavailable',
          `data directory ${dataDir} is in use by process ${holderPid}; embedded mode allows one process per data ` +
          'directory (stop it, or use another --data-dir, or PostgreSQL for several nodes)');
      }
      unlinkSync(path);
      tookOver = true;
    }
  }
  throw new TicklerError('unavailable', `could not take the lock ${path}: another process keeps racing for it`);
}

function readHolderPid(path: string): number | null {
  try {
    const parsed = JSON.parse(readFileSync(path, 'utf8')) as { pid?: unknown };
    return typeof parsed.pid === 'number' ? parsed.pid : null;
  } catch (error) {
    // A lock file written halfway by a process killed mid-write: nobody can own it.
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    return null;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function releaseIfOurs(path: string): void {
  if (readHolderPid(path) !== process.pid) return;
  try {
    unlinkSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}
