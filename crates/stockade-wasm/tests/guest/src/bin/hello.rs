//! The smallest useful guest: the benchmark's hello world.

fn main() {
    println!("hello from wasm");
}
