#!/bin/sh
# Run once by the postgres image when it initialises the primary's data folder: a role the standby
# replicates with, and the pg_hba.conf line that lets it in (the image's own lines cover ordinary
# connections only).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -c "CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD '$REPLICATION_PASSWORD'"
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
