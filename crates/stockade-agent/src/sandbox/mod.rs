//! The roles that run inside a sandbox: PID 1 (`server`, after `rootfs` has built the
//! root; `container` and `vm` are PID 1 of a docker sandbox and of a microVM), the
//! exec zygote, each exec's shim with its stdio or terminal (`exec_io`, `tty`), file
//! operations (`fileop`), directory watches (`dirwatch`), ports (`ports`) and what PID 1 cleans up (`cleanup`).

pub mod changes;
pub mod cleanup;
pub mod container;
pub mod dirwatch;
pub mod entries;
pub mod exec_io;
pub mod fileop;
pub mod ports;
pub mod rootfs;
pub mod server;
pub mod shim;
pub mod tty;
pub mod vm;
pub mod zygote;
