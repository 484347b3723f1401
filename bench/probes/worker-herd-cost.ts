/**
 * The SDK worker's own cost of starting a herd it holds: a `createWorker` against an
 * in-process stand-in for the server (no HTTP, no store), leasing `--runs` runs ahead of one
 * ready instant (`leaseAheadMs` 3,000, `holdAheadMax` = runs) and answering completion batches
 * after `--ack-ms`. Prints handler start − ready instant (p50, p99, max) per round: what is
 * left of a herd's lag once every run is in the worker's hands before its instant, which is
 * the worker's CPU per run (docs/benchmarks.md, "Figures behind the defaults").
 *
 * `--ready`: W3's shape instead, a backlog ready at once, leased as it is handled (no lease
 * ahead, each lease answered after 1 ms); prints the runs handled a second and the CPU per start.
 *
 *   node --expose-gc --import tsx bench/probes/worker-herd-cost.ts [--runs 50000] [--ack-ms 3] [--rounds 3] [--ready]
 */
import { parseArgs } from 'node:util';
import { createWorker } from '../../src/worker/worker.js';
import type { TicklerClient } from '../../src/worker/client.js';
import type { CompleteBatchItem, LeasedRun, LeaseRequest } from '../../src/worker/wire.js';

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '50000' }, 'ack-ms': { type: 'string', default: '3' }, rounds: { type: 'string', default: '3' },
    ready: { type: 'boolean', default: false },
  },
});
const ready = values.ready;
const runCount = Number(values.runs);
const ackMs = Number(values['ack-ms']);
const leadMs = ready ? 0 : 1_500;
const leaseAnswerMs = ready ? 1 : 5;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Answers leases from a herd ready at `readyAtMs` (through JSON, as over HTTP), then parks them until aborted. */
function standInClient(readyAtMs: number): TicklerClient {
  const readyAt = new Date(readyAtMs).toISOString();
  let handedOut = 0;
  const runOf = (index: number): LeasedRun => ({
    run_id: `r${String(index).padStart(31, '0')}`, job_id: `j${String(index).padStart(25, '0')}`, team: 'default', attempt: 1,
    scheduled_at: readyAt, fire_at: readyAt, dispatched_at: readyAt, payload: { i: index, due: readyAtMs },
    fencing_token: String(1_000 + index), lease_expires_at: new Date(readyAtMs + 60_000).toISOString(), ready_at: readyAt,
  });
  const client = {
    async leaseRuns(body: LeaseRequest, options?: { signal?: AbortSignal }): Promise<{ runs: LeasedRun[] }> {
      if (handedOut < runCount) {
        const count = Math.min(body.max, runCount - handedOut);
        const runs = JSON.parse(JSON.stringify(Array.from({ length: count }, () => runOf(handedOut++)))) as LeasedRun[];
        await sleep(leaseAnswerMs);
        return { runs };
      }
      await new Promise((resolve) => options?.signal?.addEventListener('abort', resolve, { once: true }));
      throw new Error('lease aborted');
    },
    async completeRunsBriefly(items: CompleteBatchItem[]): Promise<{ results: { status: number }[] }> {
      JSON.stringify({ completions: items, answer: 'status' });
      await sleep(ackMs);
      return JSON.parse(JSON.stringify({ results: items.map(() => ({ status: 200 })) })) as { results: { status: number }[] };
    },
    async heartbeatRuns(items: unknown[]) {
      return { results: items.map(() => ({ status: 200, lease_expires_at: new Date(Date.now() + 60_000).toISOString() })) };
    },
  };
  return client as unknown as TicklerClient;
}

interface RoundFigures { p50: number; p99: number; max: number; heldHeapMb: number; cpuPerStartUs: number; perS: number }

async function round(): Promise<RoundFigures> {
  const readyAtMs = Date.now() + leadMs;
  // The heap just before the instant, the whole herd held (after a full collection when --expose-gc).
  let heldHeapMb = Number.NaN;
  if (!ready) {
    setTimeout(() => {
      (globalThis as { gc?: () => void }).gc?.();
      heldHeapMb = process.memoryUsage().heapUsed / 1e6;
    }, leadMs - 100);
  }
  const lags: number[] = [];
  // The worker's CPU from the first start to the last: its cost per start, steadier than the
  // lag percentiles on a shared machine (the event loop also waits for the stand-in's timers).
  let cpuAtFirst: NodeJS.CpuUsage | undefined;
  let firstStartMs = 0;
  let cpuPerStartUs = Number.NaN;
  let perS = Number.NaN;
  let allStarted!: () => void;
  const started = new Promise<void>((resolve) => {
    allStarted = resolve;
  });
  const worker = createWorker({
    client: standInClient(readyAtMs), pool: 'herd', concurrency: 50, prefetch: 50,
    ...(ready ? {} : { leaseAheadMs: 3_000, holdAheadMax: runCount }),
    logger: { debug: () => undefined, info: () => undefined, warn: () => undefined, error: (details, message) => console.error(message, details) },
    handler: (run) => {
      lags.push(Date.now() - (run.payload as { due: number }).due);
      if (lags.length === 1) {
        cpuAtFirst = process.cpuUsage();
        firstStartMs = performance.now();
      }
      if (lags.length === runCount) {
        const cpu = process.cpuUsage(cpuAtFirst);
        cpuPerStartUs = (cpu.user + cpu.system) / (runCount - 1);
        perS = ((runCount - 1) * 1_000) / (performance.now() - firstStartMs);
        allStarted();
      }
    },
  });
  worker.start();
  await started;
  await worker.stop({ timeoutMs: 1_000 });
  lags.sort((a, b) => a - b);
  return { p50: lags[Math.floor(runCount / 2)]!, p99: lags[Math.floor(runCount * 0.99)]!, max: lags[runCount - 1]!, heldHeapMb,
    cpuPerStartUs, perS };
}

for (let index = 1; index <= Number(values.rounds); index++) {
  const { p50, p99, max, heldHeapMb, cpuPerStartUs, perS } = await round();
  console.log(ready
    ? `round ${index}: ${runCount} ready runs, ${Math.round(perS)} handled/s; CPU ${cpuPerStartUs.toFixed(2)} us per start`
    : `round ${index}: ${runCount} runs, start − ready p50 ${p50} ms, p99 ${p99} ms, max ${max} ms; ` +
      `CPU ${cpuPerStartUs.toFixed(2)} us per start; heap before the instant ${heldHeapMb.toFixed(0)} MB`);
}
