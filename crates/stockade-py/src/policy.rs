//! An approval policy from Python: the SDK's `Approval` and `Rule` dataclasses, read
//! by attribute.

use pyo3::prelude::*;
use stockade::{Action, Error, Policy, Rule, RuleTarget, Verdict};

use crate::errors::to_py;

/// `stockade.Approval`: `default` and each rule's `verdict` are `allow`, `deny` or
/// `ask`; `ask(sandbox_id, kind, subject) -> bool` decides `ask` (an exception denies).
#[derive(FromPyObject)]
pub struct Approval {
    #[pyo3(attribute)]
    default: String,
    #[pyo3(attribute)]
    rules: Vec<ApprovalRule>,
    #[pyo3(attribute)]
    ask: Option<Py<PyAny>>,
}

/// `stockade.Rule`: `pattern` (a regex) against an exec's argv or a write's path;
/// `target` is `exec`, `write` or `any`.
#[derive(FromPyObject)]
struct ApprovalRule {
    #[pyo3(attribute)]
    name: String,
    #[pyo3(attribute)]
    target: String,
    #[pyo3(attribute)]
    pattern: String,
    #[pyo3(attribute)]
    verdict: String,
}

fn verdict(v: &str) -> PyResult<Verdict> {
    match v {
        "allow" => Ok(Verdict::Allow),
        "deny" => Ok(Verdict::Deny),
        "ask" => Ok(Verdict::Ask),
        other => Err(to_py(Error::InvalidRequest(format!(
            "approval verdict {other:?} is not allow, deny or ask"
        )))),
    }
}

impl Approval {
    /// The core's policy.
    pub fn into_policy(self) -> PyResult<Policy> {
        let mut p = Policy::new(verdict(&self.default)?);
        for r in self.rules {
            let target = match r.target.as_str() {
                "exec" => RuleTarget::Exec,
                "write" => RuleTarget::FileWrite,
                "any" => RuleTarget::Any,
                other => {
                    return Err(to_py(Error::InvalidRequest(format!(
                        "approval rule {:?} has target {other:?}; use exec, write or any",
                        r.name
                    ))));
                }
            };
            let rule = Rule::new(&r.name, target, &r.pattern, verdict(&r.verdict)?);
            p = p.rule(rule.map_err(to_py)?);
        }
        if let Some(cb) = self.ask {
            p = p.ask_with(move |sandbox, action| {
                let kind = match action {
                    Action::Exec(_) => "exec",
                    Action::FileWrite(_) => "write",
                };
                Python::attach(|py| {
                    cb.call1(py, (sandbox, kind, action.subject()))
                        .and_then(|v| v.is_truthy(py))
                        .unwrap_or_else(|e| {
                            e.print(py);
                            false
                        })
                })
            });
        }
        Ok(p)
    }
}
