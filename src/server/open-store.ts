/**
 * Opens the store a node's `--store` URL names (a `sqlite:` path under the data directory by
 * default) and chooses, once, the wiring that goes with it (store-wiring.ts).
 */
import { join, resolve } from 'node:path';
import type { Clock } from '../clock.js';
import { TicklerError } from '../errors.js';
import type { TimingConfig } from '../limits.js';
import type { Logger } from '../obs/log.js';
import { openClusterNode } from './cluster-node.js';
import { openEmbeddedNode } from './embedded-node.js';
import type { StoreWiring } from './store-wiring.js';

export function openNodeStore(storeUrl: string | null, options: {
  dataDir: string; nodeId: string; timing: TimingConfig; clock: Clock; logger: Logger;
}): Promise<StoreWiring> {
  const url = storeUrl ?? `sqlite:${join(options.dataDir, 'tickler.db')}`;
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) return openClusterNode(url, options);
  if (!url.startsWith('sqlite:')) {
    throw new TicklerError('invalid_request', `unknown store URL ${url}: use sqlite:PATH or postgres://...`);
  }
  return openEmbeddedNode(resolve(url.slice('sqlite:'.length)), { nearHorizonMs: options.timing.loadHorizonMs, ...options });
}
