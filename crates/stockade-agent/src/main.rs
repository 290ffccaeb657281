//! `stockade-agent`: one small binary with three roles.
//!
//! - `monitor`: host-side jailer and supervisor of a native sandbox (reads a launch
//!   plan on stdin); its forked child becomes PID 1 inside and serves the agent
//!   protocol.
//! - `monitor-server`: forks monitors for a process that creates many sandboxes
//!   (monitor_server.rs).
//! - `shim`: runs one exec inside the sandbox (started by PID 1 for every exec).
//! - `fileop`: runs one file operation as the sandbox user (started by PID 1).
//! - `zygote`: forks PID 1's shims and file operations (PID 1 forks it at start, or
//!   starts it with this command where it cannot fork; see zygote.rs).
//! - `ipc-clean`: removes the shared memory the execs left (started by PID 1).
//! - `container`: PID 1 of a docker sandbox (the docker provider's entrypoint).
//! - `docker-watch`: host-side watcher of a docker sandbox's owner and lifetime.
//! - `vm-init`: PID 1 of a microVM.
//! - `vm-host`: host-side supervisor of a microVM (its VMM, serial multiplexer,
//!   owner and lifetime).
//! - `gvisor-watch`: the same for a gVisor sandbox (`runsc delete --force`).
//! - `container` is also PID 1 of a gVisor sandbox (inside gVisor's kernel).
//! - `--version`.

mod host;
mod sandbox;

// The roles by name, wherever they run (crate::shim and the rest resolve through these).
use host::{cgroup, egress, ids, monitor, monitor_server, netmon, proxy, vmhost, watch};
use sandbox::{
    cleanup, container, dirwatch, exec_io, fileop, ports, rootfs, server, shim, tty, vm, zygote,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let role = args.next();
    // Nothing our caller left open may reach a sandbox (or stay held by a helper that
    // outlives the caller): every role starts with stdio only, plus fd 3, the control
    // socket PID 1 hands the shim and fileop on purpose.
    let first = match role.as_deref() {
        Some("shim" | "fileop" | "zygote" | "monitor-server") => 4,
        _ => 3,
    };
    stockade_sys::process::close_fds_from(first);
    let code = match role.as_deref() {
        Some("monitor") => monitor::main(),
        Some("monitor-server") => monitor_server::main(),
        Some("shim") => shim::main(),
        Some("zygote") => zygote::main(&args.collect::<Vec<_>>()),
        Some("fileop") => fileop::main(),
        Some("ipc-clean") => cleanup::ipc_clean_main(args.collect()),
        Some("container") => container::main(),
        Some("docker-watch") => watch::main(false, args.collect()),
        Some("gvisor-watch") => watch::main(true, args.collect()),
        Some("vm-init") => vm::main(),
        Some("vm-host") => vmhost::main(args.collect()),
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
                "usage: stockade-agent monitor|shim|container|docker-watch|gvisor-watch|vm-init|vm-host|--version\n\nThis program is started by Stockade; run `stockade` instead."
            );
            2
        }
    };
    std::process::exit(code);
}
