//! `stockade completions SHELL` and `stockade man [COMMAND...]`: generated from the
//! command line's own definition, so they never drift from `--help`.

use std::io::Write;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for: bash, zsh, fish, elvish or powershell. Load it with
    /// e.g. `source <(stockade completions bash)`.
    pub shell: Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// The subcommand whose page to print, e.g. `run` or `image pull` (default: the
    /// page of `stockade` itself). Read it with `stockade man | man -l -`.
    pub command: Vec<String>,
}

/// Prints the completion script; returns the exit code.
pub fn completions(a: CompletionsArgs) -> i32 {
    let mut cmd = crate::Cli::command();
    // Into a buffer first: clap_complete panics when its writer fails, and a reader
    // that stops early (`| head`) is not an error.
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "stockade", &mut out);
    match std::io::stdout().write_all(&out) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("stockade: error: cannot write the completions: {e}");
            74
        }
    }
}

/// Prints the man page of `stockade` or of one of its subcommands; returns the exit code.
pub fn man(a: ManArgs) -> i32 {
    let mut cmd = crate::Cli::command();
    // Building the tree names each subcommand's page (`stockade-image-pull`) and
    // gives it the version.
    cmd.build();
    let mut page = cmd;
    let mut name = String::from("stockade");
    for word in &a.command {
        match page.find_subcommand(word) {
            Some(sub) => {
                name = format!("{name}-{word}");
                page = sub.clone();
            }
            None => {
                eprintln!(
                    "stockade: error: `{}` has no subcommand {word:?}; see `{} --help`",
                    name.replace('-', " "),
                    name.replace('-', " ")
                );
                return 64;
            }
        }
    }
    let mut out = Vec::new();
    if let Err(e) = clap_mangen::Man::new(page).render(&mut out) {
        eprintln!("stockade: error: cannot render the man page: {e}");
        return 70;
    }
    match std::io::stdout().write_all(&out) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("stockade: error: cannot write the man page: {e}");
            74
        }
    }
}
