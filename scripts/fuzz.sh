#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ for a given time each and prints a table.
# Usage: scripts/fuzz.sh [--time SECONDS] [--quick] [--dev] [TARGET...]
#   --time S   seconds per target (default 60)
#   --quick    only the targets that do not build the daemon (all but e2b_connect)
#   --dev      unoptimized targets: half the build time, far fewer runs a second (for
#              a short check, as test.sh's)
#   --build    build the targets and stop (test.sh builds them beside its suites)
#   TARGET     proxy_head, tls_hello, agent_codec, spec, e2b_connect (default: all)
# Builds with the pinned stable toolchain (RUSTC_BOOTSTRAP for cargo-fuzz's flags) and
# no sanitizer: the code under test is safe Rust, so a crash is a panic or an abort.
# The corpus grows in $STOCKADE_FUZZ_CORPUS (default /var/cache/stockade/fuzz-corpus),
# seeded from fuzz/seeds; a failing input is kept in fuzz/artifacts/TARGET/ and the
# script fails naming it and the command that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=60
quick=
dev=
build_only=
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --time) secs=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --dev) dev=1; shift ;;
    --build) build_only=1; shift ;;
    -h|--help) sed -n 2,12p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(proxy_head tls_hello agent_codec spec e2b_connect)
if [ ${#targets[@]} -eq 0 ]; then
  targets=("${all[@]}")
  [ -n "$quick" ] && targets=(proxy_head tls_hello agent_codec spec)
fi
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target $t (targets: ${all[*]})" >&2; exit 2; }
done

cache=${STOCKADE_CACHE:-/var/cache/stockade}
tools=$cache/tools/cargo-fuzz-0.13.2
if [ ! -x "$tools/bin/cargo-fuzz" ]; then
  echo "fuzz.sh: building cargo-fuzz 0.13.2 into $tools (once)" >&2
  env -u CARGO_TARGET_DIR cargo install -q --locked cargo-fuzz --version 0.13.2 --root "$tools"
fi
export PATH=$tools/bin:$PATH
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR=${STOCKADE_FUZZ_TARGET:-$PWD/fuzz/target}
corpus_root=${STOCKADE_FUZZ_CORPUS:-$cache/fuzz-corpus}
features=()
[[ " ${targets[*]} " == *" e2b_connect "* ]] || features=(--no-default-features)
profile=release
if [ -n "$dev" ]; then
  features+=(--dev)
  profile=debug
fi
bin_dir=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/$profile

cd fuzz
echo "fuzz.sh: building ${targets[*]}" >&2
for t in "${targets[@]}"; do
  cargo fuzz build -s none "${features[@]}" "$t" 2>&1 | grep -v '^ *Compiling' >&2 || true
  [ -x "$bin_dir/$t" ] \
    || { echo "fuzz.sh: $t did not build (run: cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz build -s none $t)" >&2; exit 1; }
done

[ -z "$build_only" ] || exit 0

rows=()
failed=0
for t in "${targets[@]}"; do
  corpus=$corpus_root/$t
  mkdir -p "$corpus" "artifacts/$t"
  cp -n seeds/"$t"/* "$corpus"/ 2>/dev/null || true
  log=$(mktemp)
  echo "fuzz.sh: $t for ${secs} s" >&2
  set +e
  "$bin_dir/$t" \
    -artifact_prefix="artifacts/$t/" -max_total_time="$secs" -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  files=$(find "$corpus" -type f | wc -l)
  verdict=ok
  if [ $rc -ne 0 ]; then
    failed=1
    art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    verdict="FAILED: ${art:-see log}"
    grep -m3 -E 'panicked|ERROR' "$log" >&2 || true
    echo "fuzz.sh: $t failed; replay: (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -s none $t ${art:-ARTIFACT}); log: $log" >&2
  else
    rm -f "$log"
  fi
  rows+=("| $t | $secs | ${runs:-?} | ${cov:-?} | $files | $verdict |")
done

echo "| target | seconds | executions | coverage (edges) | corpus files | result |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $failed
