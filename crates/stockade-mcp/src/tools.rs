//! The tools: their JSON schemas and descriptions (written for a model), and the
//! argument types they are parsed into. Arguments are parsed strictly (unknown fields
//! refused), and a bad argument becomes a tool error naming the field, so the model
//! can correct itself.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::policy::OperatorPolicy;

/// `run_code`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCode {
    pub language: String,
    pub code: String,
    pub timeout: Option<f64>,
    #[serde(default)]
    pub stdin: Option<String>,
}

/// One mount asked for by `sandbox_create`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountArg {
    pub host: String,
    pub target: String,
    #[serde(default)]
    pub writable: bool,
}

/// `sandbox_create`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxCreate {
    pub provider: Option<String>,
    pub image: Option<String>,
    pub memory: Option<String>,
    pub cpus: Option<f64>,
    pub lifetime: Option<u64>,
    pub network: Option<String>,
    #[serde(default)]
    pub writable_root: bool,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub mounts: Vec<MountArg>,
    pub workdir: Option<String>,
}

/// `sandbox_exec`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxExec {
    pub sandbox_id: String,
    pub command: String,
    pub timeout: Option<f64>,
    pub stdin: Option<String>,
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// `session_exec`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionExec {
    pub name: String,
    pub command: String,
    pub timeout: Option<f64>,
    pub stdin: Option<String>,
}

/// Tools naming only a sandbox (`sandbox_destroy`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxRef {
    pub sandbox_id: String,
}

/// No arguments (`sandbox_list`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nothing {}

/// `read_file`.
#[derive(Debug, Deserialize)]
pub struct ReadFile {
    #[serde(flatten)]
    pub at: TargetFields,
    pub path: String,
    #[serde(default)]
    pub offset: u64,
    pub limit: Option<u64>,
}

/// Where a file tool works: a sandbox, or a session's sandbox. Flattened into each
/// file tool (serde cannot combine `flatten` with `deny_unknown_fields`: [`parse`]
/// refuses unknown fields from the schema instead).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TargetFields {
    pub sandbox_id: Option<String>,
    pub session: Option<String>,
}

/// `write_file`.
#[derive(Debug, Deserialize)]
pub struct WriteFile {
    #[serde(flatten)]
    pub at: TargetFields,
    pub path: String,
    pub content: String,
}

/// `edit_file`.
#[derive(Debug, Deserialize)]
pub struct EditFile {
    #[serde(flatten)]
    pub at: TargetFields,
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// `list_dir`.
#[derive(Debug, Deserialize)]
pub struct ListDir {
    #[serde(flatten)]
    pub at: TargetFields,
    pub path: Option<String>,
}

/// `glob`.
#[derive(Debug, Deserialize)]
pub struct Glob {
    #[serde(flatten)]
    pub at: TargetFields,
    pub pattern: String,
    pub root: Option<String>,
}

/// `grep`.
#[derive(Debug, Deserialize)]
pub struct Grep {
    #[serde(flatten)]
    pub at: TargetFields,
    pub pattern: String,
    pub root: Option<String>,
    pub include: Option<String>,
    pub max_matches: Option<u32>,
}

/// `terminal_open`.
#[derive(Debug, Deserialize)]
pub struct TerminalOpen {
    #[serde(flatten)]
    pub at: TargetFields,
    pub command: Option<String>,
    pub rows: Option<u16>,
    pub cols: Option<u16>,
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub wait: Option<f64>,
}

/// `terminal_send`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalSend {
    pub terminal_id: String,
    pub input: Option<String>,
    pub until: Option<String>,
    pub wait: Option<f64>,
    pub rows: Option<u16>,
    pub cols: Option<u16>,
}

/// `terminal_close`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalRef {
    pub terminal_id: String,
}

