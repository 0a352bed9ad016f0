/** CLI commands other than serve and warm: each prints what it did and throws on failure (the entry point prints it). */
import { SeedError } from '../errors.js';
import fs from 'node:fs';
import path from 'node:path';
import { generateApiKey, hashApiKey } from '../auth/api-key.js';
import type { Config } from '../config.js';
import { connect } from '../db/connect.js';
import { openDatabase } from '../db/database.js';
import { migrate } from '../db/migrate.js';
import { scanHtmlCorpus } from '../import/html-corpus.js';
import { collectAroundLargePage } from '../load/collect-garbage.js';
import { loadSeed } from '../load/seed-loader.js';
import { SeedWriter } from '../load/seed-writer.js';
import { withDatabase } from '../db/with-database.js';
import { progressReporter } from '../observe/progress.js';
import { inTransaction } from '../db/transaction.js';

type Print = (line: string) => void;

export async function migrateCommand(config: Config, print: Print): Promise<void> {
  const db = await openDatabase(config);
  const sql = connect(db.url, { max: 1, applicationName: 'kb-export-cli' });
  try {
    const applied = await migrate(sql);
    print(applied.length ? `applied ${applied.join(', ')}` : 'nothing to apply: the schema is up to date');
  } finally {
    await sql.end({ timeout: 5 });
    await db.stop();
  }
}

/** `load FILE`: loads a seed file all-or-nothing (seed-format.md rule 6). Throws SeedError naming the bad record. */
export async function loadCommand(config: Config, file: string, print: Print): Promise<void> {
  let size: number;
  try {
    size = fs.statSync(file).size;
  } catch {
    throw new SeedError(`cannot read ${file}`);
  }
  await withDatabase(config, async (sql) => {
    const input = fs.createReadStream(file);
    const progress = progressReporter('loading', size);
    try {
      const s = await loadSeed(sql, input, { onProgress: () => progress.update(input.bytesRead) });
      progress.stop();
      print(
        `loaded ${s.users} users, ${s.apiKeys} API keys, ${s.books} knowledge bases, ${s.documents} documents from ${file}`,
      );
    } catch (err) {
      progress.stop();
      throw err;
    }
  });
}

const ISO = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

/** `keys create`: issues a key for a user and prints it once; only its hash is stored (D5.1). */
export async function createKeyCommand(
  config: Config,
  opts: { user: string; expiresAt?: string; id?: string },
  print: Print,
): Promise<void> {
  if (opts.expiresAt !== undefined && (!ISO.test(opts.expiresAt) || Number.isNaN(Date.parse(opts.expiresAt)))) {
    throw new Error(`--expires-at must be an ISO 8601 date or timestamp, got "${opts.expiresAt}"`);
  }
  await withDatabase(config, async (sql) => {
    const [user] = await sql`SELECT 1 FROM users WHERE id = ${opts.user}`;
    if (!user) throw new Error(`no user with id "${opts.user}"`);
    const key = generateApiKey();
    const id = opts.id ?? `key_${hashApiKey(key).subarray(0, 6).toString('hex')}`;
    await sql`
      INSERT INTO api_keys (id, user_id, key_hash, expires_at)
      VALUES (${id}, ${opts.user}, ${hashApiKey(key)}, ${opts.expiresAt ?? null})`;
    print(`key id: ${id}`);
    print(`key (shown once, store it now): ${key}`);
  });
}

/** `keys revoke KEY_ID`: revokes a key; the next request with it gets 401 (D5.3). */
export async function revokeKeyCommand(config: Config, id: string, print: Print): Promise<void> {
  await withDatabase(config, async (sql) => {
    const rows = await sql`UPDATE api_keys SET revoked_at = COALESCE(revoked_at, now()) WHERE id = ${id} RETURNING id`;
    if (rows.length === 0) throw new Error(`no API key with id "${id}"`);
    print(`revoked ${id}`);
  });
}

/** `import-html DIR`: a folder of HTML pages as a knowledge base of `owner`, in one transaction (import/). */
export async function importHtmlCommand(
  config: Config,
  dir: string,
  opts: { owner: string; slug: string; name?: string; id?: string },
  print: Print,
): Promise<void> {
  if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new Error(`${dir} is not a folder`);
  const bookId = opts.id ?? `${opts.owner}:${opts.slug}`;
  await withDatabase(config, async (sql) => {
    const summary = await inTransaction(sql, async (tx) => {
      const writer = new SeedWriter(tx);
      await writer.begin();
      await writer.addBook(
        { id: bookId, ownerId: opts.owner, slug: opts.slug, name: opts.name ?? path.basename(path.resolve(dir)) },
        `knowledge base "${opts.slug}"`,
      );
      const progress = progressReporter('importing', 0);
      let n = 0;
      for await (const doc of scanHtmlCorpus(dir, { bookId })) {
        // A large page's garbage is collected once it is read and once it is written, so that it
        // never lies under the next step's (collect-garbage.ts).
        const size = (doc.contentHtml?.length ?? 0) + (doc.contentStr?.length ?? 0);
        await collectAroundLargePage(size);
        await writer.addDocument(bookId, doc);
        await collectAroundLargePage(size);
        progress.update(++n);
      }
      progress.stop();
      return writer.finish();
    });
    print(`imported ${summary.documents} documents from ${dir} into knowledge base "${opts.slug}" (id ${bookId})`);
  });
}
