//! Language presets: one table from a language name to the image and the command that
//! runs a code string or a file.

use serde::{Deserialize, Serialize};

/// A language with a preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    Javascript,
    Typescript,
    Ruby,
    Php,
    Perl,
    Lua,
    R,
    Bash,
    Sh,
    Zsh,
}

/// How to run code of one language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LanguagePreset {
    /// The language.
    pub language: Language,
    /// Names accepted for it (`python`, `py`, ...).
    pub names: &'static [&'static str],
    /// Default image when running from images.
    pub image: &'static str,
    /// Interpreter argv prefix; the code string follows `code_flag`.
    pub interpreter: &'static [&'static str],
    /// Flag that makes the interpreter take a code string (`-c`, `-e`, ...).
    pub code_flag: &'static str,
    /// File extension for code written to a file.
    pub extension: &'static str,
}

/// The table. In host-rootfs mode the first interpreter element is looked up in the
/// host's `/usr/bin` and `/bin`.
pub const PRESETS: &[LanguagePreset] = &[
    LanguagePreset {
        language: Language::Python,
        names: &["python", "python3", "py"],
        image: "python:3.12-slim",
        interpreter: &["python3"],
        code_flag: "-c",
        extension: "py",
    },
    LanguagePreset {
        language: Language::Javascript,
        names: &["javascript", "js", "node"],
        image: "node:22-slim",
        interpreter: &["node"],
        code_flag: "-e",
        extension: "js",
    },
    LanguagePreset {
        language: Language::Typescript,
        names: &["typescript", "ts"],
        image: "denoland/deno:2.1.4",
        interpreter: &["deno", "run", "--quiet"],
        code_flag: "--eval",
        extension: "ts",
    },
    LanguagePreset {
        language: Language::Ruby,
        names: &["ruby", "rb"],
        image: "ruby:3.3-slim",
        interpreter: &["ruby"],
        code_flag: "-e",
        extension: "rb",
    },
    LanguagePreset {
        language: Language::Php,
        names: &["php"],
        image: "php:8.3-cli",
        interpreter: &["php"],
        code_flag: "-r",
        extension: "php",
    },
    LanguagePreset {
        language: Language::Perl,
        names: &["perl", "pl"],
        image: "perl:5.40-slim",
        interpreter: &["perl"],
        code_flag: "-e",
        extension: "pl",
    },
    LanguagePreset {
        language: Language::Lua,
        names: &["lua"],
        image: "nickblah/lua:5.4",
        interpreter: &["lua"],
        code_flag: "-e",
        extension: "lua",
    },
    LanguagePreset {
        language: Language::R,
        names: &["r"],
        image: "r-base:4.4.1",
        interpreter: &["Rscript"],
        code_flag: "-e",
        extension: "R",
    },
    LanguagePreset {
        language: Language::Bash,
        names: &["bash"],
        image: "bash:5.2",
        interpreter: &["bash"],
        code_flag: "-c",
        extension: "sh",
    },
    LanguagePreset {
        language: Language::Sh,
        names: &["sh", "shell"],
        image: "busybox:1.36",
        interpreter: &["sh"],
        code_flag: "-c",
        extension: "sh",
    },
    LanguagePreset {
        language: Language::Zsh,
        names: &["zsh"],
        image: "zshusers/zsh:5.9",
        interpreter: &["zsh"],
        code_flag: "-c",
        extension: "zsh",
    },
];

impl LanguagePreset {
    /// Finds a preset by any of its names, case-insensitively.
    pub fn find(name: &str) -> Result<&'static LanguagePreset, String> {
        let n = name.trim().to_ascii_lowercase();
        PRESETS
            .iter()
            .find(|p| p.names.contains(&n.as_str()))
            .ok_or_else(|| {
                let known: Vec<_> = PRESETS.iter().map(|p| p.names[0]).collect();
                format!("unknown language {name:?}; known: {}", known.join(", "))
            })
    }

    /// The argv that runs `code` given as a string, with `interpreter` as argv[0].
    pub fn code_argv(&self, interpreter: &str, code: &str) -> Vec<String> {
        let mut argv = vec![interpreter.to_string()];
        argv.extend(
            self.interpreter[1..]
                .iter()
                .map(std::string::ToString::to_string),
        );
        argv.push(self.code_flag.to_string());
        argv.push(code.to_string());
        argv
    }

    /// The argv that runs the file at `path` (inside the sandbox).
    pub fn file_argv(&self, interpreter: &str, path: &str) -> Vec<String> {
        let mut argv = vec![interpreter.to_string()];
        argv.extend(
            self.interpreter[1..]
                .iter()
                .map(std::string::ToString::to_string),
        );
        argv.push(path.to_string());
        argv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_has_one_preset_and_unique_names() {
        let mut names = std::collections::HashSet::new();
        for p in PRESETS {
            for n in p.names {
                assert!(names.insert(*n), "name {n} used twice");
            }
        }
        assert_eq!(PRESETS.len(), 11);
    }

    #[test]
    fn finds_and_builds_argv() {
        let p = LanguagePreset::find("Python").unwrap();
        assert_eq!(
            p.code_argv("/usr/bin/python3", "print(1)"),
            ["/usr/bin/python3", "-c", "print(1)"]
        );
        let ts = LanguagePreset::find("ts").unwrap();
        assert_eq!(
            ts.code_argv("deno", "1"),
            ["deno", "run", "--quiet", "--eval", "1"]
        );
        let err = LanguagePreset::find("cobol").unwrap_err();
        assert!(err.contains("unknown language \"cobol\""), "{err}");
    }
}
