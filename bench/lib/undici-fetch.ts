/**
 * bench/media.ts's plain baseline, run as a process of its own: `node undici-fetch.js LIST DIR N`
 * fetches every URL of LIST (one a line) with undici, N at a time, and pipes each body to a file
 * under DIR named by the URL's path. Nothing else: no hash, no fsync, no retry, no manifest.
 */
import { createWriteStream, mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Agent, request } from 'undici';

const [list, dir, n] = process.argv.slice(2) as [string, string, string];
const urls = readFileSync(list, 'utf8')
  .split('\n')
  .filter((u) => u !== '');
const agent = new Agent({ connections: Number(n) });
let next = 0;

async function worker(): Promise<void> {
  while (next < urls.length) {
    const url = urls[next++]!;
    const file = path.join(dir, new URL(url).pathname);
    mkdirSync(path.dirname(file), { recursive: true });
    const res = await request(url, { dispatcher: agent });
    if (res.statusCode !== 200) throw new Error(`${url}: ${res.statusCode}`);
    await pipeline(res.body, createWriteStream(file));
  }
}

await Promise.all(Array.from({ length: Number(n) }, worker));
await agent.close();
