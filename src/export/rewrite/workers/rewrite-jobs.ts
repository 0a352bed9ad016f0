/** What the rewrite pool hands around: options, log, batches (jobs) and worker threads (members). */
import type { Worker } from 'node:worker_threads';

export interface RewritePoolLog {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface RewritePoolOptions {
  /** Replaces rewrite-worker.ts (tests use failing ones); it must send RewriteReady once loaded. */
  workerUrl?: URL;
  /**
   * Longest a worker may spend on one batch once it heads the worker's queue, ms (default 30 000), plus
   * the batch's bytes at SLOWEST_PLANNING_BYTES_PER_S.
   */
  jobTimeoutMs?: number;
  /** Batches that may wait while every worker is being replaced; more are rejected (default 64). */
  maxQueued?: number;
  log?: RewritePoolLog;
}

export interface Job {
  readonly id: number;
  readonly texts: readonly Buffer[];
  readonly prefix: string;
  /** How long a worker may spend on it once it heads the worker's queue, ms. */
  readonly timeoutMs: number;
  readonly resolve: (out: Buffer[]) => void;
  readonly reject: (err: Error) => void;
  resends: number;
}

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
