// The lease policy, pure: P2's share under contention (held within a run of the target over
// any sequence of lease sizes, never starved, everything without contention), deficit round
// robin (shares by weight within a round, every team with runs served within one round,
// allocations adding up), and plans that never give a capped lane or team more than its tokens.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  drrAllocate, newDrrState, newPoolPolicyState, p2Quota, planLease, refillBucket, runPlanSync, settlePlan, type LeaseSlice,
} from '../../src/domain/lease-policy.js';

void test('P2 gets its share of what is leased under contention, within one run, whatever the lease sizes', () => {
  fc.assert(fc.property(
    fc.array(fc.integer({ min: 1, max: 1_000 }), { minLength: 1, maxLength: 200 }),
    fc.double({ min: 0, max: 1, noNaN: true }),
    (sizes, share) => {
      const state = { credit: 0 };
      let leased = 0;
      let toP2 = 0;
      for (const max of sizes) {
        const quota = p2Quota(state, max, share);
        assert.ok(Number.isInteger(quota) && quota >= 0 && quota <= max);
        toP2 += quota;
        leased += max;
        assert.ok(Math.abs(toP2 - share * leased) <= 1 + 1e-6, `P2 ${toP2} of ${leased} at ${share}`);
      }
    },
  ), { numRuns: 500 });
});

void test('P2 is never starved: one run in five at 0.2 for single-run leases', () => {
  const state = newPoolPolicyState();
  let toP2 = 0;
  for (let index = 0; index < 10; index++) {
    const plan = planLease(state, { max: 1, team: null, backlog: new Map([['P0', ['a']], ['P2', ['a']]]), p2Share: 0.2, weightOf: () => 1 })!;
    // The P0/P1 lanes share what P2's quota leaves: none of this lease when P2 has it.
    if (plan.budgets['share:P0P1'] === 0) toP2++;
  }
  assert.equal(toP2, 2);
});

void test('no plan for one lane and one team without caps: the lease goes as it is', () => {
  const state = newPoolPolicyState();
  assert.equal(planLease(state, { max: 50, team: null, backlog: new Map([['P1', ['a']]]), p2Share: 0.2, weightOf: () => 1 }), null);
  assert.equal(planLease(state, { max: 50, team: 'a', backlog: new Map(), p2Share: 0.2, weightOf: () => 1 }), null);
});

void test('deficit round robin shares by weight within a round and adds up', () => {
  fc.assert(fc.property(
    fc.uniqueArray(fc.constantFrom('a', 'b', 'c', 'd', 'e'), { minLength: 1, maxLength: 5 }),
    fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 5, maxLength: 5 }),
    fc.array(fc.integer({ min: 1, max: 300 }), { minLength: 1, maxLength: 30 }),
    (teams, weights, counts) => {
      const state = newDrrState();
      const weighted = teams.map((team, index) => ({ team, weight: weights[index]! }));
      const totalWeight = weighted.reduce((sum, entry) => sum + entry.weight, 0);
      const given = new Map<string, number>();
      let all = 0;
      for (const count of counts) {
        const shares = drrAllocate(state, weighted, count);
        assert.equal(shares.reduce((sum, entry) => sum + entry.count, 0), count);
        for (const entry of shares) given.set(entry.team, (given.get(entry.team) ?? 0) + entry.count);
        all += count;
      }
      for (const { team, weight } of weighted) {
        const expected = (all * weight) / totalWeight;
        assert.ok(Math.abs((given.get(team) ?? 0) - expected) <= weight + totalWeight, `${team}: ${given.get(team)} of ${all}, expected ~${expected}`);
      }
    },
  ), { numRuns: 300 });
});

void test('every team with runs is served within one round of single-run leases', () => {
  fc.assert(fc.property(fc.integer({ min: 1, max: 8 }), fc.integer({ min: 0, max: 50 }), (teamCount, warmUp) => {
    const teams = Array.from({ length: teamCount }, (_, index) => ({ team: `t${index}`, weight: 1 }));
    const state = newDrrState();
    for (let index = 0; index < warmUp; index++) drrAllocate(state, teams, 1);
    const served = new Set<string>();
    for (let index = 0; index < teamCount; index++) for (const entry of drrAllocate(state, teams, 1)) served.add(entry.team);
    assert.equal(served.size, teamCount);
  }), { numRuns: 300 });
});

void test('a plan never leases a capped lane or team past its tokens, and a team that came short keeps no deficit', () => {
  fc.assert(fc.property(
    fc.integer({ min: 1, max: 200 }),
    fc.integer({ min: 0, max: 100 }),
    fc.integer({ min: 0, max: 100 }),
    fc.dictionary(fc.constantFrom('a', 'b', 'c'), fc.integer({ min: 0, max: 80 }), { minKeys: 1 }),
    (max, laneTokens, teamTokens, available) => {
      const teams = Object.keys(available);
      const state = newPoolPolicyState();
      const plan = planLease(state, {
        max, team: null, backlog: new Map([['P1', teams]]), p2Share: 0.2, weightOf: () => 1,
        laneBudgets: { P1: laneTokens }, teamBudgets: { [teams[0]!]: teamTokens },
      })!;
      const left = { ...available };
      const byTeam = new Map<string, number>();
      const leased = runPlanSync(plan, max, (slice: LeaseSlice, room) => {
        const team = slice.team ?? teams.find((name) => left[name]! > 0);
        if (team === undefined) return 0;
        const taken = Math.min(room, left[team]!);
        left[team]! -= taken;
        byTeam.set(team, (byTeam.get(team) ?? 0) + taken);
        return taken;
      });
      assert.ok(leased <= max && leased <= laneTokens);
      assert.ok((byTeam.get(teams[0]!) ?? 0) <= teamTokens);
      const possible = Math.min(max, laneTokens, Object.entries(available)
        .reduce((sum, [team, count]) => sum + (team === teams[0] ? Math.min(count, teamTokens) : count), 0));
      assert.equal(leased, possible, 'slows, never leaves a run it may take');
      settlePlan(state, plan);
      for (const team of teams) if (left[team] === 0 && teams.length > 1) assert.ok((state.drr.get('P1')?.deficits.get(team) ?? 0) <= 1);
    },
  ), { numRuns: 500 });
});

void test('a dispatch bucket refills at its rate and holds at most a second of it', () => {
  assert.deepEqual(refillBucket(undefined, 10, 25, 0), { tokens: 10, granted: 10 });
  assert.deepEqual(refillBucket({ tokens: 0, at: 0 }, 10, 25, 500), { tokens: 5, granted: 5 });
  assert.deepEqual(refillBucket({ tokens: 0, at: 0 }, 10, 25, 60_000), { tokens: 10, granted: 10 });
  assert.deepEqual(refillBucket({ tokens: 3, at: 1_000 }, 10, 2, 500), { tokens: 3, granted: 2 }, 'time going back adds nothing');
});
