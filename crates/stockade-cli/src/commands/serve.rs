//! `stockade serve`: runs the daemon (the same as the `stockaded` binary), with the
//! E2B-compatible API for `--e2b-listen`.

/// Serves until SIGINT or SIGTERM; returns the exit code.
pub fn run(args: stockade_server::ServeArgs) -> i32 {
    stockade_server::run_with(args, Some(stockade_e2b::frontend))
}
