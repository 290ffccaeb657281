//! `stockade-mcp`: the same server as `stockade mcp`, as its own binary (what the
//! crate's tests start).

use clap::Parser;

/// Stockade's sandboxes as tools for any MCP client (stdio, or --http).
#[derive(Parser, Debug)]
#[command(name = "stockade-mcp", version)]
struct Cli {
    /// Isolation backend (default: $STOCKADE_PROVIDER or native).
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// Where sessions and images live (default: $STOCKADE_HOME).
    #[arg(long, value_name = "DIR", env = "STOCKADE_HOME")]
    home: Option<std::path::PathBuf>,
    /// Run in-process even when a daemon answers.
    #[arg(long)]
    direct: bool,
    #[command(flatten)]
    args: stockade_mcp::McpArgs,
}

fn main() {
    let cli = Cli::parse();
    let g = stockade_mcp::Globals {
        provider: cli.provider,
        home: cli.home,
        direct: cli.direct,
    };
    std::process::exit(stockade_mcp::run(cli.args, g));
}
