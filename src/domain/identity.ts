/**
 * Identity and placement: the deterministic run id (DESIGN.md "Nouns"), the shard a job
 * lives on and the one-minute bucket a timer falls in. Pure; hashing is the only work.
 */
import { hash, randomFillSync } from 'node:crypto';
import { stringify as stableStringify } from 'safe-stable-stringify';
import { bucketDurationMs, shardCount } from './limits.js';

/**
 * `hex(sha256(job_id + "|" + scheduled_at_iso))[0:32]`, on the pre-jitter time. A herd
 * computes one per run: the one-shot `hash` (Node 20.12) takes 1.1 us where a Hash object,
 * updated and digested, took 1.7 (measured, 200,000 ids).
 */
export function runIdOf(jobId: string, scheduledAtMs: number): string {
  return hash('sha256', `${jobId}|${new Date(scheduledAtMs).toISOString()}`).slice(0, 32);
}

/** FNV-1a over the UTF-16 code units: fast, stable across processes and stores. */
export function hash32(text: string): number {
  let hash = 0x811c9dc5;
  for (let index = 0; index < text.length; index++) {
    hash ^= text.charCodeAt(index);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

export function shardOf(jobId: string): number {
  return hash32(jobId) % shardCount;
}

export function bucketOf(fireAtMs: number): number {
  return Math.floor(fireAtMs / bucketDurationMs);
}

/**
 * Job ids sort by creation time: 12 hex digits of milliseconds, then 16 random hex digits.
 * The random part is not a secret; it only keeps ids unique across nodes.
 */
export function newJobId(nowMs: number): string {
  return `${timePrefixOf(nowMs)}${randomHex16()}`;
}

/** The jobs of one batch share their creation time: its prefix is formatted once. */
let lastPrefixMs = Number.NaN;
let lastPrefix = '';

function timePrefixOf(nowMs: number): string {
  if (nowMs !== lastPrefixMs) {
    lastPrefix = `j_${Math.floor(nowMs).toString(16).padStart(12, '0')}`;
    lastPrefixMs = nowMs;
  }
  return lastPrefix;
}

/**
 * Random bytes drawn 4 KiB at a time: one crypto call per id was 12 % of the create path
 * (measured with `npm run bench -- --only create --cpu-prof`).
 */
const randomPool = Buffer.alloc(4096);
let randomPoolOffset = randomPool.length;

function randomHex16(): string {
  if (randomPoolOffset + 8 > randomPool.length) {
    randomFillSync(randomPool);
    randomPoolOffset = 0;
  }
  const hex = randomPool.toString('hex', randomPoolOffset, randomPoolOffset + 8);
  randomPoolOffset += 8;
  return hex;
}

export function sha256Hex(text: string): string {
  return hash('sha256', text);
}

/** Marks a request hash taken over canonical JSON; one without it hashed the body's text as sent. */
const canonicalHashPrefix = 'c1:';

/**
 * What a keyed create is compared by when its key repeats (API.md "key"): the body's canonical
 * JSON (object keys sorted, no whitespace), hashed. Key order and whitespace do not matter;
 * values do (`1` and `1.0` are one JSON value).
 */
export function requestHashOf(body: unknown): string {
  return canonicalHashPrefix + sha256Hex(stableStringify(body) ?? 'null');
}

/**
 * Whether `storedHash` stands for this request: its canonical hash, or, for a job stored
 * before canonical hashes, the hash of the body's text as sent (`legacyTextHash`).
 */
export function isSameRequest(storedHash: string, request: { requestHash: string; legacyTextHash?: string }): boolean {
  if (storedHash === request.requestHash) return true;
  return !storedHash.startsWith(canonicalHashPrefix) && request.legacyTextHash !== undefined && storedHash === request.legacyTextHash;
}
