//! Walking a sandbox's directories, and the glob and grep built on it.

use std::path::{Path, PathBuf};

use cap_std::fs::Dir;
use stockade_core::{Error, Result};

use super::path::{dot_if_empty, kind_of, map_io, resolve};
use super::{FileKind, GrepMatch, MAX_WALK_ENTRIES};
use crate::WasmProvider;

/// Files larger than this are not searched by grep.
const MAX_GREP_FILE_BYTES: u64 = 16 << 20;
/// Longest line grep returns (longer lines are cut, on a character boundary).
const MAX_GREP_LINE_CHARS: usize = 1000;

/// Every entry below `rel` in `dir` (not following symlinks), as paths relative to
/// `rel`, each with whether it is a regular file.
pub(super) fn walk(dir: &Dir, rel: &Path, guest: &str) -> Result<Vec<(PathBuf, FileKind)>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(sub) = stack.pop() {
        let here = rel.join(&sub);
        let rd = dir
            .read_dir(dot_if_empty(&here))
            .map_err(|e| map_io("list", guest, e))?;
        for entry in rd.flatten() {
            let Ok(ft) = entry.file_type() else { continue };
            let path = sub.join(entry.file_name());
            let kind = kind_of(ft);
            if kind == FileKind::Dir {
                stack.push(path.clone());
            }
            out.push((path, kind));
            if out.len() > MAX_WALK_ENTRIES {
                return Err(Error::LimitExceeded {
                    what: format!("entries under {guest}"),
                    limit: MAX_WALK_ENTRIES.to_string(),
                });
            }
        }
    }
    // Paths are unique, so ordering by path alone is total.
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn join_guest(base: &str, rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        return base.to_string();
    }
    let b = base.trim_end_matches('/');
    format!("{b}/{}", rel.to_string_lossy())
}

fn glob_matcher(pattern: &str) -> Result<globset::GlobMatcher> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| Error::InvalidRequest(format!("glob {pattern:?} is invalid: {e}")))
}

/// Splits an absolute glob into the literal directory it starts from and the rest.
fn split_glob(pattern: &str) -> (String, String) {
    let is_meta = |s: &str| s.contains(['*', '?', '[', '{']);
    let mut root = Vec::new();
    let mut parts = pattern.split('/').filter(|s| !s.is_empty()).peekable();
    while let Some(p) = parts.peek() {
        if is_meta(p) {
            break;
        }
        root.push(*p);
        parts.next();
    }
    let rest: Vec<&str> = parts.collect();
    if rest.is_empty() {
        // No wildcard: the last component is the pattern itself.
        let last = root.pop().unwrap_or("");
        return (format!("/{}", root.join("/")), last.to_string());
    }
    (format!("/{}", root.join("/")), rest.join("/"))
}

fn cut_line(line: &str) -> String {
    match line.char_indices().nth(MAX_GREP_LINE_CHARS) {
        Some((i, _)) => line[..i].to_string(),
        None => line.to_string(),
    }
}

impl WasmProvider {
    /// Sandbox paths matching `pattern`, sorted. A relative pattern is matched below
    /// `root` (default: the workdir); an absolute one below its literal leading
    /// directories. `*` stays within one directory, `**` crosses them.
    pub async fn glob(&self, id: &str, pattern: &str, root: Option<&str>) -> Result<Vec<String>> {
        let (pattern, root) = (pattern.to_string(), root.map(str::to_string));
        self.fs_op(id, move |sb| {
            let (root, pattern) = if pattern.starts_with('/') {
                split_glob(&pattern)
            } else {
                (root.unwrap_or_else(|| sb.workdir.clone()), pattern)
            };
            let matcher = glob_matcher(&pattern)?;
            let r = resolve(sb, &root)?;
            let dir = r.dir()?;
            Ok(walk(&dir, &r.rel, &r.guest)?
                .into_iter()
                .filter(|(p, _)| matcher.is_match(p))
                .map(|(p, _)| join_guest(&r.guest, &p))
                .collect())
        })
        .await
    }

    /// Lines matching `regex` in the files under `root` (a directory or one file;
    /// default: the workdir) whose relative path matches `glob` when given. At most
    /// `max_matches` lines; binary files and files over 16 MiB are skipped.
    pub async fn grep(
        &self,
        id: &str,
        regex: &str,
        root: Option<&str>,
        glob: Option<&str>,
        max_matches: usize,
    ) -> Result<Vec<GrepMatch>> {
        let re = regex::Regex::new(regex)
            .map_err(|e| Error::InvalidRequest(format!("regex {regex:?} is invalid: {e}")))?;
        let filter = glob.map(glob_matcher).transpose()?;
        let root = root.map(str::to_string);
        self.fs_op(id, move |sb| {
            let root = root.unwrap_or_else(|| sb.workdir.clone());
            let r = resolve(sb, &root)?;
            let dir = r.dir()?;
            let md = dir.metadata(r.at()).map_err(|e| r.err("search", e))?;
            let files: Vec<(PathBuf, String)> = if md.is_file() {
                vec![(r.rel.clone(), r.guest.clone())]
            } else {
                walk(&dir, &r.rel, &r.guest)?
                    .into_iter()
                    .filter(|(p, k)| {
                        *k == FileKind::File && filter.as_ref().is_none_or(|f| f.is_match(p))
                    })
                    .map(|(p, _)| (r.rel.join(&p), join_guest(&r.guest, &p)))
                    .collect()
            };
            let mut out = Vec::new();
            for (rel, guest) in files {
                let Ok(md) = dir.metadata(&rel) else { continue };
                if md.len() > MAX_GREP_FILE_BYTES {
                    continue;
                }
                let Ok(bytes) = dir.read(&rel) else { continue };
                if bytes[..bytes.len().min(8192)].contains(&0) {
                    continue;
                }
                let text = String::from_utf8_lossy(&bytes);
                for (i, line) in text.lines().enumerate() {
                    if re.is_match(line) {
                        out.push(GrepMatch {
                            path: guest.clone(),
                            line_number: i as u64 + 1,
                            line: cut_line(line),
                        });
                        if out.len() >= max_matches {
                            return Ok(out);
                        }
                    }
                }
            }
            Ok(out)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_absolute_globs() {
        assert_eq!(
            split_glob("/tmp/**/*.py"),
            ("/tmp".into(), "**/*.py".into())
        );
        assert_eq!(split_glob("/data/a.txt"), ("/data".into(), "a.txt".into()));
        assert_eq!(split_glob("/*.txt"), ("/".into(), "*.txt".into()));
    }

    #[test]
    fn cuts_long_lines_on_char_boundaries() {
        let long = "é".repeat(MAX_GREP_LINE_CHARS + 5);
        assert_eq!(cut_line(&long).chars().count(), MAX_GREP_LINE_CHARS);
    }
}
