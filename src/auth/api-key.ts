/** API keys: generation, hashing and verification (export-api.md 5, D5). */
import { createHash, randomBytes } from 'node:crypto';
import type { Sql } from '../db/connect.js';

const KEY_PREFIX = 'kbx_';

export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString('base64url');
}

/** SHA-256 of the key's UTF-8 bytes: the only form stored (D5.1). */
export function hashApiKey(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}

/** The token of `Authorization: Bearer <token>` (scheme case-insensitive, D5.2), or null. */
export function parseBearer(header: string | string[] | undefined): string | null {
  if (typeof header !== 'string') return null;
  const m = /^[ \t]*bearer[ \t]+([^ \t]+)[ \t]*$/i.exec(header);
  return m ? m[1]! : null;
}

/** The user and key ids of a key; null when unknown, expired or revoked (D5.3). Uncached: revocation is immediate. */
export async function verifyApiKey(sql: Sql, key: string): Promise<{ userId: string; keyId: string } | null> {
  const rows = await sql<{ user_id: string; id: string }[]>`
    SELECT user_id, id FROM api_keys
    WHERE key_hash = ${hashApiKey(key)}
      AND revoked_at IS NULL
      AND (expires_at IS NULL OR expires_at > now())`;
  const row = rows[0];
  return row ? { userId: row.user_id, keyId: row.id } : null;
}
