// SDK overhead benchmark: the same operations from Node and from Rust (the port of
// bench/sdk/python.py).
//
//   sudo node bench/sdk/typescript.mjs [ITERATIONS [ROUNDS]]
//
// Needs the package built (sdk/typescript/build.sh release) and the Rust bench built
// (cargo build --release -p stockade-bench --bin latency; STOCKADE_RUST_BENCH names it). Runs
// the Rust library benchmark (bench/src/bin/latency.rs) and the same
// operations through the SDK in this process, in alternating rounds, and prints the
// SDK's overhead per operation (p50 SDK - p50 Rust library, median over rounds).
import { execFileSync } from "node:child_process";
import { performance } from "node:perf_hooks";

import { Stockade } from "../../sdk/typescript/dist/index.mjs";

const TARGET = process.env.CARGO_TARGET_DIR ?? new URL("../../target", import.meta.url).pathname;
const PY = ["/usr/bin/python3", "-c", "pass"];

async function timed(n, fn) {
  await fn(); // warm-up, not counted
  const out = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    out.push(performance.now() - t);
  }
  return out;
}

const p = (v, q) => [...v].sort((a, b) => a - b)[Math.round((v.length - 1) * q)];
const median = (v) => p(v, 0.5);

function rustRows(n) {
  const bench = process.env.STOCKADE_RUST_BENCH ?? `${TARGET}/release/latency`;
  const rows = {};
  for (const line of execFileSync(bench, [String(n)], { encoding: "utf8" }).split("\n")) {
    const cells = line.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
    if (cells.length === 5 && /^[\d.]+$/.test(cells[1])) rows[cells[0]] = Number(cells[1]);
  }
  return rows;
}

async function sdkRows(client, n) {
  const rows = {};
  rows["create + exec `python3 -c pass` + destroy (library)"] = await timed(n, async () => {
    const sb = await client.create({ owned: false });
    try {
      if ((await sb.exec(PY)).exitCode !== 0) throw new Error("python3 -c pass failed");
    } finally {
      await sb.destroy();
    }
  });
  rows["create + destroy (library, no exec)"] = await timed(n, async () => {
    await (await client.create({ owned: false })).destroy();
  });
  const sb = await client.create({ owned: false });
  try {
    rows["exec round trip of `true` in a live sandbox"] = await timed(n * 4, () => sb.exec(["/bin/true"]));
  } finally {
    await sb.destroy();
  }
  return rows;
}

const n = Number(process.argv[2] ?? 20);
const rounds = Number(process.argv[3] ?? 5);
const client = await Stockade.connect({ provider: "native" });
// Rounds alternate Rust and Node; each round's overhead is the difference of the two
// p50s measured moments apart, so drifting load cancels out.
const sdk = {};
const lib = {};
const over = {};
for (let r = 0; r < rounds; r++) {
  const rust = rustRows(n);
  for (const [name, v] of Object.entries(await sdkRows(client, n))) {
    if (rust[name] === undefined) throw new Error(`the Rust bench has no row ${name}`);
    (sdk[name] ??= []).push(median(v));
    (lib[name] ??= []).push(rust[name]);
    (over[name] ??= []).push(median(v) - rust[name]);
  }
}
const f = (x) => x.toFixed(2);
const s = (x) => (x >= 0 ? "+" : "") + x.toFixed(2);
console.log("| operation | SDK p50 ms | Rust library p50 ms | SDK overhead ms (median of rounds) | overhead range |");
console.log("|---|---:|---:|---:|---:|");
for (const name of Object.keys(sdk)) {
  const label = name.replace(" (library, no exec)", "").replace(" (library)", "");
  console.log(
    `| ${label} | ${f(median(sdk[name]))} | ${f(median(lib[name]))} | ${s(median(over[name]))} | ${s(Math.min(...over[name]))} .. ${s(Math.max(...over[name]))} |`,
  );
}
console.log(`\n${rounds} rounds of ${n} iterations (${4 * n} for \`true\`), Rust and Node alternating; sandboxes not owned (as in the Rust bench).`);
