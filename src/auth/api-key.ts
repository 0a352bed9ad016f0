/**
 * API keys: generation, hashing and verification (export-api.md section 5, decisions.md D5).
 */
import { createHash, randomBytes } from 'node:crypto';
import type { Sql } from '../db/connect.js';

const KEY_PREFIX = 'kbx_';

/** A new random key: `kbx_` + 32 random bytes in base64url (decisions.md D5.1). */
export function generateApiKey(): string {
  return KEY_PREFIX + randomBytes(32).toString('base64url');
}

/** SHA-256 of the key's UTF-8 bytes: the only form stored (decisions.md D5.1). */
export function hashApiKey(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}

/**
 * The token of an `Authorization: Bearer <token>` header, or null when the header is missing,
 * uses another scheme or has an empty token. `Bearer` is matched case-insensitively (decisions.md D5.2).
 */
export function parseBearer(header: string | string[] | undefined): string | null {
  if (typeof header !== 'string') return null;
  const m = /^[ \t]*bearer[ \t]+([^ \t]+)[ \t]*$/i.exec(header);
  return m ? m[1]! : null;
}

/**
 * The user and key ids of a key, or null when the key is unknown, expired (`expires_at <= now()`)
 * or revoked (decisions.md D5.3). Uncached, so a revocation takes effect for the next request.
 */
export async function verifyApiKey(sql: Sql, key: string): Promise<{ userId: string; keyId: string } | null> {
  const rows = await sql<{ user_id: string; id: string }[]>`
    SELECT user_id, id FROM api_keys
    WHERE key_hash = ${hashApiKey(key)}
      AND revoked_at IS NULL
      AND (expires_at IS NULL OR expires_at > now())`;
  const row = rows[0];
  return row ? { userId: row.user_id, keyId: row.id } : null;
}
