/**
 * The converter's worker thread (convert-pool.ts): `{ ready: true }` once loaded, then one `{ id, html, hrefs }`
 * at a time, answered `{ id, markdown }` or `{ id, error }`.
 */
import { parentPort } from 'node:worker_threads';
import { htmlToMarkdown } from './markdown.js';

parentPort!.on('message', (msg: { id: number; html: string; hrefs: [string, string][] }) => {
  try {
    parentPort!.postMessage({ id: msg.id, markdown: htmlToMarkdown(msg.html, new Map(msg.hrefs)) });
  } catch (err) {
    parentPort!.postMessage({ id: msg.id, error: (err as Error).message || String(err) });
  }
});

parentPort!.postMessage({ ready: true });
