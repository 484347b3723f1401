/**
 * Who gets the runs of a lease (DESIGN.md "Many teams"): pure, no I/O, no clock.
 *
 * - Lanes: P0 before P1; while P0 or P1 have ready runs and so does P2, P2 is given `p2Share`
 *   of what is leased (a carried credit, so a worker leasing one run at a time still gets one
 *   P2 run in five at 0.2). With no P0/P1 backlog, P2 takes everything; with no P2 backlog,
 *   nothing is held back for it.
 * - Teams: inside a lane that several teams' runs share, a lease for all teams (an admin
 *   key) is shared by deficit round robin by each team's weight, a cursor carried from lease
 *   to lease, so a team with one ready run is served within one round however long another
 *   team's queue is.
 * - Budgets: dispatch caps (per lane, per team) granted as tokens for this lease; a plan with
 *   budgets enumerates every (lane, team) it may take from and has no unbounded fill.
 *
 * The store executes a plan slice by slice, in order (`runPlan`), each slice
 * an index range of its own, and stops when the lease is full. No plan (null) means a plain
 * lease, lane by lane in ready order: the one-team, one-lane case costs nothing more.
 */
import type { Lane } from './types.js';

export const policyLanes: readonly Lane[] = ['P0', 'P1', 'P2'];

/** One part of a lease: runs of `lane` (any lane when null) and `team` (any when null), at most `max`. */
export interface LeaseSlice {
  lane: Lane | null;
  team: string | null;
  max: number;
  /** Budget keys (`LeasePlan.budgets`) this slice draws from. */
  budgets?: readonly string[];
}

export interface LeasePlan {
  slices: LeaseSlice[];
  /** What is left to take under each cap; charged as slices lease. */
  budgets: Record<string, number>;
  /** Written by the executor: each slice's room and what it leased. */
  outcome?: { room: number; leased: number }[];
}

/** How many runs the slice may take now, with `remaining` left of the whole lease. */
function sliceRoom(plan: LeasePlan, slice: LeaseSlice, remaining: number): number {
  let room = Math.min(slice.max, remaining);
  for (const key of slice.budgets ?? []) room = Math.min(room, plan.budgets[key] ?? 0);
  return Math.max(0, Math.floor(room));
}

/** Records that a slice given `room` leased `count` runs, and charges its budgets. */
function chargeSlice(plan: LeasePlan, index: number, room: number, count: number): void {
  for (const key of plan.slices[index]!.budgets ?? []) plan.budgets[key] = (plan.budgets[key] ?? 0) - count;
  (plan.outcome ??= [])[index] = { room, leased: count };
}

/**
 * Executes a plan for a lease of `max` runs: each slice in order, given the room it has, until
 * the lease is full. `leaseSlice` leases up to `room` runs of the slice and answers how many.
 */
export function runPlanSync(plan: LeasePlan, max: number, leaseSlice: (slice: LeaseSlice, room: number) => number): number {
  let leased = 0;
  for (let index = 0; index < plan.slices.length && leased < max; index++) {
    const room = sliceRoom(plan, plan.slices[index]!, max - leased);
    const count = room > 0 ? leaseSlice(plan.slices[index]!, room) : 0;
    chargeSlice(plan, index, room, count);
    leased += count;
  }
  return leased;
}

/** `runPlanSync` for a store whose statements are asynchronous. */
export async function runPlan(plan: LeasePlan, max: number,
  leaseSlice: (slice: LeaseSlice, room: number) => Promise<number>): Promise<number> {
  let leased = 0;
  for (let index = 0; index < plan.slices.length && leased < max; index++) {
    const room = sliceRoom(plan, plan.slices[index]!, max - leased);
    const count = room > 0 ? await leaseSlice(plan.slices[index]!, room) : 0;
    chargeSlice(plan, index, room, count);
    leased += count;
  }
  return leased;
}

export const laneBudgetKey = (lane: Lane): string => `lane:${lane}`;
export const teamBudgetKey = (team: string): string => `team:${team}`;
const sharedLanesKey = 'share:P0P1';

/** The P2 credit of one pool: the fraction of a run owed to P2 carried between leases. */
export interface LaneShareState {
  credit: number;
}

/**
 * Runs of a lease of `max` held for P2 under contention: the owed share plus the carried
 * credit, whole runs only; the fraction is carried. Called only when P0 or P1 and P2 all
 * have ready runs, so P2 earns nothing while it has the pool to itself.
 */
