/**
 * What the rewrite pool (rewrite-pool.ts) hands around: its options and log, the batches (jobs) it
 * is given, the worker threads (members) that rewrite them, and the error a failed batch gets.
 */
import type { Worker } from 'node:worker_threads';

/** Where deaths and restarts are reported; pino's shape, so a Fastify app passes `app.log`. */
export interface RewritePoolLog {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface RewritePoolOptions {
  /** Replaces rewrite-worker.ts (tests use failing ones); it must send RewriteReady once loaded. */
  workerUrl?: URL;
  /** Longest a worker may spend on one batch, from when the batch reaches the head of its queue (not the worker's start-up); ms, default 30 000. */
  jobTimeoutMs?: number;
  /** Batches that may wait while every worker is being replaced; more are rejected. Default 64. */
  maxQueued?: number;
  log?: RewritePoolLog;
}

/** Raised for a batch that could not be rewritten; the export that sent it fails (decisions.md D6.2, D6.3). */
export class RewriteWorkerError extends Error {
  override name = 'RewriteWorkerError';
}

export interface Job {
  readonly id: number;
  readonly texts: readonly Buffer[];
  readonly prefix: string;
  readonly resolve: (out: Buffer[]) => void;
  readonly reject: (err: Error) => void;
  resends: number;
}

/** One worker thread and the batches sent to it, in the order it handles them. */
export interface Member {
  readonly index: number;
  readonly worker: Worker;
  /** It sent RewriteReady (or answered a batch): its module loaded. */
  ready: boolean;
  /** Takes no more batches: it threw, or is being stopped. */
  stopping: boolean;
  /** Its death was dealt with; anything it still sends is ignored. */
  gone: boolean;
  error: Error | null;
  readonly jobs: Job[];
  /** Until ready, the start timeout; then the timeout of the batch at the head of `jobs`. */
  timer: NodeJS.Timeout | null;
}
