#!/usr/bin/env python3
"""The jobs of scripts/test-lanes.py.

    cargo test --no-run --message-format=json ... | scripts/test-jobs.py cargo [SKIP...] >JOBS
        one job per test binary cargo built, run as `cargo test` runs it: in its
        package's directory, with CARGO_MANIFEST_DIR, CARGO_PKG_NAME and
        CARGO_CRATE_NAME set; but for the jobs named SKIP (run otherwise)
    scripts/test-jobs.py one NAME CWD ARGV... >>JOBS
        one job of a command
    scripts/test-jobs.py exe PACKAGE TARGET <cargo-json
        prints the test binary of PACKAGE's test target TARGET (for suites run again
        elsewhere)
"""

import json
import os
import sys


def artifacts(stream):
    for line in stream:
        line = line.strip()
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
            yield m


def package_of(package_id):
    # "path+file:///dir#name@version" or "path+file:///dir/name#version"
    tail = package_id.rsplit("#", 1)[-1]
    if "@" in tail:
        return tail.split("@", 1)[0]
    return package_id.rsplit("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "cargo":
        skip = set(sys.argv[2:])
        for m in artifacts(sys.stdin):
            pkg = package_of(m["package_id"])
            target = m["target"]
            cwd = os.path.dirname(m["manifest_path"])
            job = {
                "name": f"{pkg} {target['kind'][0]} {target['name']}",
                "argv": [m["executable"]],
                "cwd": cwd,
                "env": {
                    "CARGO_MANIFEST_DIR": cwd,
                    "CARGO_PKG_NAME": pkg,
                    "CARGO_CRATE_NAME": target["name"].replace("-", "_"),
                },
            }
            if job["name"] not in skip:
                print(json.dumps(job))
    elif what == "one" and len(sys.argv) > 4:
        print(json.dumps({"name": sys.argv[2], "cwd": sys.argv[3], "argv": sys.argv[4:]}))
    elif what == "exe" and len(sys.argv) == 4:
        for m in artifacts(sys.stdin):
            if package_of(m["package_id"]) == sys.argv[2] and m["target"]["name"] == sys.argv[3]:
                print(m["executable"])
                return 0
        print(f"test-jobs: no test binary {sys.argv[3]} of {sys.argv[2]}", file=sys.stderr)
        return 1
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
