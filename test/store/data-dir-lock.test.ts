// The embedded store's data-dir lock under real contention: many processes race for one data
// directory, fresh or left locked by a process killed with SIGKILL, and exactly one of them
// wins each round; every other is refused at once, naming the winner's pid. Then, in this
// process, the owners that only look alive (a recycled pid, a container's pid 1) or dead.
import assert from 'node:assert/strict';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { acquireDataDirLock, claimFileNameOf, lockFileName } from '../../src/data-dir-lock.js';
import { FatalError } from '../../src/fatal-error.js';

const childPath = resolve(import.meta.dirname, 'data-dir-lock-child.ts');
const contenderCount = 40;
/** Rounds are cheap (the contenders stay up); a stale round starts and kills one more process. */
const freshRoundCount = 20;
const staleRoundCount = 10;

interface Answer {
  pid: number;
  outcome: 'won' | 'refused' | 'released';
  tookOver?: boolean;
  message?: string;
}

/** A child process that takes and releases the lock on command (data-dir-lock-child.ts). */
class Contender {
  private readonly answers: Answer[] = [];
  private waiting: ((answer: Answer) => void) | undefined;
  private readonly exited: Promise<unknown>;

  constructor(private readonly child: ChildProcessWithoutNullStreams) {
    this.exited = once(child, 'exit');
    createInterface({ input: child.stdout }).on('line', (line) => {
      const parsed = JSON.parse(line) as Answer;
      const waiting = this.waiting;
      this.waiting = undefined;
      if (waiting === undefined) this.answers.push(parsed);
      else waiting(parsed);
    });
    child.stderr.on('data', (chunk: Buffer) => process.stderr.write(chunk));
  }

  static start(): Contender {
    return new Contender(spawn(process.execPath, ['--import', 'tsx', childPath], { stdio: ['pipe', 'pipe', 'pipe'] }));
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Sends a command; resolves with its answer. */
  send(command: string): Promise<Answer> {
    const answer = new Promise<Answer>((resolveAnswer) => {
      const queued = this.answers.shift();
      if (queued === undefined) this.waiting = resolveAnswer;
      else resolveAnswer(queued);
    });
    this.child.stdin.write(`${command}\n`);
    return answer;
  }

  async kill(): Promise<void> {
    this.child.kill('SIGKILL');
    await this.exited;
  }

  async close(): Promise<void> {
    this.child.stdin.end();
    await this.exited;
  }
}

const contenders: Contender[] = [];
const dirs: string[] = [];

function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tickler-lock-'));
  dirs.push(dir);
  return dir;
}

before(async () => {
  for (let index = 0; index < contenderCount; index++) contenders.push(Contender.start());
  // Every contender answers once before the first round: all are started and reading stdin.
  await Promise.all(contenders.map((contender) => contender.send('release')));
});

