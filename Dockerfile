# tickler in a container: `docker build -t tickler .`, then
#   docker run -p 7070:7070 -v tickler-data:/data -e TICKLER_API_KEYS=admin=CHANGE-ME tickler
# runs `tickler serve` on the embedded SQLite store under /data. It listens on 0.0.0.0, so it
# refuses to start without API keys (TICKLER_API_KEYS, or TICKLER_API_KEYS_FILE naming a
# mounted file). Every setting reads TICKLER_<NAME> (`tickler serve --help`); for PostgreSQL
# set TICKLER_STORE=postgres://... (docker-compose.yml). Any other subcommand runs in place of
# `serve`: `docker run tickler worker --pool P --exec CMD`. docs/deploying.md has the rest.
#
# test/deploy/dockerfile.test.ts lints this file and runs its build steps outside a container.

# The build stage: the full image has python3, make and g++, for better-sqlite3's native
# addon where no prebuilt one can be downloaded.
FROM node:20-bookworm AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/build.mjs scripts/
COPY bin bin
COPY src src
# The web UI's build is committed (README, "UI"): served as it is.
COPY web/dist web/dist
# Exactly the lock's dependencies; install scripts only for the native addon (the development
# tools' own scripts are not needed to compile); the strict build; then the development
# dependencies (TypeScript, tsx, the benchmarks' peers) go.
RUN npm ci --ignore-scripts --no-audit --no-fund \
  && npm rebuild better-sqlite3 \
  && npm run build \
  && npm prune --omit=dev --no-audit --no-fund

# The runtime stage: the slim image of the same Debian and Node.js (the addon links against
# its glibc), the production dependencies and dist/ only, run by the unprivileged `node` user.
FROM node:20-bookworm-slim AS runtime
ENV NODE_ENV=production \
    TICKLER_HOST=0.0.0.0 \
    TICKLER_PORT=7070 \
    TICKLER_DATA_DIR=/data
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules node_modules
COPY --from=build /app/bin bin
COPY --from=build /app/dist dist
COPY --from=build /app/web/dist web/dist
RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
EXPOSE 7070
# Ready means the store answers and this node holds its shards (docs/API.md, /readyz).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + process.env.TICKLER_PORT + '/readyz').then((answer) => process.exit(answer.ok ? 0 : 1), () => process.exit(1))"]
# `tickler serve` stops on SIGTERM within 10 s (docker stop waits 10 s by default; give it
# --stop-timeout 15 to be safe).
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "bin/tickler.js"]
CMD ["serve"]
