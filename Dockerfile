# kb-export: build with the full toolchain, ship dist/ with production dependencies only.
# The image has no embedded PostgreSQL: DATABASE_URL is required.

FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
# tsconfig.build.json compiles src/ only: the image holds what production runs, no benchmarks or tests.
RUN npx tsc -p tsconfig.build.json \
 && chmod 755 dist/src/cli/kb-export.js \
 && npm prune --omit=dev --ignore-scripts

FROM node:24-slim
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000
WORKDIR /app
COPY --from=build --chown=root:root /app/package.json ./
COPY --from=build --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/dist ./dist
COPY --chown=root:root sql ./sql
USER node
EXPOSE 3000
# decisions.md D10.2: ready when the database (and Redis) answered in the last few seconds.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/readyz', { signal: AbortSignal.timeout(2000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# The executable directly, not through npm, so SIGTERM reaches the server and its graceful shutdown,
# and its shebang's runtime settings (V8 flags, glibc malloc) apply: src/cli/kb-export.ts says why.
CMD ["dist/src/cli/kb-export.js", "serve"]
