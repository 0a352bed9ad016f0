# kb-export: build with the full toolchain, ship dist/ with production dependencies only.
# The image has no embedded PostgreSQL: DATABASE_URL is required.

FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY tsconfig.json ./
COPY src ./src
COPY bench ./bench
COPY test/run.ts ./test/run.ts
RUN npx tsc -p tsconfig.json \
 && npm prune --omit=dev --ignore-scripts

FROM node:24-slim
# MALLOC_*: src/server.ts SERVER_MALLOC_ENV says why.
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    MALLOC_ARENA_MAX=2 \
    MALLOC_MMAP_THRESHOLD_=131072
WORKDIR /app
COPY --from=build --chown=root:root /app/package.json ./
COPY --from=build --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/dist ./dist
COPY --chown=root:root sql ./sql
USER node
EXPOSE 3000
# Run directly, not through npm, so SIGTERM reaches the server and its graceful shutdown.
CMD ["node", "--max-semi-space-size=2", "--heap-growing-percent=100", "dist/src/cli.js", "serve"]
