//! Conversions between the core types and the wire messages, and between
//! [`ErrorCode`] and gRPC status codes (both ways, message kept).

use stockade_core::{
    EgressDenial, Error, ErrorCode, ExecOutcome, ExecRequest, FileEntry, FileKind, FileOp,
    FileResult, GcReport, GrepMatch, RunState, SandboxInfo, SessionInfo, SnapshotInfo, TtySize,
    Wall, WallKind,
};
use tonic::{Code, Status};

use crate::pb;

/// The gRPC status code of an error code.
pub fn grpc_code(code: ErrorCode) -> Code {
    match code {
        ErrorCode::InvalidSpec => Code::InvalidArgument,
        ErrorCode::NotFound => Code::NotFound,
        ErrorCode::Unavailable => Code::Unavailable,
        ErrorCode::Timeout => Code::DeadlineExceeded,
        ErrorCode::LimitExceeded => Code::ResourceExhausted,
        ErrorCode::PolicyDenied => Code::PermissionDenied,
        ErrorCode::Internal => Code::Internal,
    }
}

/// The error code of a gRPC status code (a refused token is `PolicyDenied`).
pub fn error_code(code: Code) -> ErrorCode {
    match code {
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
            ErrorCode::InvalidSpec
        }
        Code::NotFound => ErrorCode::NotFound,
        Code::Unavailable => ErrorCode::Unavailable,
        Code::DeadlineExceeded => ErrorCode::Timeout,
        Code::ResourceExhausted => ErrorCode::LimitExceeded,
        Code::PermissionDenied | Code::Unauthenticated => ErrorCode::PolicyDenied,
        _ => ErrorCode::Internal,
    }
}

/// An error as a status, its message unchanged.
pub fn to_status(e: &Error) -> Status {
    Status::new(grpc_code(e.code()), e.to_string())
}

/// Whether a status was made on this side from a broken connection (the daemon died,
/// restarted, or the network failed during the call) rather than sent by the daemon.
/// tonic keeps the local error as the status's source; a status the daemon sent has
/// none.
pub fn is_transport_failure(s: &Status) -> bool {
    use std::error::Error as _;
    s.source().is_some()
        && matches!(
            s.code(),
            Code::Unknown | Code::Internal | Code::Cancelled | Code::Unavailable
        )
}

/// A status as an error, its message unchanged.
pub fn from_status(s: Status) -> Error {
    Error::Remote {
        code: error_code(s.code()),
        message: s.message().to_string(),
    }
}

/// A core exec request as a wire request for `sandbox_id`.
pub fn exec_request(sandbox_id: &str, r: &ExecRequest) -> pb::ExecRequest {
    pb::ExecRequest {
        sandbox_id: sandbox_id.to_string(),
        argv: r.argv.clone(),
        env: r.env.clone().into_iter().collect(),
        cwd: r.cwd.clone(),
        stdin: r.stdin.clone(),
        timeout_ms: r.timeout_ms,
        output_limit_bytes: r.output_limit_bytes,
        keep_stdin_open: r.keep_stdin_open,
        background: r.background,
        detach: r.detach,
        discard_output: r.discard_output,
        tty: r.tty.map(tty_size),
        watch: r.watch.as_ref().map(|w| pb::WatchDir {
            path: w.path.clone(),
            recursive: w.recursive,
        }),
    }
}

/// A core terminal size on the wire.
pub fn tty_size(t: TtySize) -> pb::TtySize {
    pb::TtySize {
        rows: t.rows.into(),
        cols: t.cols.into(),
    }
}

/// A wire terminal size as a core one (past 65535 cells: 65535).
pub fn from_tty_size(t: pb::TtySize) -> TtySize {
    let cells = |n: u32| u16::try_from(n).unwrap_or(u16::MAX);
    TtySize {
        rows: cells(t.rows),
        cols: cells(t.cols),
    }
}

