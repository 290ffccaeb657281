#!/usr/bin/env bash
# The daemon's memory over repeated rounds of creating and removing N sandboxes:
# a table of its RSS after each round's creates and after its `rm --all`.
#   bench/daemon-rounds.sh [STOCKADE_BIN] [N] [ROUNDS]
set -euo pipefail
bin=${1:-target/release/stockade}
n=${2:-500}
rounds=${3:-3}
dir=$(mktemp -d)
"$bin" serve --listen "unix://$dir/d.sock" --state-dir "$dir/state" \
  --max-sandboxes-per-tenant $((n * 2)) --max-sandboxes $((n * 4)) >"$dir/log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$dir"' EXIT
export STOCKADE_HOST="unix://$dir/d.sock"
for _ in $(seq 100); do [ -S "$dir/d.sock" ] && break; sleep 0.1; done
rss() { awk '/^VmRSS/{printf "%d", $2/1024}' "/proc/$daemon/status"; }
echo "| round | sandboxes | daemon RSS after creates (MiB) | after rm --all (MiB) | threads after |"
echo "|---|---|---|---|---|"
echo "| fresh | 0 | $(rss) | - | $(awk '/^Threads/{print $2}' /proc/$daemon/status) |"
for r in $(seq "$rounds"); do
  seq "$n" | xargs -P 8 -n 1 sh -c "\"$bin\" create --timeout 600 >/dev/null"
  live=$("$bin" ls | grep -c '^sb-' || true)
  after_create=$(rss)
  "$bin" rm --all >/dev/null
  # The answered destroys tear down in the background: give them time to end.
  sleep 5
  echo "| $r | $live | $after_create | $(rss) | $(awk '/^Threads/{print $2}' /proc/$daemon/status) |"
done
