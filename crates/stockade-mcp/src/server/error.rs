//! Failed tool calls as the model sees them ([`ToolError`]: a code, what went wrong,
//! the policy rule if any, and what to try), and the successful result's shape.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use stockade::{Error, FileResult};

use crate::policy::Denied;
use crate::tools;

/// A failed tool call, as the model sees it: what went wrong and what to try.
#[derive(Debug, Clone)]
pub struct ToolError {
    pub code: &'static str,
    pub message: String,
    pub rule: Option<String>,
    pub fix: String,
}

/// What every tool call returns before it becomes a `CallToolResult`.
pub(super) type ToolResult = Result<CallToolResult, ToolError>;

/// What to try after an internal error.
const INTERNAL_FIX: &str = "try again; if it persists, tell the operator";

impl ToolError {
    pub(super) fn new(
        code: &'static str,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> ToolError {
        ToolError {
            code,
            message: message.into(),
            rule: None,
            fix: fix.into(),
        }
    }

    /// A bad argument: `message` names it, `fix` says what to give instead.
    pub(super) fn invalid(message: impl Into<String>, fix: impl Into<String>) -> ToolError {
        ToolError::new("invalid_arguments", message, fix)
    }

    /// The error as a tool result (`isError`, structured and as text).
    pub(super) fn result(&self) -> CallToolResult {
        let mut err = json!({"code": self.code, "message": self.message, "fix": self.fix});
        if let Some(r) = &self.rule {
            err["rule"] = json!(r);
        }
        let text = format!(
            "error ({}): {}\nwhat to try: {}",
            self.code, self.message, self.fix
        );
        let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
        r.structured_content = Some(json!({ "error": err }));
        r
    }
}

impl From<Denied> for ToolError {
    fn from(d: Denied) -> ToolError {
        ToolError {
            code: "policy_denied",
            message: format!("refused by policy rule {}: {}", d.rule, d.what),
            rule: Some(d.rule.to_string()),
            fix: d.fix,
        }
    }
}

impl From<Error> for ToolError {
    fn from(e: Error) -> ToolError {
        use stockade::ErrorCode as C;
        let fix = match (&e, e.code()) {
            (Error::Unavailable { fix, .. }, _) => fix.clone(),
            (_, C::NotFound) => "it may have ended (destroyed, lifetime over, or this client \
                                 reconnected); call sandbox_list, or sandbox_create a new one"
                .into(),
            (_, C::InvalidSpec) => "correct what the message names and call again".into(),
            (_, C::Unavailable) => "try another language or provider, or ask the operator to \
                                    fix the host (`stockade doctor`)"
                .into(),
            (_, C::LimitExceeded) => "ask for less, or destroy sandboxes you no longer need".into(),
            (_, C::PolicyDenied) => {
                "the operator's approval rules refuse this; do it another way".into()
            }
            (_, C::Timeout) => "try again; if it keeps happening, use a longer timeout".into(),
            (_, C::Internal) => INTERNAL_FIX.into(),
        };
        let rule = match &e {
            Error::PolicyDenied(m) => m.rsplit_once(" rule ").map(|(_, r)| r.trim().to_string()),
            _ => None,
        };
        ToolError {
            code: e.code().as_str(),
            message: e.to_string(),
            rule,
            fix,
        }
    }
}

/// The arguments of tool `name`, or an error naming the field that is wrong.
pub(super) fn parse<T: DeserializeOwned>(
    name: &str,
    args: Option<JsonObject>,
) -> Result<T, ToolError> {
    tools::parse(name, args).map_err(|e| {
        ToolError::invalid(
            e,
            "fix the arguments to match the tool's input schema and call again",
        )
    })
}

/// A file operation answered with a result of another kind than it asks for.
pub(super) fn unexpected(r: FileResult) -> ToolError {
    ToolError::new(
        "internal",
        format!("unexpected file operation result {r:?}"),
        INTERNAL_FIX,
    )
}

/// A successful result: structured, and a short text for the model.
pub(super) fn ok(structured: Value, text: String) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(structured);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_a_fix_and_the_rule() {
        let e: ToolError =
            Error::PolicyDenied("exec `curl x` in sandbox sb denied by rule no-curl".into()).into();
        assert_eq!(e.code, "policy_denied");
        assert_eq!(e.rule.as_deref(), Some("no-curl"));
        let r = e.result();
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.unwrap();
        assert_eq!(s["error"]["rule"], "no-curl");
        assert!(!s["error"]["fix"].as_str().unwrap().is_empty());
        let e: ToolError = Error::NotFound {
            kind: "sandbox",
            id: "x".into(),
        }
        .into();
        assert!(e.fix.contains("sandbox_list"));
    }
}