/// A wire exec request as a core one (and its sandbox id).
pub fn from_exec_request(r: pb::ExecRequest) -> (String, ExecRequest) {
    let mut req = ExecRequest::new(r.argv);
    req.env = r.env.into_iter().collect();
    req.cwd = r.cwd;
    req.stdin = r.stdin;
    req.timeout_ms = r.timeout_ms;
    if r.output_limit_bytes > 0 {
        req.output_limit_bytes = r.output_limit_bytes;
    }
    req.keep_stdin_open = r.keep_stdin_open;
    req.background = r.background;
    req.detach = r.detach;
    req.discard_output = r.discard_output;
    req.tty = r.tty.map(from_tty_size);
    req.watch = r.watch.map(|w| stockade_core::WatchDir {
        path: w.path,
        recursive: w.recursive,
    });
    (r.sandbox_id, req)
}

pub fn outcome(o: ExecOutcome) -> pb::ExecOutcome {
    pb::ExecOutcome {
        exit_code: o.exit_code,
        signal: o.signal,
        timed_out: o.timed_out,
        oom_killed: o.oom_killed,
        duration_ms: o.duration_ms,
        stdout: o.stdout,
        stderr: o.stderr,
        stdout_dropped: o.stdout_dropped,
        stderr_dropped: o.stderr_dropped,
        egress_denied: o.egress_denied.into_iter().map(denial).collect(),
        pid: o.pid,
    }
}

pub fn denial(d: EgressDenial) -> pb::EgressDenial {
    pb::EgressDenial {
        at_ms: d.at_ms,
        protocol: d.protocol,
        destination: d.destination,
        port: d.port.map(u32::from),
        name: d.name,
        rule: d.rule,
    }
}

pub fn from_denial(d: pb::EgressDenial) -> EgressDenial {
    EgressDenial {
        at_ms: d.at_ms,
        protocol: d.protocol,
        destination: d.destination,
        port: d.port.and_then(|p| u16::try_from(p).ok()),
        name: d.name,
        rule: d.rule,
    }
}

pub fn from_outcome(o: pb::ExecOutcome) -> ExecOutcome {
    ExecOutcome {
        exit_code: o.exit_code,
        signal: o.signal,
        timed_out: o.timed_out,
        oom_killed: o.oom_killed,
        duration_ms: o.duration_ms,
        stdout: o.stdout,
        stderr: o.stderr,
        stdout_dropped: o.stdout_dropped,
        stderr_dropped: o.stderr_dropped,
        egress_denied: o.egress_denied.into_iter().map(from_denial).collect(),
        pid: o.pid,
    }
}

pub fn sandbox_info(i: &SandboxInfo, pooled: bool) -> pb::SandboxInfo {
    pb::SandboxInfo {
        id: i.id.clone(),
        provider: i.provider.clone(),
        created_at_ms: i.created_at_ms,
        expires_at_ms: i.expires_at_ms,
        owner_pid: i.owner_pid.unwrap_or(0),
        spec_json: i.spec.to_string(),
        applied: i
            .applied
            .iter()
            .map(|w| pb::Wall {
                kind: w.kind.name().to_string(),
                enforced: w.enforced,
                detail: w.detail.clone(),
            })
            .collect(),
        pooled,
        state: i.state.as_str().to_string(),
    }
}

pub fn snapshot_info(s: &SnapshotInfo) -> pb::SnapshotInfo {
    pb::SnapshotInfo {
        name: s.name.clone(),
        provider: s.provider.clone(),
        source: s.source.clone(),
        created_at_ms: s.created_at_ms,
        bytes: s.bytes,
        sha256: s.sha256.clone(),
        spec_json: s.spec.to_string(),
    }
}

pub fn from_snapshot_info(s: pb::SnapshotInfo) -> Result<SnapshotInfo, Error> {
    let spec = serde_json::from_str(&s.spec_json).map_err(|e| {
        Error::Internal(format!(
            "the daemon sent snapshot {} with a bad spec: {e}",
            s.name
        ))
    })?;
    Ok(SnapshotInfo {
        name: s.name,
        provider: s.provider,
        source: s.source,
        created_at_ms: s.created_at_ms,
        bytes: s.bytes,
        sha256: s.sha256,
        spec,
    })
}