/// Parses `args` as `T`, refusing fields the tool's schema does not have; the error
/// names the tool, the field and what the schema says.
pub fn parse<T: DeserializeOwned>(
    tool: &str,
    args: Option<serde_json::Map<String, Value>>,
) -> Result<T, String> {
    let args = args.unwrap_or_default();
    if let Some(def) = definitions(None).into_iter().find(|d| d["name"] == tool) {
        let props = &def["inputSchema"]["properties"];
        if let Some(bad) = args.keys().find(|k| props.get(k.as_str()).is_none()) {
            let known: Vec<&String> = props
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            return Err(format!(
                "invalid arguments for {tool}: unknown field `{bad}`; the fields are: {}",
                known
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    serde_json::from_value(Value::Object(args)).map_err(|e| {
        format!("invalid arguments for {tool}: {e}; see the tool's input schema and call again")
    })
}

const TARGET_DOC: &str = "Give exactly one of sandbox_id (from sandbox_create) or \
                          session (a persistent workspace name, as in session_exec).";

fn target_props() -> serde_json::Map<String, Value> {
    let v = json!({
        "sandbox_id": {"type": "string", "description": "Id of a sandbox this client created (sandbox_create)."},
        "session": {"type": "string", "description": "Name of a persistent session instead of a sandbox id; its workspace is /work."},
    });
    match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

fn with_target(mut props: Value) -> Value {
    if let Value::Object(m) = &mut props {
        m.extend(target_props());
    }
    props
}

/// The structured result of every exec tool.
fn exec_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "exit_code": {"type": "integer", "description": "Exit code; 128+N when killed by signal N."},
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "truncated": {"type": "boolean", "description": "Output was longer than the cap; the middle was dropped, head and tail kept."},
            "timed_out": {"type": "boolean", "description": "The deadline passed and everything the command started was killed."},
            "oom_killed": {"type": "boolean", "description": "The memory limit was hit and the kernel killed a process."},
            "signal": {"type": ["integer", "null"]},
            "duration_ms": {"type": "integer"},
            "sandbox_id": {"type": "string"}
        },
        "required": ["exit_code", "stdout", "stderr", "truncated", "timed_out", "oom_killed", "duration_ms"]
    })
}

/// The structured error every tool returns with `isError` (see `server::ToolError`).
fn error_schema() -> Value {
    json!({
        "type": "object",
        "description": "Present only when the call failed (isError).",
        "properties": {
            "code": {"type": "string", "description": "invalid_arguments, policy_denied, not_found, unavailable, limit_exceeded, timeout, invalid_spec or internal."},
            "message": {"type": "string"},
            "rule": {"type": "string", "description": "The operator policy rule that refused the call."},
            "fix": {"type": "string", "description": "What to try instead."}
        },
        "required": ["code", "message", "fix"]
    })
}

/// `schema` accepting either its own shape or `{"error": ...}`: a failed call's
/// structured content must validate against the declared output schema too.
fn or_error(mut schema: Value) -> Value {
    let required = schema["required"].take();
    if let Value::Object(m) = &mut schema {
        m.remove("required");
        if let Some(Value::Object(props)) = m.get_mut("properties") {
            props.insert("error".into(), error_schema());
        }
        m.insert(
            "anyOf".into(),
            json!([{"required": required}, {"required": ["error"]}]),
        );
    }
    schema
}

/// Every tool definition (as MCP `Tool` JSON), the language enum and limits taken
/// from `policy` when given.
pub fn definitions(policy: Option<&OperatorPolicy>) -> Vec<Value> {
    let languages: Vec<String> = match policy {
        Some(p) => p.languages.clone(),
        None => stockade::spec::PRESETS
            .iter()
            .map(|p| p.names[0].to_string())
            .collect(),
    };
    let max_timeout = policy.map(|p| p.max_exec_timeout_secs).unwrap_or(600);
    let timeout = json!({
        "type": "number", "exclusiveMinimum": 0, "maximum": max_timeout,
        "description": format!("Deadline in seconds (default 60, at most {max_timeout}); at it everything the command started is killed and timed_out is true.")
    });
    let stdin = json!({"type": "string", "description": "Text fed to the command's standard input (then closed)."});
    let exec_out = or_error(exec_output_schema());
    let readonly = json!({"readOnlyHint": true, "openWorldHint": false});
    vec![
        json!({
            "name": "run_code",
            "title": "Run code in a fresh sandbox",
            "description": "Run a snippet of code in a fresh, isolated sandbox and return its exit code, stdout and stderr. The sandbox has no network, a read-only filesystem except /tmp, and memory/CPU/process limits; it is destroyed afterwards, so nothing persists between calls (use sandbox_create or session_exec for that). Print what you want to see.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "language": {"type": "string", "enum": languages, "description": "Language of the code."},
                    "code": {"type": "string", "description": "The program text."},
                    "timeout": timeout,
                    "stdin": stdin,
                },
                "required": ["language", "code"],
                "additionalProperties": false
            },
            "outputSchema": exec_out,
            "annotations": {"openWorldHint": false}
        }),
        json!({
            "name": "sandbox_create",
            "title": "Create a sandbox",
            "description": "Create an isolated Linux sandbox that stays alive for later sandbox_exec and file calls, and return its sandbox_id. Defaults are the secure ones: no network, read-only root with a writable /tmp (the working directory), 512 MiB memory, 1 CPU, 64 processes, a 5-minute lifetime. Every option is an opt-out the operator may refuse; a refusal names the rule and the allowed values. The sandbox is destroyed with sandbox_destroy, at the end of its lifetime, or when this client disconnects.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "provider": {"type": "string", "enum": policy.map(|p| p.providers.clone()).unwrap_or_else(|| stockade::PROVIDERS.iter().map(std::string::ToString::to_string).collect()), "description": "Isolation backend (default: the operator's first)."},
                    "image": {"type": "string", "description": "OCI image reference to use as the root filesystem (default: the host's tools, read-only). Only images the operator allows."},
                    "memory": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?[kKmMgG]?[iI]?[bB]?$", "description": "Memory limit such as 256m or 1g (default 512m)."},
                    "cpus": {"type": "number", "exclusiveMinimum": 0, "description": "CPU quota in CPUs (default 1)."},
                    "lifetime": {"type": "integer", "minimum": 1, "description": "Seconds until the sandbox is destroyed (default 300)."},
                    "network": {"type": "string", "enum": ["none", "egress"], "description": "none (default): loopback only. egress: outbound internet, if the operator allows it."},
                    "writable_root": {"type": "boolean", "description": "Make the whole root writable (changes are discarded with the sandbox). Default false: only /tmp and writable mounts."},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Environment variables for every command."},
                    "mounts": {
                        "type": "array",
                        "description": "Host directories to mount; only those the operator allows.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "host": {"type": "string", "description": "Absolute host path."},
                                "target": {"type": "string", "description": "Absolute path inside the sandbox."},
                                "writable": {"type": "boolean", "description": "Default false (read-only)."}
                            },
                            "required": ["host", "target"],
                            "additionalProperties": false
                        }
                    },
                    "workdir": {"type": "string", "description": "Working directory of commands (default /tmp)."}
                },
                "additionalProperties": false
            },
            "outputSchema": or_error(json!({
                "type": "object",
                "properties": {
                    "sandbox_id": {"type": "string"},
                    "provider": {"type": "string"},
                    "expires_at_ms": {"type": "integer"},
                    "applied": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "kind": {"type": "string"},
                            "enforced": {"type": "boolean"},
                            "detail": {"type": "string"}
                        },
                        "required": ["kind", "enforced", "detail"]
                    }}
                },
                "required": ["sandbox_id", "provider", "expires_at_ms"]
            }))
        }),
        json!({
            "name": "sandbox_exec",
            "title": "Run a command in a sandbox",
            "description": "Run a shell command (with /bin/sh -c) in a sandbox from sandbox_create and return its exit code, stdout and stderr. Files written persist in the sandbox between calls (in /tmp or writable mounts). A non-zero exit is a normal result, not an error.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "sandbox_id": {"type": "string", "description": "Id from sandbox_create."},
                    "command": {"type": "string", "description": "Shell command line, e.g. \"ls -la && python3 main.py\"."},
                    "timeout": timeout,
                    "stdin": stdin,
                    "cwd": {"type": "string", "description": "Absolute working directory (default: the sandbox's)."},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables."}
                },
                "required": ["sandbox_id", "command"],
                "additionalProperties": false
            },
            "outputSchema": exec_out,
            "annotations": {"openWorldHint": false}
        }),
        json!({
            "name": "sandbox_destroy",
            "title": "Destroy a sandbox",
            "description": "Destroy a sandbox from sandbox_create: every process in it is killed and its files are gone. Idempotent.",
            "inputSchema": {
                "type": "object",
                "properties": {"sandbox_id": {"type": "string", "description": "Id from sandbox_create."}},
                "required": ["sandbox_id"],
                "additionalProperties": false
            },
            "annotations": {"destructiveHint": true, "idempotentHint": true, "openWorldHint": false}
        }),
        json!({
            "name": "sandbox_list",
            "title": "List my sandboxes",
            "description": "List the live sandboxes this client created, with their ids and when they expire.",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false},
            "outputSchema": or_error(json!({
                "type": "object",
                "properties": {
                    "sandboxes": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "sandbox_id": {"type": "string"},
                            "provider": {"type": "string"},
                            "image": {"type": ["string", "null"]},
                            "created_at_ms": {"type": "integer"},
                            "expires_at_ms": {"type": "integer"}
                        },
                        "required": ["sandbox_id", "provider", "created_at_ms", "expires_at_ms"]
                    }}
                },
                "required": ["sandboxes"]
            })),
            "annotations": readonly
        }),
        json!({
            "name": "session_exec",
            "title": "Run a command in a persistent session",
            "description": "Run a shell command in the named persistent session: a workspace directory mounted read-write at /work (the working directory) that keeps its files across calls, restarts and disconnects. The session's sandbox is created on first use and stops after 10 idle minutes; the workspace stays. Use it for multi-step work such as writing files and then running them.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,39}$", "description": "Session name (1-40 of A-Z a-z 0-9 . _ -)."},
                    "command": {"type": "string", "description": "Shell command line, run with /bin/sh -c in /work."},
                    "timeout": timeout,
                    "stdin": stdin
                },
                "required": ["name", "command"],
                "additionalProperties": false
            },
            "outputSchema": exec_out,
            "annotations": {"openWorldHint": false}
        }),
        json!({
            "name": "read_file",
            "title": "Read a file",
            "description": format!("Read a text file in a sandbox (as the sandbox user). Returns the content (from offset, at most limit bytes, default 1 MiB) and the file's size. {TARGET_DOC}"),
            "inputSchema": {
                "type": "object",
                "properties": with_target(json!({
                    "path": {"type": "string", "description": "Path inside the sandbox; relative paths are relative to its working directory."},
                    "offset": {"type": "integer", "minimum": 0, "description": "Byte offset to start at (default 0)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": stockade::files::MAX_FILE_BYTES, "description": "Most bytes to return (default 1 MiB)."}
                })),
                "required": ["path"],
                "additionalProperties": false
            },
            "annotations": readonly
        }),
        json!({
            "name": "write_file",
            "title": "Write a file",
            "description": format!("Create or replace a text file in a sandbox (parent directories are created). Only writable places work: /tmp, writable mounts, a session's /work. {TARGET_DOC}"),
            "inputSchema": {
                "type": "object",
                "properties": with_target(json!({
                    "path": {"type": "string", "description": "Path inside the sandbox."},
                    "content": {"type": "string", "description": "The whole new content."}
                })),
                "required": ["path", "content"],
                "additionalProperties": false
            },
            "annotations": {"destructiveHint": true, "openWorldHint": false}
        }),
        json!({
            "name": "edit_file",
            "title": "Edit a file",
            "description": format!("Replace old_string with new_string in a file in a sandbox. old_string must occur exactly once unless replace_all is true; returns the number of replacements. {TARGET_DOC}"),
            "inputSchema": {
                "type": "object",
                "properties": with_target(json!({
                    "path": {"type": "string"},
                    "old_string": {"type": "string", "minLength": 1, "description": "Exact text to replace."},
                    "new_string": {"type": "string", "description": "Replacement text."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."}
                })),
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            },
            "annotations": {"destructiveHint": true, "openWorldHint": false}
        }),
        json!({
            "name": "list_dir",
            "title": "List a directory",
            "description": format!("List a directory in a sandbox: name, kind (file, dir, symlink), size and mode of each entry. {TARGET_DOC}"),
            "inputSchema": {
                "type": "object",
                "properties": with_target(json!({
                    "path": {"type": "string", "description": "Directory (default: the working directory)."}
                })),
                "additionalProperties": false
            },
            "annotations": readonly
        }),
        json!({
            "name": "glob",
            "title": "Find files by pattern",
            "description": format!("Find paths below root matching a glob pattern such as **/*.py; returns them relative to root, sorted. {TARGET_DOC}"),
            "inputSchema": {
                "type": "object",
                "properties": with_target(json!({
                    "pattern": {"type": "string", "description": "Glob pattern, e.g. **/*.rs."},
                    "root": {"type": "string", "description": "Directory to search (default: the working directory)."}
                })),
                "required": ["pattern"],
                "additionalProperties": false
            },
            "annotations": readonly
        }),
        json!({
            "name": "grep",
            "title": "Search file contents",
            "description": format!("Search files below root for lines matching a regular expression; returns path, line number and line of each match. {TARGET_DOC}"),
            "inputSchema": {
                "type": "object",
                "properties": with_target(json!({
                    "pattern": {"type": "string", "description": "Regular expression (Rust regex syntax)."},
                    "root": {"type": "string", "description": "Directory to search (default: the working directory)."},
                    "include": {"type": "string", "description": "Only files whose path matches this glob, e.g. *.py."},
                    "max_matches": {"type": "integer", "minimum": 1, "maximum": stockade::files::DEFAULT_GREP_MATCHES, "description": "Most matches returned (default 1000)."}
                })),
                "required": ["pattern"],
                "additionalProperties": false
            },
            "annotations": readonly
        }),
        json!({
            "name": "terminal_open",
            "title": "Open a terminal",
            "description": format!("Start an interactive program on a terminal in a sandbox and keep it for terminal_send: a shell (the default, /bin/sh), a REPL such as python3, or any program that asks questions. Returns its terminal_id and what it printed first. Use it for programs that need a terminal or a conversation; for one command use sandbox_exec. Every line typed is checked by the same rules as sandbox_exec. It ends when its program exits, at its deadline ({max_timeout} s), with its sandbox, or when this client disconnects. {TARGET_DOC}"),
            "inputSchema": {
                "type": "object",
                "properties": with_target(json!({
                    "command": {"type": "string", "description": "Program to run on the terminal, as a shell command line (default /bin/sh)."},
                    "rows": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Terminal height (default 24)."},
                    "cols": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Terminal width (default 80)."},
                    "cwd": {"type": "string", "description": "Absolute working directory (default: the sandbox's)."},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables."},
                    "wait": {"type": "number", "minimum": 0, "maximum": 60, "description": "Seconds to wait for its first output (default 1)."}
                })),
                "additionalProperties": false
            },
            "outputSchema": or_error(terminal_output_schema()),
            "annotations": {"openWorldHint": false}
        }),
        json!({
            "name": "terminal_send",
            "title": "Type into a terminal",
            "description": "Type input into a terminal from terminal_open and return what it printed since the last call (escape sequences removed). End a command with \\n. Control keys are characters: \\u0003 is Ctrl-C, \\u0004 Ctrl-D, \\u001b[A the up arrow. Without until, it returns once the output settles (or after wait seconds, default 2); with until, once that text appears (or after wait, default 10). Send no input to just read. exited is true once the program has ended.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "terminal_id": {"type": "string", "description": "Id from terminal_open."},
                    "input": {"type": "string", "description": "Text typed, exactly (add \\n to press Enter)."},
                    "until": {"type": "string", "description": "Wait until this text appears in the output (a prompt, say)."},
                    "wait": {"type": "number", "minimum": 0, "maximum": 60, "description": "Most seconds to wait for output."},
                    "rows": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Resize the terminal to this height."},
                    "cols": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Resize the terminal to this width."}
                },
                "required": ["terminal_id"],
                "additionalProperties": false
            },
            "outputSchema": or_error(terminal_output_schema()),
            "annotations": {"openWorldHint": false}
        }),
        json!({
            "name": "terminal_close",
            "title": "Close a terminal",
            "description": "Close a terminal from terminal_open: its program and everything it started are killed. Returns any output not yet read.",
            "inputSchema": {
                "type": "object",
                "properties": {"terminal_id": {"type": "string", "description": "Id from terminal_open."}},
                "required": ["terminal_id"],
                "additionalProperties": false
            },
            "annotations": {"destructiveHint": true, "openWorldHint": false}
        }),
    ]
}

