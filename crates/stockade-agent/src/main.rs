//! `stockade-agent`: one small binary with three roles.
//!
//! - `monitor`: host-side jailer and supervisor of a native sandbox (reads a launch
//!   plan on stdin); its forked child becomes PID 1 inside and serves the agent
//!   protocol.
//! - `shim`: runs one exec inside the sandbox (started by PID 1 for every exec).
//! - `--version`.

mod cgroup;
mod fileop;
mod monitor;
mod rootfs;
mod server;
mod shim;

fn main() {
    let mut args = std::env::args().skip(1);
    let code = match args.next().as_deref() {
        Some("monitor") => monitor::main(),
        Some("shim") => shim::main(),
        Some("fileop") => fileop::main(),
        Some("--version") | Some("-V") => {
            println!(
                "stockade-agent {} (protocol {})",
                env!("CARGO_PKG_VERSION"),
                stockade_agent_proto::PROTOCOL_VERSION
            );
            0
        }
        _ => {
            eprintln!(
                "usage: stockade-agent monitor|shim|--version\n\nThis program is started by Stockade; run `stockade` instead."
            );
            2
        }
    };
    std::process::exit(code);
}
