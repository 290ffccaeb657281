//! Test guest: one subcommand per behaviour the stockade-wasm tests exercise.
//! Errors go to stderr with exit code 1 so that tests can tell refusal from success.

use std::io::{Read, Write};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("{what}: {e}");
    std::process::exit(1)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    match arg(1) {
        "hello" => println!("hello from wasm"),
        "args" => {
            for a in &args {
                println!("{a}");
            }
        }
        "env" => {
            let mut vars: Vec<_> = std::env::vars().collect();
            vars.sort();
            for (k, v) in vars {
                println!("{k}={v}");
            }
        }
        "exit" => std::process::exit(arg(2).parse().unwrap_or(2)),
        "stdin" => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .unwrap_or_else(|e| fail("stdin", e));
            std::io::stdout().write_all(&buf).unwrap();
        }
        "cat" => match std::fs::read(arg(2)) {
            Ok(b) => std::io::stdout().write_all(&b).unwrap(),
            Err(e) => fail(&format!("cannot read {}", arg(2)), e),
        },
        "write" => match std::fs::write(arg(2), arg(3)) {
            Ok(()) => println!("wrote {}", arg(2)),
            Err(e) => fail(&format!("cannot write {}", arg(2)), e),
        },
        // Writes stdin into the file `arg(2)`.
        "save" => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .unwrap_or_else(|e| fail("stdin", e));
            match std::fs::write(arg(2), &buf) {
                Ok(()) => println!("saved {} bytes to {}", buf.len(), arg(2)),
                Err(e) => fail(&format!("cannot write {}", arg(2)), e),
            }
        }
        // Makes the directory `arg(2)` and up to `arg(3)` empty files in it; stops at
        // the first error and says how many it made (stdout: `made N`).
        "touch-many" => {
            let n: u64 = arg(3).parse().unwrap_or(0);
            if let Err(e) = std::fs::create_dir(arg(2)) {
                fail(&format!("cannot make {}", arg(2)), e);
            }
            for i in 0..n {
                if let Err(e) = std::fs::File::create(format!("{}/f{i}", arg(2))) {
                    println!("made {i}");
                    fail(&format!("create failed after {i} files"), e);
                }
            }
            println!("made {n}");
        }
        "ls" => match std::fs::read_dir(arg(2)) {
            Ok(rd) => {
                let mut names: Vec<_> = rd
                    .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                for n in names {
                    println!("{n}");
                }
            }
            Err(e) => fail(&format!("cannot list {}", arg(2)), e),
        },
        // Writes `arg(3)` bytes into the file `arg(2)` in 64 KiB chunks; stops at the
        // first error and says how far it got.
        "fill" => {
            let total: u64 = arg(3).parse().unwrap_or(0);
            let mut f = std::fs::File::create(arg(2)).unwrap_or_else(|e| fail("create", e));
            let chunk = vec![b'x'; 64 << 10];
            let mut done = 0u64;
            while done < total {
                let n = chunk.len().min((total - done) as usize);
                if let Err(e) = f.write_all(&chunk[..n]) {
                    fail(&format!("write failed after {done} bytes"), e);
                }
                done += n as u64;
            }
            println!("filled {done}");
        }
        // Writes `arg(2)` bytes to stdout (or stderr with `flood-err`).
        "flood" | "flood-err" => {
            let total: u64 = arg(2).parse().unwrap_or(0);
            let chunk = vec![b'y'; 64 << 10];
            let mut out: Box<dyn Write> = if arg(1) == "flood" {
                Box::new(std::io::stdout().lock())
            } else {
                Box::new(std::io::stderr().lock())
            };
            let mut done = 0u64;
            while done < total {
                let n = chunk.len().min((total - done) as usize);
                out.write_all(&chunk[..n]).unwrap();
                done += n as u64;
            }
            out.write_all(b"END\n").unwrap();
        }
        "spin" => {
            let mut x: u64 = 0;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        "sleep" => std::thread::sleep(std::time::Duration::from_millis(
            arg(2).parse().unwrap_or(1000),
        )),
        // Allocates and touches memory until the allocator fails (which aborts).
        "bomb" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 16 << 20]);
                println!("holding {} MiB", hoard.len() * 16);
            }
        }
        "alloc" => {
            let mib: usize = arg(2).parse().unwrap_or(1);
            let v = vec![7u8; mib << 20];
            println!("allocated {} MiB, checksum {}", mib, v.iter().map(|&b| b as u64).sum::<u64>());
        }
        "cwd" => match std::env::current_dir() {
            Ok(p) => println!("{}", p.display()),
            Err(e) => fail("cwd", e),
        },
        "abort" => std::process::abort(),
        "both" => {
            println!("to stdout");
            eprintln!("to stderr");
        }
        other => fail("unknown subcommand", format!("{other:?}")),
    }
}
