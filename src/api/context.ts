/**
 * What the HTTP layer's modules share: the app's type, what it is built from (AppDeps,
 * ApiConfig) and what route modules are handed (ApiContext). Kept apart from app.ts, which
 * registers the route modules, so that they do not import the module that imports them.
 */
import type { FastifyBaseLogger, FastifyInstance, RawServerDefault } from 'fastify';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Clock, VirtualClock } from '../clock.js';
import type { Metrics } from '../obs/metrics.js';
import type { Logger } from '../obs/log.js';
import type { Store } from '../store/store.js';
import type * as limits from '../limits.js';
import type { JobService } from '../service/job-service.js';
import type { LabelSelector } from '../service/job-spec.js';
import type { RunService } from '../service/run-service.js';
import type { LeaseWaiters } from '../service/lease-waiters.js';
import type { LeasePlanner } from '../service/lease-planner.js';
import type { TeamLimits } from '../service/team-limits.js';
import type { TeamLimitsEntry } from '../store/store.js';
import type { AuthLevel, Caller } from './auth.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Who may call the route; routes without it need a team key. */
    auth?: AuthLevel;
  }
  interface FastifyRequest {
    caller: Caller | null;
    /** The body text as given, for key idempotency; null without a body. */
    rawBody: string | null;
  }
}

export interface ApiConfig {
  /** key → team; null = open mode (every caller is team 'default'); team 'admin' is an admin. */
  apiKeys: Map<string, string> | null;
  payloadBytesMax: number;
  cronToleranceDefaultS: number;
  /** `JobServiceDeps.dispatchAtCreate`; on unless false. */
  dispatchAtCreate?: boolean;
  /** Jobs with this label must set max_silence_s. */
  silenceRequiredLabel?: LabelSelector | null;
  /** Timeouts and the connection cap of the server (default `limits.httpLimitsDefaults`). */
  http?: limits.HttpLimits;
  /** Lease planner (src/service/lease-planner.ts): P2's share under P0/P1 backlog, team weights and dispatch caps. */
  p2Share?: number;
  fairTeams?: boolean;
  /** `--limits FILE`: team limits stored when the app is ready, before it answers. */
  teamLimits?: readonly TeamLimitsEntry[];
}

export interface AppDeps {
  store: Store;
  clock: Clock;
  virtualClock: VirtualClock | null;
  metrics: Metrics;
  logger: Logger;
  config: ApiConfig;
  /** /readyz: store reachable and shards owned (the server wiring provides it). */
  readiness(): Promise<{ ready: boolean; detail: Record<string, unknown> }>;
  /** False on a node without the api role: only the operations routes are served. */
  apiRoutes?: boolean;
}

export type App = FastifyInstance<RawServerDefault, IncomingMessage, ServerResponse, FastifyBaseLogger, TypeBoxTypeProvider>;

/** What route modules share. */
export interface ApiContext {
  deps: AppDeps;
  jobs: JobService;
  runs: RunService;
  waiters: LeaseWaiters;
  planner: LeasePlanner;
  teamLimits: TeamLimits;
}

