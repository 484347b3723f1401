/**
 * In embedded mode a data directory belongs to one process (API.md "Server"): two servers on
 * one SQLite file would each run a scheduler over the same shards. A second process refuses
 * to start at once, naming the owner; a process restarted after a crash takes over at once
 * and tells the scheduler it may take the shard leases the dead process still held, instead
 * of waiting out their TTL.
 *
 * Taking a free lock. The lock is the file `tickler.lock`, holding its owner's record: pid, a
 * random nonce, start time, host, and on Linux the boot id and the process's start time in
 * clock ticks. The record is written to a temporary file of this process in the same
 * directory, which is then hard-linked to the lock's name. link(2) fails with EEXIST when the
 * name exists, atomically, so of processes racing for a free directory exactly one gets it,
 * and the lock file never exists without its whole record. (An exclusive create followed by
 * a write of the pid would leave a moment in which a racer reads an empty file, takes it for a
 * dead owner's, deletes it and locks too.)
 *
 * Judging an owner. A process finding the lock reads the record and asks whether its owner
 * lives: `kill(pid, 0)` answers ESRCH for a dead pid (EPERM: alive, another user's). A pid is
 * reused once its process is gone, so a live pid is not enough: where /proc tells, the boot id
 * must match (after a reboot every owner is dead) and so must the pid's start time in
 * /proc/<pid>/stat (another start time: another process with a recycled pid). A record naming
 * this very process's pid that this process does not hold is dead too: a container restarted
 * on the same volume runs tickler as pid 1 again, and the pid 1 that wrote the record is gone.
 * A live owner: refused at once, with a FatalError naming its pid.
 *
 * Taking over from a dead owner (a crash, kill -9, a power loss). Deleting the file and
 * linking anew is not enough: two processes finding the same dead record would both delete,
 * and the second delete could remove the lock the first had just linked. So the right to
 * remove one given record is itself taken by an exclusive link, of a claim file named after
 * the record's digest, `tickler.lock.claim-<digest>`. The claim's holder reads the lock again
 * and, only if it still holds that same record (the nonce makes every record unique, so one
 * once replaced never comes back), renames it to the dead mark `tickler.lock.dead-<digest>`;
 * then it removes its claim, and every process races for the free name by link, as for a
 * fresh directory. The winner, whichever process moved the record, finds the mark: it knows
 * it took over from a dead owner (the scheduler then takes the dead process's shard leases at
 * once) and deletes the mark. A live claim holder means a takeover is under way: wait a
 * millisecond and look again. A claim whose holder died mid-takeover is removed the same way,
 * by a claim on the claim's record, so a process killed at any instant leaves nothing that
 * blocks the next start; the winner deletes what dead processes left (claims, temporary
 * files). A file whose record cannot be read is a dead owner's: a live owner's always has its
 * whole record (a power loss before the record reached the disk, or an older build killed
 * between its create and its write, leaves such a file).
 *
 * Limits. Liveness is judged by pid, so the lock keeps apart processes that see each other's
 * pids: one host, one pid namespace. Two containers sharing a data volume cannot see each
 * other: run one `tickler serve` per volume, or PostgreSQL for several nodes.
 */