after(async () => {
  await Promise.all(contenders.map((contender) => contender.close()));
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** All contenders race for `dir` at once; asserts one winner and answers it. */
async function race(dir: string, round: number): Promise<Answer> {
  const answers = await Promise.all(contenders.map((contender) => contender.send(`take ${dir}`)));
  const winners = answers.filter((answer) => answer.outcome === 'won');
  assert.equal(winners.length, 1, `round ${round}: ${winners.length} processes took the lock (pids ${winners.map((w) => w.pid).join(', ')})`);
  const winner = winners[0]!;
  for (const answer of answers.filter((candidate) => candidate.outcome === 'refused')) {
    assert.match(answer.message!, new RegExp(`in use by process ${winner.pid}\\b`), `round ${round}: ${answer.message}`);
  }
  return winner;
}

async function releaseAll(): Promise<void> {
  await Promise.all(contenders.map((contender) => contender.send('release')));
}

test(`${contenderCount} processes racing for a fresh data dir: exactly one wins each of ${freshRoundCount} rounds`, async () => {
  for (let round = 1; round <= freshRoundCount; round++) {
    const dir = freshDir();
    const winner = await race(dir, round);
    assert.equal(winner.tookOver, false);
    assert.deepEqual(readdirSync(dir), ['tickler.lock'], 'nothing else is left in the directory');
    await releaseAll();
    assert.deepEqual(readdirSync(dir), [], 'the winner\'s release removed the lock');
  }
});

test(`${contenderCount} processes racing for a data dir whose owner was killed with SIGKILL: exactly one takes it over`,
  async () => {
    for (let round = 1; round <= staleRoundCount; round++) {
      const dir = freshDir();
      const owner = Contender.start();
      assert.equal((await owner.send(`take ${dir}`)).outcome, 'won');
      await owner.kill();
      const winner = await race(dir, round);
      assert.equal(winner.tookOver, true, `round ${round}: the winner knows it took over from a dead process`);
      assert.deepEqual(readdirSync(dir), ['tickler.lock'], 'nothing else is left in the directory');
      await releaseAll();
    }
  });

/** A dead pid: a contender's that was killed. */
async function deadPid(): Promise<number> {
  const contender = Contender.start();
  await contender.send('release');
  await contender.kill();
  return contender.pid;
}

test('a second start in the same process is refused, naming this process', () => {
  const dir = freshDir();
  const lock = acquireDataDirLock(dir);
  assert.throws(() => acquireDataDirLock(dir), (error: unknown) =>
    error instanceof FatalError && error.message.includes(`in use by process ${process.pid}`));
  lock.release();
  acquireDataDirLock(dir).release();
  assert.deepEqual(readdirSync(dir), []);
});

test('a lock naming this process\'s pid that it does not hold is a predecessor\'s (a container\'s pid 1 restarted)', () => {
  const dir = freshDir();
  writeFileSync(join(dir, lockFileName), JSON.stringify({ pid: process.pid, nonce: 'before-the-restart' }));
  const lock = acquireDataDirLock(dir);
  assert.equal(lock.tookOverFromDeadProcess, true);
  assert.equal(JSON.parse(readFileSync(join(dir, lockFileName), 'utf8')).pid, process.pid);
  lock.release();
});

test('a live pid is the owner only if it is the same process: another start time or another boot is a dead owner',
  { skip: existsSync('/proc/self/stat') ? false : 'needs /proc (Linux)' }, () => {
    const livePid = contenders[0]!.pid;
    const dir = freshDir();
    const lockPath = join(dir, lockFileName);
    writeFileSync(lockPath, JSON.stringify({ pid: livePid, nonce: 'a' }));
    assert.throws(() => acquireDataDirLock(dir), new RegExp(`in use by process ${livePid}\\b`));
    writeFileSync(lockPath, JSON.stringify({ pid: livePid, nonce: 'b', pidStartTicks: 1 }));
    const recycled = acquireDataDirLock(dir);
    assert.equal(recycled.tookOverFromDeadProcess, true, 'the pid was recycled: its start time differs');
    recycled.release();
    writeFileSync(lockPath, JSON.stringify({ pid: livePid, nonce: 'c', bootId: 'a-boot-before-this-one' }));
    const rebooted = acquireDataDirLock(dir);
    assert.equal(rebooted.tookOverFromDeadProcess, true, 'written before a reboot');
    rebooted.release();
  });

test('an unreadable lock file (an older build killed between create and write) is a dead owner\'s', () => {
  const dir = freshDir();
  writeFileSync(join(dir, lockFileName), '');
  const lock = acquireDataDirLock(dir);
  assert.equal(lock.tookOverFromDeadProcess, true);
  lock.release();
});

test('a claim and a temporary file left by processes killed mid-takeover do not block the next start', async () => {
  const dir = freshDir();
  const lockText = JSON.stringify({ pid: await deadPid(), nonce: 'dead-owner' });
  writeFileSync(join(dir, lockFileName), lockText);
  const claimerPid = await deadPid();
  writeFileSync(join(dir, claimFileNameOf(lockText)), JSON.stringify({ pid: claimerPid, nonce: 'dead-claimer' }));
  writeFileSync(join(dir, `${lockFileName}.tmp-${claimerPid}-left-behind`), '{}');
  const lock = acquireDataDirLock(dir);
  assert.equal(lock.tookOverFromDeadProcess, true);
  assert.deepEqual(readdirSync(dir), [lockFileName], 'the dead claim and temporary file are gone');
  lock.release();
});
