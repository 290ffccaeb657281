//! The roles that run on the host, outside every sandbox: the native sandbox's jailer
//! and supervisor (`monitor`, forked by `monitor-server`), its cgroups and host ids,
//! the network monitor with the egress resolver and proxy (`netmon`, `egress`,
//! `proxy`), the watchers of docker and gVisor sandboxes (`watch`) and the microVM's
//! supervisor (`vmhost`).

pub mod cgroup;
pub mod egress;
pub mod ids;
pub mod monitor;
pub mod monitor_server;
pub mod netmon;
pub mod proxy;
pub mod vmhost;
pub mod watch;
