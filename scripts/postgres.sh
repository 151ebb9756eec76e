#!/usr/bin/env bash
# Start (or find) a throwaway PostgreSQL for the store tests and print its DSN
# on stdout, nothing else:
#   STOCKADE_TEST_POSTGRES=$(scripts/postgres.sh) go test ./tenants/...
# Idempotent: a running server is reused. Trust auth, bound to 127.0.0.1 and
# a unix socket in the cluster folder, fsync off: for tests only.
set -euo pipefail

dir=${STOCKADE_PG_DIR:-/var/tmp/stockade-pg}
port=${STOCKADE_PG_PORT:-55432}
dsn="postgres://postgres@127.0.0.1:${port}/postgres?sslmode=disable"

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [[ -z "$bin" ]]; then
	echo "postgres.sh: no PostgreSQL server under /usr/lib/postgresql/*/bin (apt-get install postgresql)" >&2
	exit 1
fi

# initdb and postgres refuse to run as root: run them as the postgres user.
as_pg() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres; then
	echo "$dsn"
	exit 0
fi

mkdir -p "$dir"
if [[ $(id -u) -eq 0 ]]; then
	chown postgres:postgres "$dir"
fi
chmod 700 "$dir"

if [[ ! -s "$dir/data/PG_VERSION" ]]; then
	as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >&2
fi

as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start -o \
	"-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" >&2 ||
	{
		echo "postgres.sh: pg_ctl start failed; last lines of $dir/server.log:" >&2
		tail -n 20 "$dir/server.log" >&2 || true
		exit 1
	}

for _ in $(seq 1 60); do
	if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres; then
		echo "$dsn"
		exit 0
	fi
	sleep 0.5
done
echo "postgres.sh: server in $dir did not become ready on port $port" >&2
exit 1