pub fn from_sandbox_info(i: pb::SandboxInfo) -> Result<SandboxInfo, Error> {
    let spec = serde_json::from_str(&i.spec_json).map_err(|e| {
        Error::Internal(format!(
            "the daemon sent sandbox {} with a bad spec: {e}",
            i.id
        ))
    })?;
    Ok(SandboxInfo {
        id: i.id,
        provider: i.provider,
        created_at_ms: i.created_at_ms,
        expires_at_ms: i.expires_at_ms,
        owner_pid: (i.owner_pid != 0).then_some(i.owner_pid),
        spec,
        applied: i
            .applied
            .into_iter()
            .map(|w| Wall {
                // A kind this client does not know (a newer daemon's) reads as
                // isolation, its words kept.
                kind: WallKind::from_name(&w.kind).unwrap_or(WallKind::Isolation),
                enforced: w.enforced,
                detail: w.detail,
            })
            .collect(),
        state: RunState::parse(&i.state),
        steps: Vec::new(),
    })
}

pub fn file_op(op: FileOp) -> pb::file_request::Op {
    use pb::file_request::Op;
    match op {
        FileOp::Write { path, data, mode } => Op::Write(pb::WriteOp { path, data, mode }),
        FileOp::Read {
            path,
            offset,
            limit,
        } => Op::Read(pb::ReadOp {
            path,
            offset,
            limit,
        }),
        FileOp::Edit {
            path,
            old,
            new,
            replace_all,
        } => Op::Edit(pb::EditOp {
            path,
            old,
            new,
            replace_all,
        }),
        FileOp::Ls { path } => Op::Ls(pb::PathOp { path }),
        FileOp::Stat { path } => Op::Stat(pb::PathOp { path }),
        FileOp::Glob { pattern, root } => Op::Glob(pb::GlobOp { pattern, root }),
        FileOp::Grep {
            regex,
            root,
            include,
            max_matches,
        } => Op::Grep(pb::GrepOp {
            regex,
            root,
            include,
            max_matches,
        }),
        FileOp::Mkdir { path, parents } => Op::Mkdir(pb::MkdirOp { path, parents }),
        FileOp::Rm { path, recursive } => Op::Rm(pb::RmOp { path, recursive }),
        FileOp::Upload { dest, archive } => Op::Upload(pb::UploadOp { dest, archive }),
        FileOp::Download { path } => Op::Download(pb::PathOp { path }),
        FileOp::SetXattrs { path, xattrs } => Op::SetXattrs(pb::SetXattrsOp {
            path,
            xattrs: xattrs.into_iter().collect(),
        }),
        FileOp::Changes {
            base,
            out,
            exclude,
            max_bytes,
        } => Op::Changes(pb::ChangesOp {
            base,
            out,
            exclude,
            max_bytes,
        }),
    }
}

pub fn from_file_op(op: Option<pb::file_request::Op>) -> Result<FileOp, Error> {
    use pb::file_request::Op;
    Ok(match op {
        None => {
            return Err(Error::InvalidRequest(
                "file request has no operation".into(),
            ));
        }
        Some(Op::Write(o)) => FileOp::Write {
            path: o.path,
            data: o.data,
            mode: o.mode,
        },
        Some(Op::Read(o)) => FileOp::Read {
            path: o.path,
            offset: o.offset,
            limit: o.limit,
        },
        Some(Op::Edit(o)) => FileOp::Edit {
            path: o.path,
            old: o.old,
            new: o.new,
            replace_all: o.replace_all,
        },
        Some(Op::Ls(o)) => FileOp::Ls { path: o.path },
        Some(Op::Stat(o)) => FileOp::Stat { path: o.path },
        Some(Op::Glob(o)) => FileOp::Glob {
            pattern: o.pattern,
            root: o.root,
        },
        Some(Op::Grep(o)) => FileOp::Grep {
            regex: o.regex,
            root: o.root,
            include: o.include,
            max_matches: o.max_matches,
        },
        Some(Op::Mkdir(o)) => FileOp::Mkdir {
            path: o.path,
            parents: o.parents,
        },
        Some(Op::Rm(o)) => FileOp::Rm {
            path: o.path,
            recursive: o.recursive,
        },
        Some(Op::Upload(o)) => FileOp::Upload {
            dest: o.dest,
            archive: o.archive,
        },
        Some(Op::Download(o)) => FileOp::Download { path: o.path },
        Some(Op::SetXattrs(o)) => FileOp::SetXattrs {
            path: o.path,
            xattrs: o.xattrs.into_iter().collect(),
        },
        Some(Op::Changes(o)) => FileOp::Changes {
            base: o.base,
            out: o.out,
            exclude: o.exclude,
            max_bytes: o.max_bytes,
        },
    })
}

