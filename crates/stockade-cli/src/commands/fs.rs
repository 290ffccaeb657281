//! `stockade fs ID read|write|edit|ls|glob|grep|mkdir|rm ...`: file operations inside a
//! sandbox, run as the sandbox user.

use std::io::{Read, Write};

use clap::Subcommand;
use serde_json::json;
use stockade::{Error, FileOp, FileResult, Result};

use super::Ctx;

#[derive(Subcommand, Debug)]
pub enum FsCmd {
    /// Print a file (binary-safe), or a range of it.
    Read {
        /// The file, inside the sandbox.
        path: String,
        /// Where to start reading, in bytes from the start of the file.
        #[arg(long, default_value_t = 0, value_name = "BYTES")]
        offset: u64,
        /// Bytes to read (default 1 MiB, at most 32 MiB).
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Write CONTENT (or stdin) to a file, creating parent directories.
    Write {
        /// The file, inside the sandbox.
        path: String,
        /// What to write (default: stdin).
        content: Option<String>,
        /// File mode in octal, e.g. 755.
        #[arg(long)]
        mode: Option<String>,
    },
    /// Replace OLD by NEW (exactly once unless --all).
    Edit {
        /// The file, inside the sandbox.
        path: String,
        /// The text to replace.
        old: String,
        /// The text to put in its place.
        new: String,
        /// Replace every occurrence (default: OLD must occur exactly once).
        #[arg(long)]
        all: bool,
    },
    /// List a directory.
    Ls {
        /// The directory, inside the sandbox.
        path: String,
    },
    /// List the paths matching a glob below ROOT (default: the working directory).
    Glob {
        /// The glob, e.g. `**/*.py`.
        pattern: String,
        /// Where to search (default: the working directory).
        root: Option<String>,
    },
    /// Print the lines matching a regex in files below ROOT.
    Grep {
        /// The regular expression.
        regex: String,
        /// Where to search (default: the working directory).
        root: Option<String>,
        /// Only files matching this glob.
        #[arg(long)]
        include: Option<String>,
        /// Most matches (default 1000).
        #[arg(long, value_name = "N")]
        max: Option<u32>,
    },
    /// Create a directory.
    Mkdir {
        /// The directory, inside the sandbox.
        path: String,
        /// Create missing parents too, and accept an existing directory.
        #[arg(short = 'p', long)]
        parents: bool,
    },
    /// Remove a file or directory.
    Rm {
        /// The file or directory, inside the sandbox.
        path: String,
        /// Remove a directory and everything in it.
        #[arg(short = 'r', long)]
        recursive: bool,
    },
}

pub async fn run(ctx: &Ctx, id: &str, cmd: FsCmd) -> Result<i32> {
    let op = match cmd {
        FsCmd::Read {
            path,
            offset,
            limit,
        } => FileOp::Read {
            path,
            offset,
            limit: limit.unwrap_or(stockade::files::DEFAULT_READ_BYTES),
        },
        FsCmd::Write {
            path,
            content,
            mode,
        } => {
            let data = match content {
                Some(c) => c.into_bytes(),
                None => {
                    let mut buf = Vec::new();
                    std::io::stdin()
                        .read_to_end(&mut buf)
                        .map_err(|e| Error::io("cannot read stdin", e))?;
                    buf
                }
            };
            let mode = match mode {
                Some(m) => Some(
                    u32::from_str_radix(&m, 8)
                        .map_err(|_| Error::InvalidRequest(format!("--mode {m:?} is not octal")))?,
                ),
                None => None,
            };
            FileOp::Write { path, data, mode }
        }
        FsCmd::Edit {
            path,
            old,
            new,
            all,
        } => FileOp::Edit {
            path,
            old,
            new,
            replace_all: all,
        },
        FsCmd::Ls { path } => FileOp::Ls { path },
        FsCmd::Glob { pattern, root } => FileOp::Glob {
            pattern,
            root: root.unwrap_or_else(|| ".".into()),
        },
        FsCmd::Grep {
            regex,
            root,
            include,
            max,
        } => FileOp::Grep {
            regex,
            root: root.unwrap_or_else(|| ".".into()),
            include,
            max_matches: max.unwrap_or(0),
        },
        FsCmd::Mkdir { path, parents } => FileOp::Mkdir { path, parents },
        FsCmd::Rm { path, recursive } => FileOp::Rm { path, recursive },
    };
    let result = ctx.provider_for(id).await?.file(id, op).await?;
    print(ctx.json, &result);
    Ok(0)
}

fn print(json: bool, r: &FileResult) {
    let out = &mut std::io::stdout();
    match r {
        FileResult::Done => {
            if json {
                println!("{}", json!({"ok": true}));
            }
        }
        FileResult::Data { data, size, eof } => {
            if json {
                println!(
                    "{}",
                    json!({"data": String::from_utf8_lossy(data), "size": size, "eof": eof, "bytes": data.len()})
                );
            } else {
                let _ = out.write_all(data);
            }
        }
        FileResult::Edited { replacements } => {
            if json {
                println!("{}", json!({"replacements": replacements}));
            } else {
                println!("{replacements} replacement(s)");
            }
        }
        FileResult::Entries(entries) => {
            if json {
                println!("{}", serde_json::to_string(entries).unwrap_or_default());
            } else {
                for e in entries {
                    println!(
                        "{:<8} {:>04o} {:>10} {}",
                        format!("{:?}", e.kind).to_lowercase(),
                        e.mode,
                        e.size,
                        e.name
                    );
                }
            }
        }
        FileResult::Paths { paths, truncated } => {
            if json {
                println!("{}", json!({"paths": paths, "truncated": truncated}));
            } else {
                for p in paths {
                    println!("{p}");
                }
                if *truncated {
                    eprintln!("stockade: more paths matched; the list was cut");
                }
            }
        }
        FileResult::Matches { matches, truncated } => {
            if json {
                println!("{}", json!({"matches": matches, "truncated": truncated}));
            } else {
                for m in matches {
                    println!("{}:{}:{}", m.path, m.line_number, m.line);
                }
                if *truncated {
                    eprintln!("stockade: more lines matched; the list was cut");
                }
            }
        }
        FileResult::Archive(a) => {
            let _ = out.write_all(a);
        }
    }
}
