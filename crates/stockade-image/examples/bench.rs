//! Import and flatten throughput of an image archive or layout, as a table.
//!   cargo run --release -p stockade-image --example bench -- PATH [RUNS]

use std::time::Instant;

use stockade_image::{Store, import};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: bench PATH [RUNS]");
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
