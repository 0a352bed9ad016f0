/** Worker threads planning contentHtml rewrites off the event loop; a failure stays with its export (D8.6). */
import { RewriteWorkerError } from '../../../errors.js';
import { Worker } from 'node:worker_threads';
import { SLOWEST_PLANNING_BYTES_PER_S } from '../plans/html-plan.js';
import { packRequest, unpackReply, type RewriteReady, type RewriteReply } from './rewrite-batch.js';
import { type Job, type Member, type RewritePoolLog, type RewritePoolOptions } from './rewrite-jobs.js';

const WORKER_URL = new URL('./rewrite-worker.js', import.meta.url);

/** Wait before a dead worker is replaced, doubled with each death since a batch was last rewritten. */
const RESPAWN_MIN_MS = 100;
const RESPAWN_MAX_MS = 30_000;
/** Times a batch goes to another worker because the one holding it died on an earlier batch. */
const MAX_RESENDS = 2;
/** A worker that has not said it is ready by then failed to start (a module that hangs at load). */
const START_TIMEOUT_MS = 60_000;

/** Rewrite workers, each replaced with backoff when it dies (failure policy: docs/architecture.md). */
export class RewritePool {
  readonly size: number;
  readonly #workerUrl: URL;
  readonly #jobTimeoutMs: number;
  readonly #maxQueued: number;
  readonly #log: RewritePoolLog | undefined;
  /** Per slot: its worker, or null while the replacement waits out the backoff. */
  readonly #members: (Member | null)[] = [];
  readonly #respawns: (NodeJS.Timeout | null)[] = [];
  readonly #queue: Job[] = [];
  #nextId = 1;
  #closed = false;
  #restarts = 0;
  /** Deaths since a batch was last rewritten: the backoff's exponent. */
  #deathsInRow = 0;
  /** Why the last worker failed to start, while none has started since. */
  #startFailure: string | null = null;

  constructor(size: number, options: RewritePoolOptions = {}) {
    this.size = size;
    this.#workerUrl = options.workerUrl ?? WORKER_URL;
    this.#jobTimeoutMs = options.jobTimeoutMs ?? 30_000;
    this.#maxQueued = options.maxQueued ?? 64;
    this.#log = options.log;
    for (let i = 0; i < size; i++) {
      this.#members.push(null);
      this.#respawns.push(null);
      this.#start(i);
    }
  }

  get restarts(): number {
    return this.#restarts;
  }

  /**
   * Plans of flagged contentHtml JSON texts, in order (empty: unchanged). Rejects with RewriteWorkerError,
   * also when the worker spends longer on the batch than `jobTimeoutMs` plus its bytes at the slowest
   * planning speed (D8.6).
   */
  plan(texts: readonly Buffer[], prefix: string): Promise<Buffer[]> {
    if (this.#closed) return Promise.reject(new RewriteWorkerError('the rewrite pool is closed'));
    let bytes = 0;
    for (const text of texts) bytes += text.length;
    // A fixed timeout failed every export of a document too large to plan within it (over 100 MB of dense URLs).
    const timeoutMs = this.#jobTimeoutMs + Math.ceil((bytes * 1000) / SLOWEST_PLANNING_BYTES_PER_S);
    return new Promise<Buffer[]>((resolve, reject) => {
      this.#dispatch({ id: this.#nextId++, texts, prefix, timeoutMs, resolve, reject, resends: 0 });
    });
  }

  /** Stops the workers; once they have stopped, batches they held or that waited for one are rejected. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#respawns.forEach((timer, i) => {
      if (timer !== null) clearTimeout(timer);
      this.#respawns[i] = null;
    });
    const jobs = this.#queue.splice(0);
    const stopped: Promise<number>[] = [];
    this.#members.forEach((m, i) => {
      if (m === null) return;
      this.#members[i] = null;
      m.gone = true;
      if (m.timer !== null) clearTimeout(m.timer);
      jobs.push(...m.jobs.splice(0));
      stopped.push(m.worker.terminate());
    });
    await Promise.all(stopped);
    for (const job of jobs) job.reject(new RewriteWorkerError('the rewrite pool is closed'));
  }

  /** Sends `job` to the running worker holding fewest batches, else queues it (true) or rejects it (false). */
  #dispatch(job: Job): boolean {
    let best: Member | null = null;
    for (const m of this.#members) {
      if (m !== null && !m.stopping && (best === null || m.jobs.length < best.jobs.length)) best = m;
    }
    if (best !== null) {
      this.#send(best, job);
      return true;
    }
    if (this.#startFailure !== null) {
      job.reject(new RewriteWorkerError(`no rewrite worker could be started: ${this.#startFailure}`));
      return false;
    }
    if (this.#queue.length >= this.#maxQueued) {
      job.reject(
        new RewriteWorkerError(`no rewrite worker is running and ${this.#maxQueued} batches already wait for one`),
      );
      return false;
    }
    this.#queue.push(job);
    // Queued batches are awaited by someone: the replacement must come even if nothing else runs.
    for (const timer of this.#respawns) timer?.ref();
    return true;
  }

  #send(m: Member, job: Job): void {
    m.jobs.push(job);
    if (m.jobs.length === 1) {
      m.worker.ref();
      if (m.ready) this.#armHead(m);
    }
    const req = packRequest(job.id, job.prefix, job.texts);
    m.worker.postMessage(req, [req.data.buffer as ArrayBuffer, req.ends.buffer as ArrayBuffer]);
  }