export function p2Quota(state: LaneShareState, max: number, share: number): number {
  const owed = state.credit + share * max;
  const quota = Math.min(max, Math.floor(owed + 1e-9));
  state.credit = Math.min(1, owed - quota);
  return quota;
}

/** Deficit round robin over the teams of one (pool, lane). */
export interface DrrState {
  deficits: Map<string, number>;
  /** The team whose turn it is; its quantum for this turn was added when `quantumAdded`. */
  cursor: string | null;
  quantumAdded: boolean;
}

export function newDrrState(): DrrState {
  return { deficits: new Map(), cursor: null, quantumAdded: false };
}

export interface WeightedTeam {
  team: string;
  /** Share in fair leasing (> 0; default 1). */
  weight: number;
}

/**
 * Shares `count` runs among `teams` (each with ready runs) by deficit round robin: each turn
 * a team's deficit grows by its weight and it is given the whole runs its deficit covers.
 * The turn and the deficits carry to the next call, so single-run leases alternate. Teams
 * absent from `teams` lose their deficit (an empty queue keeps none). Answers each team's
 * runs, in the order served; teams given none are left out.
 */
export function drrAllocate(state: DrrState, teams: readonly WeightedTeam[], count: number): { team: string; count: number }[] {
  const order = [...teams].sort((a, b) => (a.team < b.team ? -1 : a.team > b.team ? 1 : 0));
  for (const team of [...state.deficits.keys()]) if (!order.some((entry) => entry.team === team)) state.deficits.delete(team);
  if (order.length === 0 || count <= 0) return [];
  let index = state.cursor === null ? 0 : order.findIndex((entry) => entry.team >= state.cursor!);
  if (index < 0) index = 0;
  if (order[index]!.team !== state.cursor) state.quantumAdded = false;
  const given = new Map<string, number>();
  let remaining = count;
  while (remaining > 0) {
    const entry = order[index]!;
    let deficit = state.deficits.get(entry.team) ?? 0;
    if (!state.quantumAdded) deficit += Math.max(entry.weight, 1e-3);
    const take = Math.min(Math.floor(deficit + 1e-9), remaining);
    if (take > 0) given.set(entry.team, (given.get(entry.team) ?? 0) + take);
    deficit -= take;
    remaining -= take;
    state.deficits.set(entry.team, deficit);
    if (remaining === 0 && deficit >= 1 - 1e-9) {
      // The lease ran out mid-turn: this team's turn goes on in the next lease.
      state.cursor = entry.team;
      state.quantumAdded = true;
      break;
    }
    index = (index + 1) % order.length;
    state.cursor = order[index]!.team;
    state.quantumAdded = false;
  }
  return [...given].map(([team, runs]) => ({ team, count: runs }));
}

/** A team leased fewer runs than it was given: its queue emptied, so it keeps no deficit. */
export function drrQueueEmptied(state: DrrState, team: string): void {
  state.deficits.set(team, 0);
}

/** A pool's policy state on one node. */
export interface PoolPolicyState {
  share: LaneShareState;
  drr: Map<Lane, DrrState>;
}

export function newPoolPolicyState(): PoolPolicyState {
  return { share: { credit: 0 }, drr: new Map() };
}

export interface PlanInput {
  max: number;
  /** The lease's team scope: null leases for every team (an admin key). */
  team: string | null;
  /** Teams with ready runs in each lane of the pool (within the lease's scope). */
  backlog: ReadonlyMap<Lane, readonly string[]>;
  p2Share: number;
  weightOf(team: string): number;
  /** Tokens granted for this lease to capped lanes and teams; absent: uncapped. */
  laneBudgets?: Partial<Record<Lane, number>>;
  teamBudgets?: Readonly<Record<string, number>>;
  /** False turns fair leasing across teams off (the benchmark's comparison). */
  fairTeams?: boolean;
}

/**
 * The lease's plan, or null for a plain lease (one lane and one team with ready runs, no caps).
 * Shaped slices first (P0 and P1 by team, sharing what P2's quota leaves; then P2 by team up to
 * its quota), then the fill: one unbounded slice, or with caps a slice per (lane, team).
 */
