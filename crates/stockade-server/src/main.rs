//! `stockaded`: the Stockade daemon (same as `stockade serve`).

use clap::Parser;

/// Serve sandboxes over gRPC with warm pools, tenants and durable state.
#[derive(Parser, Debug)]
#[command(name = "stockaded", version, about)]
struct Cli {
    #[command(flatten)]
    serve: stockade_server::ServeArgs,
}

fn main() {
    let cli = Cli::parse();
    std::process::exit(stockade_server::run(cli.serve));
}
