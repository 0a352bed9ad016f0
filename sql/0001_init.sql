-- Initial schema: users, API keys, knowledge bases (books) and their documents.
-- Identifiers are opaque text (decisions.md D7.1).

CREATE TABLE users (
  id         text PRIMARY KEY,
  name       text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Only a SHA-256 hash of each key is stored, never the key (decisions.md D5.1).
CREATE TABLE api_keys (
  id         text PRIMARY KEY,
  user_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  key_hash   bytea NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
  expires_at timestamptz,
  revoked_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE books (
  id          text PRIMARY KEY,
  owner_id    text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  slug        text NOT NULL,
  name        text NOT NULL,
  description text,
  cover_image text,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  -- A slug is unique among the knowledge bases of one owner (decisions.md D7.1).
  CONSTRAINT books_owner_slug_key UNIQUE (owner_id, slug)
);

CREATE TABLE documents (
  id                  text COLLATE "C" PRIMARY KEY,
  -- Deferrable: the loader streams a book's documents before the book's last fields are read.
  book_id             text NOT NULL REFERENCES books (id) ON DELETE CASCADE DEFERRABLE,
  slug                text NOT NULL,
  name                text NOT NULL,
  type                text NOT NULL,
  parent_id           text COLLATE "C",
  -- Byte-wise order, the order fractional-indexing keys are designed for (decisions.md D1.1).
  order_key           text COLLATE "C" NOT NULL,
  status              integer NOT NULL,
  description         text,
  emoji_info          text,
  cover_url           text,
  cover_position      text,
  tags                text[],
  theme_id            text,
  background_theme_id text,
  body_font_size      text CHECK (body_font_size IN ('default', '14', '12')),
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  content_str         text,
  content_html        text,
  -- Editor-internal formats: stored, never selected by the export (export-api.md 2.2 rule 2).
  content_yjs         bytea,
  content_json        jsonb
);

-- Serves the export's WHERE book_id = $1 AND status = 1 ORDER BY order_key, id without a sort
-- (decisions.md D1.1, D1.2): only active documents are indexed.
CREATE INDEX documents_export_idx ON documents (book_id, order_key, id) WHERE status = 1;

CREATE INDEX api_keys_user_idx ON api_keys (user_id);
CREATE INDEX documents_book_idx ON documents (book_id);