/// What `terminal_open` and `terminal_send` return.
fn terminal_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "terminal_id": {"type": "string"},
            "output": {"type": "string"},
            "exited": {"type": "boolean"},
            "exit_code": {"type": "integer"},
            "found": {"type": "boolean"},
            "dropped_bytes": {"type": "integer"},
            "sandbox_id": {"type": "string"},
            "error": {"type": "string"}
        },
        "required": ["terminal_id", "output", "exited"]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_strict_object_schema_and_a_description() {
        let defs = definitions(None);
        let names: Vec<&str> = defs.iter().map(|d| d["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "run_code",
                "sandbox_create",
                "sandbox_exec",
                "sandbox_destroy",
                "sandbox_list",
                "session_exec",
                "read_file",
                "write_file",
                "edit_file",
                "list_dir",
                "glob",
                "grep",
                "terminal_open",
                "terminal_send",
                "terminal_close"
            ]
        );
        for d in &defs {
            let s = &d["inputSchema"];
            assert_eq!(s["type"], "object", "{}", d["name"]);
            assert_eq!(s["additionalProperties"], false, "{}", d["name"]);
            assert!(d["description"].as_str().unwrap().len() > 40);
            for r in s["required"].as_array().into_iter().flatten() {
                assert!(
                    s["properties"].get(r.as_str().unwrap()).is_some(),
                    "{} requires unknown {r}",
                    d["name"]
                );
            }
            let _: rmcp::model::Tool = serde_json::from_value(d.clone()).unwrap();
        }
    }

    #[test]
    fn bad_arguments_name_the_field() {
        let args = |v: Value| match v {
            Value::Object(m) => Some(m),
            _ => None,
        };
        let e =
            parse::<RunCode>("run_code", args(json!({"lang": "python", "code": "1"}))).unwrap_err();
        assert!(e.contains("unknown field `lang`"), "{e}");
        assert!(e.contains("`language`"), "{e}");
        let e = parse::<RunCode>("run_code", args(json!({"language": "python"}))).unwrap_err();
        assert!(e.contains("missing field `code`"), "{e}");
        let e = parse::<RunCode>("run_code", args(json!({"language": "python", "code": 5})))
            .unwrap_err();
        assert!(e.contains("invalid type"), "{e}");
        let e = parse::<ReadFile>(
            "read_file",
            args(json!({"sandbox_id": "x", "path": "a", "colour": 1})),
        )
        .unwrap_err();
        assert!(e.contains("unknown field `colour`"), "{e}");
        let r: ReadFile = parse(
            "read_file",
            args(json!({"session": "s", "path": "a", "offset": 2})),
        )
        .unwrap();
        assert_eq!(r.at.session.as_deref(), Some("s"));
        assert_eq!(r.offset, 2);
    }
}
