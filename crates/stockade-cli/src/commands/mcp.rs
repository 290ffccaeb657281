//! `stockade mcp`: the MCP server (crate `stockade-mcp`), with the CLI's globals.

/// Runs the server on its own runtime; returns the exit code.
pub fn run(
    args: stockade_mcp::McpArgs,
    provider: Option<String>,
    home: Option<std::path::PathBuf>,
    direct: bool,
) -> i32 {
    stockade_mcp::run(
        args,
        stockade_mcp::Globals {
            provider,
            home,
            direct,
        },
    )
}
