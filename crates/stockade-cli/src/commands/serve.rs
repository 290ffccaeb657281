//! `stockade serve`: runs the daemon (the same as the `stockaded` binary).

/// Serves until SIGINT or SIGTERM; returns the exit code.
pub fn run(args: stockade_server::ServeArgs) -> i32 {
    stockade_server::run(args)
}
