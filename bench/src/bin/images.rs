//! Import and flatten throughput of an image archive or layout, as a table; or pull
//! throughput from a registry.
//!   cargo run --release -p stockade-bench --bin images -- PATH [RUNS]
//!   cargo run --release -p stockade-bench --bin images -- pull REFERENCE [RUNS]

use std::time::Instant;

use stockade_image::{Store, import};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: bench PATH [RUNS] | bench pull REFERENCE [RUNS]");
    if path == "pull" {
        let reference = args.next().expect("usage: bench pull REFERENCE [RUNS]");
        let runs: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(3);
        return pull_bench(&reference, runs);
    }
    let runs: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(3);
    println!("| run | import (MB/s) | flatten (MB/s) | flatten (s) | image size (MB) |");
    println!("|---|---|---|---|---|");
    for run in 1..=runs {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path().join("images")).expect("store");
        let t = Instant::now();
        let imported = import(&store, path.as_ref(), None).expect("import");
        let import_s = t.elapsed().as_secs_f64();
        let image = store.image_by_digest(&imported[0].digest).expect("image");
        let mb = image.size() as f64 / 1e6;
        let t = Instant::now();
        store.rootfs(&image).expect("flatten");
        let flatten_s = t.elapsed().as_secs_f64();
        println!(
            "| {run} | {:.0} | {:.0} | {flatten_s:.2} | {mb:.0} |",
            mb / import_s,
            mb / flatten_s
        );
    }
}

/// Pulls `reference` into a fresh store `runs` times (then flattens it): MB/s of blob
/// bytes fetched and verified, and of flattening.
fn pull_bench(reference: &str, runs: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("| run | pull (MB/s) | pull (s) | blob MB | flatten (MB/s) | flatten (s) |");
    println!("|---|---|---|---|---|---|");
    for run in 1..=runs {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path().join("images")).expect("store");
        let opts = stockade_image::PullOptions::default();
        let mut fetched = 0u64;
        let t = Instant::now();
        rt.block_on(stockade_image::pull(&store, reference, &opts, &mut |p| {
            if let stockade_image::PullProgress::Resolved { missing_bytes, .. } = p {
                fetched = missing_bytes;
            }
        }))
        .expect("pull");
        let pull_s = t.elapsed().as_secs_f64();
        let image = store.image(reference).expect("image");
        let t = Instant::now();
        store.rootfs(&image).expect("flatten");
        let flatten_s = t.elapsed().as_secs_f64();
        let (blob_mb, tree_mb) = (fetched as f64 / 1e6, image.size() as f64 / 1e6);
        println!(
            "| {run} | {:.0} | {pull_s:.2} | {blob_mb:.0} | {:.0} | {flatten_s:.2} |",
            blob_mb / pull_s,
            tree_mb / flatten_s
        );
    }
}