import { createHash, randomUUID } from 'node:crypto';
import { linkSync, readdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { FatalError } from './fatal-error.js';

export interface DataDirLock {
  /** True when a previous owner had died without releasing the lock. */
  readonly tookOverFromDeadProcess: boolean;
  release(): void;
}

export const lockFileName = 'tickler.lock';
const claimPrefix = `${lockFileName}.claim-`;
const deadPrefix = `${lockFileName}.dead-`;
const tempPrefix = `${lockFileName}.tmp-`;
/**
 * Looks at the lock before giving up. Each either ends (taken, refused), removes a dead record,
 * or waits 1 ms for a takeover under way, which takes a few system calls.
 */
const attemptsMax = 2_000;
/** Claims on claims at most: a level for each process killed mid-takeover of the same record. */
const claimDepthMax = 8;

interface OwnerRecord {
  pid: number;
  nonce?: string;
  startedAt?: string;
  host?: string;
  bootId?: string;
  pidStartTicks?: number;
}

/** The records of the locks and claims this process holds. */
const heldHere = new Set<string>();

export function acquireDataDirLock(dataDir: string): DataDirLock {
  const lockPath = join(dataDir, lockFileName);
  const ownText = recordText();
  const tempPath = writeTemp(dataDir, ownText);
  try {
    for (let attempt = 0; attempt < attemptsMax; attempt++) {
      if (linkExclusive(tempPath, lockPath)) {
        heldHere.add(ownText);
        const tookOver = removeLeftovers(dataDir, ownText);
        return { tookOverFromDeadProcess: tookOver, release: () => release(lockPath, ownText) };
      }
      const ownerText = readText(lockPath);
      if (ownerText === null) continue;
      const owner = parseRecord(ownerText);
      if (owner !== null && isAlive(owner, ownerText)) throw new FatalError(inUseMessage(dataDir, owner));
      removeDead(lockPath, ownerText, 0);
    }
  } finally {
    removeIfPresent(tempPath);
  }
  throw new FatalError(`could not take the lock ${lockPath}: other processes kept taking and releasing it; ` +
    'start again once they have settled');
}

function inUseMessage(dataDir: string, owner: OwnerRecord): string {
  const since = owner.startedAt === undefined ? '' : ` (started ${owner.startedAt})`;
  return `data directory ${dataDir} is in use by process ${owner.pid}${since}: embedded mode allows one process ` +
    'per data directory; stop that process, or start this one with another --data-dir (or use PostgreSQL for several nodes)';
}

/**
 * Under a claim on `text`, a dead owner's record, moves the lock at `path` aside as a dead mark
 * (depth 0), or deletes the claim at `path` (deeper), if it still holds that record; a claim
 * already held by a dead process is removed first, the same way.
 */
function removeDead(path: string, text: string, depth: number): void {
  const dir = dirname(path);
  const claimPath = join(dir, claimPrefix + digestOf(text));
  const claimText = recordText();
  const claimTemp = writeTemp(dir, claimText);
  let claimed: boolean;
  try {
    claimed = linkExclusive(claimTemp, claimPath);
  } finally {
    removeIfPresent(claimTemp);
  }
  if (claimed) {
    heldHere.add(claimText);
    try {
      if (readText(path) === text) {
        if (depth === 0) renameSync(path, join(dir, deadPrefix + digestOf(text)));
        else removeIfPresent(path);
      }
    } finally {
      removeIfPresent(claimPath);
      heldHere.delete(claimText);
    }
    return;
  }
  const claimerText = readText(claimPath);
  if (claimerText === null) return;
  const claimer = parseRecord(claimerText);
  if (claimer !== null && isAlive(claimer, claimerText)) {
    pauseMs(1);
    return;
  }
  if (depth < claimDepthMax) removeDead(claimPath, claimerText, depth + 1);
}

/**
 * Dead marks, and claims and temporary files of dead processes; answers whether a dead mark was
 * there (the lock was taken from a dead owner). Deleting a claim is harmless now that the lock
 * is ours: a claim only lets its holder remove the record it names, and that record is gone
 * for good. Our own record's claim and live processes' files are left alone.
 */
function removeLeftovers(dataDir: string, ownText: string): boolean {
  const ownClaim = claimPrefix + digestOf(ownText);
  let deadMarks = 0;
  for (const name of readdirSync(dataDir)) {
    if (name.startsWith(deadPrefix)) {
      deadMarks += 1;
      removeIfPresent(join(dataDir, name));
    } else if (name.startsWith(tempPrefix)) {
      const pid = Number(name.slice(tempPrefix.length).split('-')[0]);
      if (Number.isSafeInteger(pid) && pid !== process.pid && !pidExists(pid)) removeIfPresent(join(dataDir, name));
    } else if (name.startsWith(claimPrefix) && name !== ownClaim) {
      const text = readText(join(dataDir, name));
      const holder = text === null ? null : parseRecord(text);
      if (text !== null && (holder === null || !isAlive(holder, text))) removeIfPresent(join(dataDir, name));
    }
  }
  return deadMarks > 0;
}

function release(lockPath: string, ownText: string): void {
  if (!heldHere.delete(ownText)) return;
  // Nobody else deletes a live owner's lock, so it is still ours.
  if (readText(lockPath) === ownText) removeIfPresent(lockPath);
}

function isAlive(owner: OwnerRecord, text: string): boolean {
  if (heldHere.has(text)) return true;
  if (owner.pid === process.pid) return false;
  if (!pidExists(owner.pid)) return false;
  const currentBootId = bootId();
  if (owner.bootId !== undefined && currentBootId !== undefined && owner.bootId !== currentBootId) return false;
  if (owner.pidStartTicks !== undefined) {
    const ticks = startTicksOf(owner.pid);
    if (ticks !== undefined && ticks !== owner.pidStartTicks) return false;
  }
  return true;
}

function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ESRCH') return false;
    if (code === 'EPERM') return true;
    throw error;
  }
}

