//! Approval: a policy consulted before each exec and file write, so a human (or any
//! callback) can stay in the loop. A denial is a `PolicyDenied` error naming the rule.

use std::fmt;
use std::sync::Arc;

use regex::Regex;

use crate::{Error, ExecRequest, FileOp, Result};

/// What is about to happen.
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    /// An exec with this request.
    Exec(&'a ExecRequest),
    /// A file operation that changes files.
    FileWrite(&'a FileOp),
}

impl Action<'_> {
    /// The text rules match against: the argv joined by spaces, or the path.
    pub fn subject(&self) -> String {
        match self {
            Action::Exec(r) => r.argv.join(" "),
            Action::FileWrite(op) => op.path().to_string(),
        }
    }
}

impl fmt::Display for Action<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Exec(_) => write!(f, "exec `{}`", self.subject()),
            Action::FileWrite(_) => write!(f, "write to {}", self.subject()),
        }
    }
}

/// What a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleTarget {
    Exec,
    FileWrite,
    Any,
}

/// What a matching rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny,
    /// Ask the policy's callback (a human, typically); no callback means deny.
    Ask,
}

/// One rule: a name (reported on denial), a target, a regex on the subject, a verdict.
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub target: RuleTarget,
    pub pattern: Regex,
    pub verdict: Verdict,
}

impl Rule {
    /// A rule; fails on a bad regex.
    pub fn new(name: &str, target: RuleTarget, pattern: &str, verdict: Verdict) -> Result<Rule> {
        let pattern = Regex::new(pattern).map_err(|e| {
            Error::InvalidRequest(format!("rule {name}: bad pattern {pattern:?}: {e}"))
        })?;
        Ok(Rule {
            name: name.into(),
            target,
            pattern,
            verdict,
        })
    }

    fn matches(&self, action: &Action<'_>) -> bool {
        let target_ok = matches!(
            (self.target, action),
            (RuleTarget::Any, _)
                | (RuleTarget::Exec, Action::Exec(_))
                | (RuleTarget::FileWrite, Action::FileWrite(_))
        );
        target_ok && self.pattern.is_match(&action.subject())
    }
}

/// Callback asked for `Ask` verdicts: gets the sandbox id and the action, returns
/// whether to allow it.
pub type AskFn = dyn Fn(&str, &Action<'_>) -> bool + Send + Sync;

/// Ordered rules (first match wins) and a default verdict for everything else.
#[derive(Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    default: Verdict,
    ask: Option<Arc<AskFn>>,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("rules", &self.rules)
            .field("default", &self.default)
            .field("ask", &self.ask.is_some())
            .finish()
    }
}

impl Policy {
    /// A policy with `default` for actions no rule matches.
    pub fn new(default: Verdict) -> Policy {
        Policy {
            rules: Vec::new(),
            default,
            ask: None,
        }
    }

    /// Adds a rule (after the existing ones).
    pub fn rule(mut self, rule: Rule) -> Policy {
        self.rules.push(rule);
        self
    }

    /// Sets the callback for `Ask`.
    pub fn ask_with(
        mut self,
        f: impl Fn(&str, &Action<'_>) -> bool + Send + Sync + 'static,
    ) -> Policy {
        self.ask = Some(Arc::new(f));
        self
    }

    /// Decides; `Err(PolicyDenied)` names the rule that refused.
    pub fn check(&self, sandbox: &str, action: &Action<'_>) -> Result<()> {
        let (name, verdict) = match self.rules.iter().find(|r| r.matches(action)) {
            Some(r) => (r.name.as_str(), r.verdict),
            None => ("default", self.default),
        };
        let allowed = match verdict {
            Verdict::Allow => true,
            Verdict::Deny => false,
            Verdict::Ask => self.ask.as_ref().is_some_and(|f| f(sandbox, action)),
        };
        if allowed {
            Ok(())
        } else {
            let how = if verdict == Verdict::Ask {
                "not approved under"
            } else {
                "denied by"
            };
            Err(Error::PolicyDenied(format!(
                "{action} in sandbox {sandbox} {how} rule {name}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn first_matching_rule_decides_and_denials_name_the_rule() {
        let asked = Arc::new(AtomicUsize::new(0));
        let a = asked.clone();
        let p = Policy::new(Verdict::Allow)
            .rule(Rule::new("no-curl", RuleTarget::Exec, r"\bcurl\b", Verdict::Deny).unwrap())
            .rule(Rule::new("human-for-rm", RuleTarget::Exec, r"^rm ", Verdict::Ask).unwrap())
            .rule(
                Rule::new(
                    "etc-is-off-limits",
                    RuleTarget::FileWrite,
                    r"^/etc/",
                    Verdict::Deny,
                )
                .unwrap(),
            )
            .ask_with(move |_, action| {
                a.fetch_add(1, Ordering::SeqCst);
                action.subject().contains("/tmp/")
            });
        let exec = |argv: &[&str]| ExecRequest::new(argv.to_vec());
        p.check("sb", &Action::Exec(&exec(&["ls"]))).unwrap();
        let e = p
            .check("sb", &Action::Exec(&exec(&["curl", "x"])))
            .unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::PolicyDenied);
        assert!(e.to_string().contains("rule no-curl"), "{e}");
        p.check("sb", &Action::Exec(&exec(&["rm", "/tmp/a"])))
            .unwrap();
        let e = p
            .check("sb", &Action::Exec(&exec(&["rm", "/work/a"])))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("not approved under rule human-for-rm"),
            "{e}"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        let w = FileOp::Write {
            path: "/etc/x".into(),
            data: vec![],
            mode: None,
        };
        assert!(
            p.check("sb", &Action::FileWrite(&w))
                .unwrap_err()
                .to_string()
                .contains("etc-is-off-limits")
        );
        assert!(
            Policy::new(Verdict::Ask)
                .check("sb", &Action::Exec(&exec(&["ls"])))
                .is_err(),
            "ask without a callback denies"
        );
    }
}
