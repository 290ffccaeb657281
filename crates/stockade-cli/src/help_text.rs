//! Every `--help` text of the CLI is made of complete sentences (issue 15: `image
//! import --help` once stopped at "Also name the imported image so").

use clap::Command;

/// Words a sentence does not end on: a text ending with one was cut off.
const DANGLING: &[&str] = &[
    "a", "an", "and", "as", "at", "by", "for", "from", "in", "into", "is", "of", "on", "or", "so",
    "than", "that", "the", "to", "which", "with",
];

/// Why `text` is not complete sentences, if it is not. Clap drops the final period of a
/// doc comment, so a text may end without one; it must not end mid-sentence.
fn incomplete(text: &str) -> Option<String> {
    let text = text.trim();
    let first = text.chars().next()?;
    if !(first.is_uppercase() || first.is_ascii_digit() || "`$(\"'".contains(first)) {
        return Some("does not start a sentence (lowercase first letter)".into());
    }
    let last = text.chars().last()?;
    if !(last.is_alphanumeric() || ".)`'\"]>".contains(last)) {
        return Some(format!("ends with {last:?}"));
    }
    let word = text
        .rsplit(|c: char| c.is_whitespace())
        .next()
        .unwrap_or_default()
        .trim_end_matches('.');
    if DANGLING.contains(&word.to_lowercase().as_str()) {
        return Some(format!("ends with {word:?}, mid-sentence"));
    }
    None
}

/// Every problem of `cmd` and its subcommands, each naming the command and the text.
pub fn problems(cmd: &Command, path: &str) -> Vec<String> {
    let path = format!("{path} {}", cmd.get_name()).trim().to_string();
    let mut out = Vec::new();
    match cmd.get_about() {
        None => out.push(format!("`{path}` has no about text")),
        Some(about) => {
            let about = about.to_string();
            if let Some(why) = incomplete(&about) {
                out.push(format!("`{path}` about {about:?} {why}"));
            }
        }
    }
    if let Some(long) = cmd.get_long_about()
        && let Some(why) = incomplete(&long.to_string())
    {
        out.push(format!("`{path}` long about {long:?} {why}"));
    }
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let name = arg.get_id().as_str();
        if name == "help" || name == "version" {
            continue;
        }
        match arg.get_help() {
            None => out.push(format!("`{path}` argument {name} has no help text")),
            Some(help) => {
                let help = help.to_string();
                if let Some(why) = incomplete(&help) {
                    out.push(format!("`{path}` argument {name}: {help:?} {why}"));
                }
            }
        }
        // clap prints `[default: X]` after the help; a text naming a default too
        // contradicts it or repeats it ("(default 1000) [default: 0]").
        let text = format!(
            "{} {}",
            arg.get_help().map(ToString::to_string).unwrap_or_default(),
            arg.get_long_help()
                .map(ToString::to_string)
                .unwrap_or_default()
        );
        if !arg.get_default_values().is_empty() && text.to_lowercase().contains("default") {
            out.push(format!(
                "`{path}` argument {name} states a default in its help and has clap's \
                 default {:?}: keep one",
                arg.get_default_values()
            ));
        }
        if arg.is_global_set() && arg.get_help_heading() != Some(crate::GLOBAL) {
            out.push(format!(
                "`{path}` global argument {name} is not under the {:?} heading",
                crate::GLOBAL
            ));
        }
        if let Some(long) = arg.get_long_help()
            && let Some(why) = incomplete(&long.to_string())
        {
            out.push(format!(
                "`{path}` argument {name}: long help {long:?} {why}"
            ));
        }
    }
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        out.extend(problems(sub, &path));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_help_text_is_complete_sentences() {
        let cmd = crate::Cli::command();
        let problems = problems(&cmd, "");
        assert!(
            problems.is_empty(),
            "help texts that are not complete sentences:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn a_cut_off_text_is_caught() {
        assert!(incomplete("Also name the imported image so").is_some());
        assert!(incomplete("the lowercase start").is_some());
        assert!(incomplete("Ends with a comma,").is_some());
        assert_eq!(incomplete("Name the imported image (repeatable)"), None);
        assert_eq!(incomplete("List the images in the store."), None);
    }

    #[test]
    fn a_default_stated_twice_is_caught() {
        let cmd = clap::Command::new("t").about("A test.").arg(
            clap::Arg::new("max")
                .long("max")
                .help("Most matches (default 1000)")
                .default_value("0"),
        );
        let found = problems(&cmd, "");
        assert!(
            found.iter().any(|p| p.contains("states a default")),
            "{found:?}"
        );
    }
}
