/**
 * The systems under test by name: building an adapter (fresh, or attached to a store another
 * process started, for child workers) and saying why one cannot run here (its service down).
 */
import { durableRedisUnavailableReason } from '../durable-redis.js';
import { postgresUnavailableReason, redisUnavailableReason } from '../services.js';
import type { AttachInfo, SystemAdapter, SystemName } from '../types.js';
import { BullmqAdapter } from './bullmq.js';
import { GraphileWorkerAdapter } from './graphile-worker.js';
import { PgBossAdapter } from './pg-boss.js';
import { TicklerAdapter } from './tickler.js';

export interface AdapterOptions {
  /** Attach to a store another process started (child workers) instead of creating one. */
  attached?: AttachInfo;
  /** tickler only: run the server under `node --cpu-prof`, writing profiles here. */
  cpuProfileDir?: string;
}

export function makeAdapter(name: SystemName, options: AdapterOptions = {}): SystemAdapter {
  const { attached } = options;
  switch (name) {
    case 'tickler-sqlite': return new TicklerAdapter('sqlite', options);
    case 'tickler-postgres': return new TicklerAdapter('postgres', options);
    case 'tickler-postgres-direct': return new TicklerAdapter('postgres', { ...options, workers: 'direct' });
    case 'bullmq': return new BullmqAdapter(attached);
    case 'bullmq-aof': return new BullmqAdapter(attached, 'aof');
    case 'graphile-worker': return new GraphileWorkerAdapter(attached);
    case 'pg-boss': return new PgBossAdapter(attached);
  }
}

/** Undefined when the system's service answers; otherwise the reason it is skipped. */
export async function unavailableReason(name: SystemName): Promise<string | undefined> {
  switch (name) {
    case 'tickler-sqlite': return undefined;
    case 'bullmq': return redisUnavailableReason();
    case 'bullmq-aof': return durableRedisUnavailableReason();
    case 'tickler-postgres':
    case 'tickler-postgres-direct':
    case 'graphile-worker':
    case 'pg-boss': return postgresUnavailableReason();
  }
}