fn entry(e: FileEntry) -> pb::FileEntry {
    let kind = match e.kind {
        FileKind::File => pb::FileKind::File,
        FileKind::Dir => pb::FileKind::Dir,
        FileKind::Symlink => pb::FileKind::Symlink,
        FileKind::Other => pb::FileKind::Other,
    };
    pb::FileEntry {
        name: e.name,
        kind: kind as i32,
        size: e.size,
        mode: e.mode,
        mtime: e.mtime,
        link_target: e.link_target,
        xattrs: e.xattrs.into_iter().collect(),
    }
}

fn from_entry(e: pb::FileEntry) -> FileEntry {
    let kind = match e.kind() {
        pb::FileKind::File => FileKind::File,
        pb::FileKind::Dir => FileKind::Dir,
        pb::FileKind::Symlink => FileKind::Symlink,
        pb::FileKind::Other => FileKind::Other,
    };
    FileEntry {
        name: e.name,
        kind,
        size: e.size,
        mode: e.mode,
        mtime: e.mtime,
        link_target: e.link_target,
        xattrs: e.xattrs.into_iter().collect(),
    }
}

fn grep_match(m: GrepMatch) -> pb::GrepMatch {
    pb::GrepMatch {
        path: m.path,
        line_number: m.line_number,
        line: m.line,
    }
}

pub fn file_result(r: FileResult) -> pb::FileReply {
    use pb::file_reply::Result as R;
    let result = match r {
        FileResult::Done => R::Done(pb::Empty {}),
        FileResult::Data { data, size, eof } => R::Data(pb::DataResult { data, size, eof }),
        FileResult::Edited { replacements } => R::Edited(replacements),
        FileResult::Entries(e) => R::Entries(pb::Entries {
            entries: e.into_iter().map(entry).collect(),
        }),
        FileResult::Paths { paths, truncated } => R::Paths(pb::Paths { paths, truncated }),
        FileResult::Matches { matches, truncated } => R::Matches(pb::Matches {
            matches: matches.into_iter().map(grep_match).collect(),
            truncated,
        }),
        FileResult::Archive(a) => R::Archive(a),
    };
    pb::FileReply {
        result: Some(result),
    }
}

pub fn from_file_result(r: pb::FileReply) -> Result<FileResult, Error> {
    use pb::file_reply::Result as R;
    Ok(match r.result {
        None => {
            return Err(Error::Internal(
                "the daemon sent a file reply without a result".into(),
            ));
        }
        Some(R::Done(_)) => FileResult::Done,
        Some(R::Data(d)) => FileResult::Data {
            data: d.data,
            size: d.size,
            eof: d.eof,
        },
        Some(R::Edited(n)) => FileResult::Edited { replacements: n },
        Some(R::Entries(e)) => FileResult::Entries(e.entries.into_iter().map(from_entry).collect()),
        Some(R::Paths(p)) => FileResult::Paths {
            paths: p.paths,
            truncated: p.truncated,
        },
        Some(R::Matches(m)) => FileResult::Matches {
            matches: m
                .matches
                .into_iter()
                .map(|m| GrepMatch {
                    path: m.path,
                    line_number: m.line_number,
                    line: m.line,
                })
                .collect(),
            truncated: m.truncated,
        },
        Some(R::Archive(a)) => FileResult::Archive(a),
    })
}

pub fn gc_report(r: GcReport) -> pb::GcReply {
    pb::GcReply {
        reaped: r.reaped,
        errors: r.errors,
    }
}

pub fn session_info(s: SessionInfo) -> pb::SessionInfo {
    pb::SessionInfo {
        name: s.name,
        workspace: s.workspace.display().to_string(),
        sandbox_id: s.sandbox_id,
        last_used_ms: s.last_used_ms,
    }
}

