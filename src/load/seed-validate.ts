/** Validation of seed records (seed-format.md rules 2–7): SeedError names the offending record. */
import { SeedError } from '../errors.js';
import type { SeedApiKey, SeedBookHeader, SeedDocument, SeedUser } from './seed-types.js';

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function expectObject(v: unknown, where: string): Obj {
  if (!isObj(v)) throw new SeedError(`${where}: must be an object`);
  return v;
}

function requiredString(o: Obj, field: string, where: string): string {
  const v = o[field];
  if (typeof v !== 'string' || v === '')
    throw new SeedError(`${where}: missing required field "${field}" (a non-empty string)`);
  if (v.includes('\0')) throw new SeedError(`${where}: field "${field}" contains a NUL character`);
  return v;
}

function optionalString(o: Obj, field: string, where: string): string | null {
  const v = o[field];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw new SeedError(`${where}: field "${field}" must be a string or null`);
  if (v.includes('\0')) throw new SeedError(`${where}: field "${field}" contains a NUL character`);
  return v;
}

function optionalTimestamp(o: Obj, field: string, where: string): string | null {
  const v = optionalString(o, field, where);
  if (v === null) return null;
  // A date, or a date and time (UTC without a zone). Only digits: PostgreSQL's 'infinity', 'epoch' or
  // 'now' would give a timestamp the export cannot format (sql/0004_finite_timestamps.sql).
  if (
    !/^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|z|[+-]\d{2}(:?\d{2})?)?)?$/.test(v) ||
    Number.isNaN(Date.parse(v))
  ) {
    throw new SeedError(`${where}: field "${field}" must be an ISO 8601 timestamp, got "${v}"`);
  }
  return v;
}

/** Names a record for messages: `books[0].documents[3] (id "d-4")`. */
function recordName(path: string, o: unknown): string {
  const id = isObj(o) && typeof o.id === 'string' ? ` (id "${o.id}")` : '';
  return path + id;
}

/** A user record, apiKeys included (seed-format.md rule 7). */
export function validateUser(v: unknown, path: string): SeedUser {
  const where = recordName(path, v);
  const o = expectObject(v, where);
  const keys = o.apiKeys;
  if (keys !== undefined && keys !== null && !Array.isArray(keys))
    throw new SeedError(`${where}: "apiKeys" must be an array`);
  return {
    id: requiredString(o, 'id', where),
    name: requiredString(o, 'name', where),
    apiKeys: (keys ?? []).map((k: unknown, i: number) => validateApiKey(k, `${path}.apiKeys[${i}]`)),
  };
}

function validateApiKey(v: unknown, path: string): SeedApiKey {
  const where = recordName(path, v);
  const o = expectObject(v, where);
  return {
    id: requiredString(o, 'id', where),
    key: requiredString(o, 'key', where),
    expiresAt: optionalTimestamp(o, 'expiresAt', where),
    revokedAt: optionalTimestamp(o, 'revokedAt', where),
  };
}

export function validateBook(o: Obj, path: string): SeedBookHeader {
  const where = recordName(path, o);
  return {
    id: requiredString(o, 'id', where),
    ownerId: requiredString(o, 'ownerId', where),
    slug: requiredString(o, 'slug', where),
    name: requiredString(o, 'name', where),
    description: optionalString(o, 'description', where),
    coverImage: optionalString(o, 'coverImage', where),
    createdAt: optionalTimestamp(o, 'createdAt', where),
    updatedAt: optionalTimestamp(o, 'updatedAt', where),
  };
}

const FONT_SIZES = new Set(['default', '14', '12']);

/** A document record (seed-format.md rules 2–4, 7; D2.3 for bodyFontSize). */
export function validateDocument(v: unknown, path: string): SeedDocument {
  const where = recordName(path, v);
  const o = expectObject(v, where);
  const status = o.status;
  if (typeof status !== 'number' || !Number.isInteger(status) || Math.abs(status) > 2 ** 31 - 1) {
    throw new SeedError(`${where}: missing required field "status" (an integer)`);
  }
  // 14 and 12 written as numbers mean the presets "14" and "12" (D2.3).
  if (o.bodyFontSize === 14 || o.bodyFontSize === 12) o.bodyFontSize = String(o.bodyFontSize);
  const bodyFontSize = optionalString(o, 'bodyFontSize', where);
  if (bodyFontSize !== null && bodyFontSize !== '' && !FONT_SIZES.has(bodyFontSize)) {
    throw new SeedError(`${where}: "bodyFontSize" must be one of default, 14, 12 (got "${bodyFontSize}")`);
  }
  let cover = null;
  if (o.cover !== undefined && o.cover !== null) {
    const c = expectObject(o.cover, `${where}: field "cover"`);
    cover = {
      url: optionalString(c, 'url', `${where}.cover`),
      position: optionalString(c, 'position', `${where}.cover`),
    };
  }
  let tags: string[] | null = null;
  if (o.tags !== undefined && o.tags !== null) {
    if (!Array.isArray(o.tags) || o.tags.some((t) => typeof t !== 'string' || t.includes('\0'))) {
      throw new SeedError(`${where}: "tags" must be an array of strings or null`);
    }
    tags = o.tags as string[];
  }
  // Not checked for base64: rule 6 does not make it an error (the spec's own example holds a
  // placeholder), and the value is stored, never exported; see SeedWriter.addDocument.
  const yjs = optionalString(o, 'contentYjs', where);
  return {
    id: requiredString(o, 'id', where),
    slug: requiredString(o, 'slug', where),
    name: requiredString(o, 'name', where),
    type: requiredString(o, 'type', where),
    parentId: optionalString(o, 'parentId', where),
    orderKey: requiredString(o, 'orderKey', where),
    status,
    description: optionalString(o, 'description', where),
    emojiInfo: optionalString(o, 'emojiInfo', where),
    cover,
    tags,
    themeId: optionalString(o, 'themeId', where),
    backgroundThemeId: optionalString(o, 'backgroundThemeId', where),
    bodyFontSize,
    createdAt: optionalTimestamp(o, 'createdAt', where),
    updatedAt: optionalTimestamp(o, 'updatedAt', where),
    contentStr: optionalString(o, 'contentStr', where),
    contentHtml: optionalString(o, 'contentHtml', where),
    contentYjs: yjs,
    contentJson: o.contentJson === undefined ? null : o.contentJson,
  };
}