  #armHead(m: Member): void {
    if (m.timer !== null) clearTimeout(m.timer);
    m.timer = null;
    const head = m.jobs[0];
    if (head === undefined) return;
    m.timer = setTimeout(
      () => this.#giveUp(m, `rewrite worker took longer than ${head.timeoutMs} ms over one batch`),
      head.timeoutMs,
    );
    m.timer.unref();
  }

  #start(index: number): void {
    let worker: Worker;
    try {
      worker = new Worker(this.#workerUrl);
    } catch (err) {
      this.#died(index, false, [], `rewrite worker could not be created: ${(err as Error).message}`);
      // Rejected now (no worker started), unless another slot's worker runs.
      for (const job of this.#queue.splice(0)) this.#dispatch(job);
      return;
    }
    // An idle pool never keeps the process alive; a worker is referenced while it holds a batch.
    worker.unref();
    const m: Member = { index, worker, ready: false, stopping: false, gone: false, error: null, jobs: [], timer: null };
    m.timer = setTimeout(
      () => this.#giveUp(m, `rewrite worker did not start within ${START_TIMEOUT_MS} ms`),
      START_TIMEOUT_MS,
    );
    m.timer.unref();
    worker.on('message', (msg: RewriteReply | RewriteReady) => this.#onMessage(m, msg));
    // 'exit' follows an uncaught exception after the earlier replies: only then is the culprit batch known.
    worker.on('error', (err) => {
      m.error = err;
      m.stopping = true;
    });
    worker.on('exit', (code) =>
      this.#down(
        m,
        m.error !== null ? `rewrite worker failed: ${m.error.message}` : `rewrite worker stopped (exit code ${code})`,
      ),
    );
    this.#members[index] = m;
    for (const job of this.#queue.splice(0)) this.#dispatch(job);
  }

  #onMessage(m: Member, msg: RewriteReply | RewriteReady): void {
    if (m.gone) return;
    if ('ready' in msg) {
      this.#ready(m);
      return;
    }
    const i = m.jobs[0]?.id === msg.id ? 0 : m.jobs.findIndex((j) => j.id === msg.id);
    if (i < 0) return;
    const job = m.jobs.splice(i, 1)[0]!;
    if (!m.ready) this.#ready(m);
    else if (i === 0) this.#armHead(m);
    if (m.jobs.length === 0) m.worker.unref();
    if ('error' in msg) {
      job.reject(new RewriteWorkerError(`rewrite worker failed: ${msg.error}`));
      return;
    }
    this.#deathsInRow = 0;
    job.resolve(unpackReply(msg));
  }

  #ready(m: Member): void {
    if (m.ready) return;
    m.ready = true;
    this.#startFailure = null;
    this.#armHead(m);
  }

  /** Stops a worker that overran a timeout; dealt with as dead now, not when its 'exit' comes. */
  #giveUp(m: Member, reason: string): void {
    m.stopping = true;
    void m.worker.terminate();
    this.#down(m, reason);
  }

  #down(m: Member, reason: string): void {
    if (m.gone) return;
    m.gone = true;
    m.stopping = true;
    if (m.timer !== null) clearTimeout(m.timer);
    m.worker.unref();
    if (this.#members[m.index] === m) this.#members[m.index] = null;
    this.#died(m.index, m.ready, m.jobs.splice(0), reason);
  }

  #died(index: number, started: boolean, jobs: Job[], reason: string): void {
    if (this.#closed) {
      for (const job of jobs) job.reject(new RewriteWorkerError('the rewrite pool is closed'));
      return;
    }
    const culprit = started ? jobs.shift() : undefined;
    if (!started) this.#startFailure = reason;
    const delay = Math.min(RESPAWN_MAX_MS, RESPAWN_MIN_MS * 2 ** this.#deathsInRow);
    this.#deathsInRow++;
    const timer = setTimeout(() => {
      this.#respawns[index] = null;
      this.#restarts++;
      this.#start(index);
    }, delay);
    timer.unref();
    this.#respawns[index] = timer;
    culprit?.reject(new RewriteWorkerError(reason));
    let resent = 0;
    for (const job of jobs) if (this.#resend(job, reason)) resent++;
    const fields = {
      worker: index,
      reason,
      failed: jobs.length - resent + (culprit ? 1 : 0),
      resent,
      restartInMs: delay,
    };
    if (started)
      this.#log?.warn(fields, 'rewrite worker died; the batch it was on fails, the others go to another worker');
    else this.#log?.error(fields, 'rewrite worker failed to start');
  }

  #resend(job: Job, reason: string): boolean {
    if (job.resends >= MAX_RESENDS) {
      job.reject(new RewriteWorkerError(`${reason} (the batch was already sent again ${MAX_RESENDS} times)`));
      return false;
    }
    job.resends++;
    return this.#dispatch(job);
  }
}