pub fn from_session_info(s: pb::SessionInfo) -> SessionInfo {
    SessionInfo {
        name: s.name,
        workspace: s.workspace.into(),
        sandbox_id: s.sandbox_id,
        last_used_ms: s.last_used_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_survives_a_round_trip_with_its_message() {
        for code in [
            ErrorCode::InvalidSpec,
            ErrorCode::NotFound,
            ErrorCode::Unavailable,
            ErrorCode::Timeout,
            ErrorCode::LimitExceeded,
            ErrorCode::PolicyDenied,
            ErrorCode::Internal,
        ] {
            let e = Error::Remote {
                code,
                message: format!("sandbox sb-1 says {}", code.as_str()),
            };
            let back = from_status(to_status(&e));
            assert_eq!(back.code(), code);
            assert_eq!(back.to_string(), e.to_string());
        }
        let e = Error::NotFound {
            kind: "sandbox",
            id: "sb-2".into(),
        };
        let s = to_status(&e);
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(s.message(), "sandbox sb-2 not found");
        assert_eq!(
            error_code(Code::Unauthenticated),
            ErrorCode::PolicyDenied,
            "a refused token is a policy denial"
        );
    }

    #[test]
    fn file_ops_and_results_round_trip() {
        let ops = vec![
            FileOp::Write {
                path: "a".into(),
                data: b"x".to_vec(),
                mode: Some(0o600),
            },
            FileOp::Read {
                path: "a".into(),
                offset: 1,
                limit: 2,
            },
            FileOp::Edit {
                path: "a".into(),
                old: "x".into(),
                new: "y".into(),
                replace_all: true,
            },
            FileOp::Ls { path: "/".into() },
            FileOp::Stat { path: "/".into() },
            FileOp::Glob {
                pattern: "*.py".into(),
                root: "/".into(),
            },
            FileOp::Grep {
                regex: "a+".into(),
                root: "/".into(),
                include: Some("*.rs".into()),
                max_matches: 3,
            },
            FileOp::Mkdir {
                path: "d".into(),
                parents: true,
            },
            FileOp::Rm {
                path: "d".into(),
                recursive: false,
            },
            FileOp::Upload {
                dest: "/tmp".into(),
                archive: vec![1, 2],
            },
            FileOp::Download {
                path: "/tmp".into(),
            },
            FileOp::SetXattrs {
                path: "a".into(),
                xattrs: [("user.k".to_string(), "v".to_string())].into(),
            },
            FileOp::Changes {
                base: "/b".into(),
                out: "/o/layer.tar".into(),
                exclude: vec!["/proc".into()],
                max_bytes: 9,
            },
        ];
        for op in ops {
            assert_eq!(from_file_op(Some(file_op(op.clone()))).unwrap(), op);
        }
        let results = vec![
            FileResult::Done,
            FileResult::Data {
                data: vec![1],
                size: 9,
                eof: false,
            },
            FileResult::Edited { replacements: 2 },
            FileResult::Entries(vec![FileEntry {
                name: "x".into(),
                kind: FileKind::Symlink,
                size: 1,
                mode: 0o777,
                mtime: -1,
                link_target: Some("../t".into()),
                xattrs: [("user.k".to_string(), "v".to_string())].into(),
            }]),
            FileResult::Paths {
                paths: vec!["a".into()],
                truncated: true,
            },
            FileResult::Matches {
                matches: vec![GrepMatch {
                    path: "p".into(),
                    line_number: 4,
                    line: "l".into(),
                }],
                truncated: false,
            },
            FileResult::Archive(vec![7]),
        ];
        for r in results {
            assert_eq!(from_file_result(file_result(r.clone())).unwrap(), r);
        }
        assert!(
            from_file_op(None)
                .unwrap_err()
                .to_string()
                .contains("no operation")
        );
    }

    #[test]
    fn exec_requests_keep_every_field() {
        let mut r = ExecRequest::new(["sh", "-c", "cat"]);
        r.env.insert("A".into(), "1".into());
        r.cwd = Some("/tmp".into());
        r.stdin = b"in".to_vec();
        r.timeout_ms = Some(5);
        r.output_limit_bytes = 77;
        r.keep_stdin_open = true;
        let (id, back) = from_exec_request(exec_request("sb-1", &r));
        assert_eq!(id, "sb-1");
        assert_eq!(back, r);
        let w = ExecRequest::watch_dir("/home/user", true);
        assert_eq!(from_exec_request(exec_request("sb-1", &w)).1, w);
    }
}
