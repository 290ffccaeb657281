//! The agent's pure parts, as a library beside the `stockade-agent` binary: what the
//! egress proxy reads off a connection ([`wire`]). The binary uses them as the
//! fuzz targets in `fuzz/` do.

pub mod wire;