export function planLease(state: PoolPolicyState, input: PlanInput): LeasePlan | null {
  const lanesReady = policyLanes.filter((lane) => (input.backlog.get(lane)?.length ?? 0) > 0);
  const capped = hasCaps(input);
  const teamsInAnyLane = new Set(lanesReady.flatMap((lane) => input.backlog.get(lane)!));
  if (!capped && lanesReady.length <= 1 && (teamsInAnyLane.size <= 1 || input.fairTeams === false)) return null;
  const plan: LeasePlan = { slices: [], budgets: {} };
  for (const [lane, tokens] of Object.entries(input.laneBudgets ?? {})) plan.budgets[laneBudgetKey(lane as Lane)] = tokens;
  for (const [team, tokens] of Object.entries(input.teamBudgets ?? {})) plan.budgets[teamBudgetKey(team)] = tokens;
  const contended = lanesReady.includes('P2') && (lanesReady.includes('P0') || lanesReady.includes('P1'));
  const p2Runs = contended ? p2Quota(state.share, input.max, input.p2Share) : 0;
  plan.budgets[sharedLanesKey] = input.max - p2Runs;
  for (const lane of lanesReady) {
    const laneMax = lane === 'P2' ? (contended ? p2Runs : input.max) : input.max - p2Runs;
    const extra = lane === 'P2' ? [] : [sharedLanesKey];
    plan.slices.push(...laneSlices(state, input, lane, laneMax, extra));
  }
  // The fill: what the shaped slices left (a team or lane that came short) goes in lane order.
  if (!capped) {
    plan.slices.push({ lane: null, team: null, max: input.max });
  } else {
    for (const lane of lanesReady) {
      for (const team of input.backlog.get(lane)!) plan.slices.push({ lane, team, max: input.max, budgets: budgetsOf(input, lane, team) });
    }
  }
  return plan;
}

function hasCaps(input: PlanInput): boolean {
  return Object.keys(input.laneBudgets ?? {}).length > 0 || Object.keys(input.teamBudgets ?? {}).length > 0;
}

function budgetsOf(input: PlanInput, lane: Lane, team: string | null): string[] {
  const keys: string[] = [];
  if (input.laneBudgets?.[lane] !== undefined) keys.push(laneBudgetKey(lane));
  if (team !== null && input.teamBudgets?.[team] !== undefined) keys.push(teamBudgetKey(team));
  return keys;
}

/** One lane's shaped slices: the teams' DRR shares, or one slice when a single team (or no fairness) applies. */
function laneSlices(state: PoolPolicyState, input: PlanInput, lane: Lane, laneMax: number, extra: string[]): LeaseSlice[] {
  if (laneMax <= 0) return [];
  const teams = input.backlog.get(lane)!;
  const capped = hasCaps(input);
  if (teams.length <= 1 || input.fairTeams === false) {
    const team = teams.length === 1 && capped ? teams[0]! : null;
    return [{ lane, team, max: laneMax, budgets: [...extra, ...budgetsOf(input, lane, team)] }];
  }
  let drr = state.drr.get(lane);
  if (drr === undefined) {
    drr = newDrrState();
    state.drr.set(lane, drr);
  }
  const weighted = teams.map((team) => ({ team, weight: input.weightOf(team) }));
  return drrAllocate(drr, weighted, laneMax).map(({ team, count }) =>
    ({ lane, team, max: count, budgets: [...extra, ...budgetsOf(input, lane, team)] }));
}

/**
 * After the lease: a team whose slice leased less than the room it was given has an empty
 * queue (within the lease's reach), so it keeps no deficit.
 */
export function settlePlan(state: PoolPolicyState, plan: LeasePlan): void {
  plan.slices.forEach((slice, index) => {
    const outcome = plan.outcome?.[index];
    if (slice.lane === null || slice.team === null || outcome === undefined) return;
    if (outcome.leased < outcome.room) {
      const drr = state.drr.get(slice.lane);
      if (drr !== undefined) drrQueueEmptied(drr, slice.team);
    }
  });
}

/**
 * A dispatch cap's token bucket, refilled at `ratePerS` and holding at most a second's worth
 * (at least one token): the tokens it holds at `nowMs` and how many of `wanted` it grants.
 */
export function refillBucket(row: { tokens: number; at: number } | undefined, ratePerS: number, wanted: number, nowMs: number):
  { tokens: number; granted: number } {
  const burst = Math.max(1, ratePerS);
  const tokens = row === undefined ? burst : Math.min(burst, row.tokens + Math.max(0, nowMs - row.at) * ratePerS / 1_000);
  return { tokens, granted: Math.max(0, Math.min(wanted, Math.floor(tokens + 1e-9))) };
}
