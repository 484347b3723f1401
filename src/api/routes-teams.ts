/**
 * Team limits (docs/API.md "Team limits"): `GET`, `PUT` and `DELETE /v1/teams/{team}/limits`.
 * An admin reads and writes any team's (and `default`, the entry of every team without one of
 * its own); a team key reads its own and is refused another's, as everywhere a team names
 * another (`403 forbidden`). The limits themselves are team-limits.ts's.
 */
import { Type } from 'typebox';
import { TicklerError } from '../errors.js';
import * as limits from '../limits.js';
import type { App, ApiContext } from './context.js';
import { callerOf } from './route-helpers.js';
import { limitsFromWire, limitsToWire } from '../service/team-limits.js';

const TeamParams = Type.Object({
  team: Type.String({ minLength: 1, maxLength: limits.poolLengthMax, pattern: '^[A-Za-z0-9][A-Za-z0-9._:-]*$' }),
}, { additionalProperties: false });

const rate = Type.Union([Type.Number(), Type.Null()]);
/** Each field null (or left out) for no limit; ranges are checked by `limitsFromWire`, which names the field. */
const TeamLimitsBody = Type.Object({
  create_per_s: Type.Optional(rate),
  pending_max: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
  dispatch_per_s: Type.Optional(rate),
  weight: Type.Optional(Type.Number()),
}, { additionalProperties: false });

const TeamLimitsAnswer = Type.Object({
  team: Type.String(),
  create_per_s: rate,
  pending_max: Type.Union([Type.Integer(), Type.Null()]),
  dispatch_per_s: rate,
  weight: Type.Number(),
  source: Type.Union([Type.Literal('team'), Type.Literal('default'), Type.Literal('none')]),
});

export function registerTeamRoutes(app: App, { deps, teamLimits }: ApiContext): void {
  app.get('/v1/teams/:team/limits', {
    schema: { params: TeamParams },
    config: { doc: { summary: 'the limits in force for a team, and whose entry they come from', answers: { 200: TeamLimitsAnswer } } },
  }, async (request) => {
    const caller = callerOf(request);
    const { team } = request.params;
    // Open mode (no keys) has no teams to keep apart: its caller may read any entry, as it may write them.
    if (!caller.admin && caller.team !== team && deps.config.apiKeys !== null) {
      throw new TicklerError('forbidden', 'a team key reads its own limits only', { field: 'team' });
    }
    return limitsToWire(teamLimits.teamLimits(team));
  });

  app.put('/v1/teams/:team/limits', {
    schema: { params: TeamParams, body: TeamLimitsBody },
    config: { auth: 'admin', doc: { summary: 'set a team\'s limits (admin); `default` sets those of every team without its own', answers: { 200: TeamLimitsAnswer } } },
  }, async (request) => {
    const { team } = request.params;
    await teamLimits.put([limitsFromWire(request.body, team)]);
    return limitsToWire(teamLimits.teamLimits(team));
  });

  app.delete('/v1/teams/:team/limits', {
    schema: { params: TeamParams },
    config: { auth: 'admin', doc: { summary: 'remove a team\'s own limits (admin): it takes the default entry\'s again', answers: { 200: TeamLimitsAnswer } } },
  }, async (request) => {
    const { team } = request.params;
    await teamLimits.remove(team);
    return limitsToWire(teamLimits.teamLimits(team));
  });
}
