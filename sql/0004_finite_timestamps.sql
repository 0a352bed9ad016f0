-- Books and documents hold finite timestamps only: created_at and updated_at may not be 'infinity'
-- or '-infinity'.
--
-- Why: both are valid timestamptz values, but the export formats timestamps with to_char
-- (decisions.md D2.6), which returns NULL for them; the encoder then threw after the first byte, so
-- every export of that book was aborted (D6.3) and no client could ever get it. Refused where they
-- are stored, such a value fails its writer once, with the constraint's name, instead.
--
-- Forward-only migrations do not change data behind anyone's back: when rows already hold a
-- non-finite timestamp, this migration fails, names the tables and counts the rows (with an
-- example id), and applies nothing. Give those rows finite timestamps, then migrate again.

DO $$
DECLARE
  problems text[] := '{}';
  n bigint;
  example text;
BEGIN
  SELECT count(*), min(id) INTO n, example FROM books
  WHERE NOT (isfinite(created_at) AND isfinite(updated_at));
  IF n > 0 THEN
    problems := problems || format('books: %s row(s), e.g. id %L', n, example);
  END IF;
  SELECT count(*), min(id) INTO n, example FROM documents
  WHERE NOT (isfinite(created_at) AND isfinite(updated_at));
  IF n > 0 THEN
    problems := problems || format('documents: %s row(s), e.g. id %L', n, example);
  END IF;
  IF cardinality(problems) > 0 THEN
    RAISE EXCEPTION 'non-finite created_at or updated_at (infinity) in %; give these rows finite timestamps, then run the migrations again',
      array_to_string(problems, '; ')
      USING ERRCODE = 'check_violation';
  END IF;
END $$;

ALTER TABLE books ADD CONSTRAINT books_timestamps_finite CHECK (isfinite(created_at) AND isfinite(updated_at));
ALTER TABLE documents ADD CONSTRAINT documents_timestamps_finite CHECK (isfinite(created_at) AND isfinite(updated_at));
