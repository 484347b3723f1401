// The PostgreSQL store against the shared conformance suites: a fresh schema per store
// opened, dropped afterwards. Skipped, saying why, when PostgreSQL is not reachable
// (TICKLER_REQUIRE_PG=1 turns that into a failure).
import { describe } from 'node:test';
import { runStoreConformance } from './conformance.js';
import { runRaceConformance } from './conformance-race.js';
import { openTestStore, postgresSkipReason } from './postgres-harness.js';

const skip = await postgresSkipReason();

void describe('postgres', { skip: skip ?? false }, () => {
  runStoreConformance('postgres', () => openTestStore());
  runRaceConformance('postgres', () => openTestStore());
});
