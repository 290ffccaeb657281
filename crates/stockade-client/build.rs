//! Compiles `proto/stockade.proto` with protox (pure Rust: no system protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/stockade.proto");
    let fds = protox::compile(["proto/stockade.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
