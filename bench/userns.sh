#!/usr/bin/env bash
# The cost of the user namespace on the one-shot path: `stockade run --
# python3 -c pass` before and after it, as root and rootless, with and without a
# workspace mount, against the bare process in the same run. Prints a table of
# medians and ratios.
#   bench/userns.sh BEFORE_DIR AFTER_DIR [RUNS]
# BEFORE_DIR/AFTER_DIR hold a release `stockade` and `stockade-agent`; the rootless rows
# run as stockade-rl (test.sh makes it: useradd -m stockade-rl; stockade setup rootless).
set -euo pipefail
before=$1 after=$2 runs=${3:-40}
user=stockade-rl
uid=$(id -u "$user") gid=$(id -g "$user")
ws=$(mktemp -d) rws=$(mktemp -d)
# 0755: the build before user namespaces could not enter a root-owned 0700 one.
chmod 755 "$ws"
chown "$uid:$gid" "$rws"
json=$(mktemp)
as_user="env -i HOME=/home/$user PATH=/usr/bin:/bin setpriv --reuid=$uid --regid=$gid --init-groups"
hyperfine -N --warmup 5 --runs "$runs" --export-json "$json" \
  -n "bare python3 -c pass" "/usr/bin/python3 -c pass" \
  -n "before: run (no user namespace)" "$before/stockade run -- python3 -c pass" \
  -n "after: run (user namespace)" "$after/stockade run -- python3 -c pass" \
  -n "before: run --workspace" "$before/stockade run --workspace $ws -- python3 -c pass" \
  -n "after: run --workspace (idmapped)" "$after/stockade run --workspace $ws -- python3 -c pass" \
  -n "bare, as $user" "$as_user /usr/bin/python3 -c pass" \
  -n "after: rootless run" "$as_user $after/stockade run -- python3 -c pass" \
  -n "after: rootless run --workspace" "$as_user $after/stockade run --workspace $rws -- python3 -c pass" \
  >/dev/null
python3 - "$json" <<'PY'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))["results"]
med = {r["command"]: statistics.median(r["times"]) * 1000 for r in rows}
bare, bare_user = med["bare python3 -c pass"], med["bare, as stockade-rl"]
print("| what | p50 ms | vs bare (same run) |")
print("|---|---:|---:|")
for r in rows:
    name = r["command"]
    base = bare_user if "rootless" in name or "as stockade-rl" in name else bare
    print(f"| {name} | {med[name]:.2f} | {med[name] / base:.2f}x |")
d = med["after: run (user namespace)"] - med["before: run (no user namespace)"]
w = med["after: run --workspace (idmapped)"] - med["before: run --workspace"]
print(f"\nuser namespace cost at the median: {d:+.2f} ms (run), {w:+.2f} ms (run --workspace)")
PY
rm -rf "$ws" "$rws" "$json"
