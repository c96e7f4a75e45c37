#!/usr/bin/env bash
# What the test suite needs from outside PyPI, installed only when missing (a warm machine fetches
# nothing): Debian's PostgreSQL, MariaDB, Redis, Chromium, jemalloc and Maven (which fetches the Kafka broker's
# jars on the suite's first start of it). The servers are not started here: the suite starts its own
# on free ports (tests/local_servers.py). Root installs directly; others through sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo

missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
ls /usr/lib/*/libjemalloc.so.2 >/dev/null 2>&1 || missing+=(libjemalloc2)  # the allocator speedlayer gives its JVM
command -v mariadb-install-db >/dev/null 2>&1 || missing+=(mariadb-server)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing Debian packages for the tests: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
