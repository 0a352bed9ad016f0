/** Seed file records (seed-format.md) as read, before any export rule; null or missing means unset (rule 2). */

export interface SeedApiKey {
  id: string;
  key: string;
  expiresAt?: string | null;
  revokedAt?: string | null;
}

export interface SeedUser {
  id: string;
  name: string;
  apiKeys?: SeedApiKey[];
}

interface SeedCover {
  url?: string | null;
  position?: string | null;
}

export interface SeedDocument {
  id: string;
  slug: string;
  name: string;
  type: string;
  parentId?: string | null;
  orderKey: string;
  status: number;
  description?: string | null;
  emojiInfo?: string | null;
  cover?: SeedCover | null;
  tags?: string[] | null;
  themeId?: string | null;
  backgroundThemeId?: string | null;
  bodyFontSize?: string | null;
  createdAt?: string | null;
  updatedAt?: string | null;
  contentStr?: string | null;
  contentHtml?: string | null;
  /** base64 of the editor's binary state (seed-format.md rule 4) */
  contentYjs?: string | null;
  contentJson?: unknown;
}

/** A book without its documents: the loader streams documents one by one. */
export interface SeedBookHeader {
  id: string;
  ownerId: string;
  slug: string;
  name: string;
  description?: string | null;
  coverImage?: string | null;
  createdAt?: string | null;
  updatedAt?: string | null;
}