function recordText(): string {
  const record: OwnerRecord = {
    pid: process.pid,
    nonce: randomUUID(),
    startedAt: new Date().toISOString(),
    host: hostname(),
  };
  const boot = bootId();
  const ticks = startTicksOf(process.pid);
  if (boot !== undefined) record.bootId = boot;
  if (ticks !== undefined) record.pidStartTicks = ticks;
  return JSON.stringify(record);
}

function parseRecord(text: string): OwnerRecord | null {
  try {
    const parsed = JSON.parse(text) as Partial<OwnerRecord> | null;
    // kill(0, 0) or kill(-n, 0) would ask about process groups: such a record is nobody's.
    if (typeof parsed?.pid !== 'number' || !Number.isSafeInteger(parsed.pid) || parsed.pid <= 0) return null;
    return {
      pid: parsed.pid,
      ...(typeof parsed.startedAt === 'string' ? { startedAt: parsed.startedAt } : {}),
      ...(typeof parsed.bootId === 'string' ? { bootId: parsed.bootId } : {}),
      ...(typeof parsed.pidStartTicks === 'number' ? { pidStartTicks: parsed.pidStartTicks } : {}),
    };
  } catch (error) {
    if (error instanceof SyntaxError) return null;
    throw error;
  }
}

let bootIdRead: { value: string | undefined } | undefined;

/** This boot's id (Linux); undefined where there is none to read. */
function bootId(): string | undefined {
  bootIdRead ??= { value: readText('/proc/sys/kernel/random/boot_id')?.trim() };
  return bootIdRead.value;
}

/** When the process started, in clock ticks since boot (field 22 of /proc/<pid>/stat), where Linux tells. */
function startTicksOf(pid: number): number | undefined {
  const stat = readText(`/proc/${pid}/stat`);
  if (stat === null) return undefined;
  // The command name (field 2) is in parentheses and may hold spaces: count from its end.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[22 - 3]);
  return Number.isSafeInteger(ticks) ? ticks : undefined;
}

function writeTemp(dir: string, text: string): string {
  const path = join(dir, `${tempPrefix}${process.pid}-${randomUUID()}`);
  writeFileSync(path, text, { flag: 'wx' });
  return path;
}

/** Gives `target` the file at `source` unless `target` exists; false when it does. */
function linkExclusive(source: string, target: string): boolean {
  try {
    linkSync(source, target);
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    if (code === 'EPERM' || code === 'ENOTSUP' || code === 'EOPNOTSUPP') {
      throw new FatalError(`cannot take the lock ${target}: the file system of ${dirname(target)} does not support hard links ` +
        `(${code}), which the lock needs; put the data directory on a local file system`, { cause: error });
    }
    throw error;
  }
}

function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ESRCH') return null;
    throw error;
  }
}

function removeIfPresent(path: string): void {
  try {
    unlinkSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

function digestOf(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 16);
}

/** Blocks the thread: the lock is taken once, at start, before anything else runs. */
function pauseMs(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** The claim file that guards the deletion of the record `text` (for tests). */
export function claimFileNameOf(text: string): string {
  return claimPrefix + digestOf(text);
}
