//! A template build: its sandbox, its steps, its layer and its image (see the
//! module above for the API that starts it).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use stockade::spec::{Mount, Network, SandboxSpec};
use stockade::{ExecRequest, FileOp};

use super::{
    BASE_AT, BUILD_MEMORY_MB, Build, BuildBody, Built, OUT_AT, READY_TIMEOUT, STEP_TIMEOUT_MS,
    Step, lock,
};
use crate::state::E2b;

/// What a build carries from step to step.
struct Carried {
    env: BTreeMap<String, String>,
    workdir: String,
    user: String,
}

fn uid_of(user: &str) -> Result<u32, String> {
    match user {
        "user" | "" => Ok(1000),
        "root" => Ok(0),
        u => Err(format!(
            "user {u:?}: Stockade's E2B sandboxes have the users \"user\" (uid 1000) and \
             \"root\" (root of the sandbox's own user namespace)"
        )),
    }
}

fn resolve_in(dir: &str, path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{}", dir.trim_end_matches('/'), path)
    }
}

pub(super) async fn run_build(e2b: &Arc<E2b>, build: &Arc<Build>, build_id: &str, body: BuildBody) {
    let scratch = e2b.templates.dir.join("builds").join(build_id);
    let r = build_in(e2b, build, build_id, body, &scratch).await;
    let _ = std::fs::remove_dir_all(&scratch);
    match r {
        Ok(b) => match e2b.templates.replace(b) {
            Ok(replaced) => {
                super::forget(e2b, replaced);
                build.log("info", "Template is ready", None);
                let mut st = lock(&build.state);
                st.status = "ready";
                st.ended_ms = Some(stockade::now_ms());
            }
            Err(failed) => {
                let (b, e) = *failed;
                super::forget(e2b, vec![b]);
                build.fail(format!("cannot save the template list: {e}"), None);
            }
        },
        Err((m, step)) => build.fail(m, step),
    }
}

type StepErr = (String, Option<String>);

async fn build_in(
    e2b: &Arc<E2b>,
    build: &Arc<Build>,
    build_id: &str,
    body: BuildBody,
    scratch: &Path,
) -> Result<Built, StepErr> {
    let base_err = |m: String| (m, Some("base".to_string()));
    // The base: another template of the tenant's, or an image of the store.
    let (base_ref, mut carried, from) = match (&body.from_template, &body.from_image) {
        (Some(t), _) => match e2b.templates.find(&build.tenant, t) {
            Some(b) if b.image.is_empty() => {
                return Err(base_err(format!(
                    "template {t:?} is a snapshot of a sandbox on the host's root, which \
                     cannot be built on: build from an image"
                )));
            }
            Some(b) => (
                b.image.clone(),
                Carried {
                    env: b.env.clone(),
                    workdir: b.workdir.clone(),
                    user: b.user.clone(),
                },
                format!("template {t}"),
            ),
            None => {
                return Err(base_err(format!(
                    "template {t:?} to build from is not one of yours: build it first (the \
                     server's own templates run on the host's root and cannot be built on; \
                     build from an image)"
                )));
            }
        },
        (None, image) => {
            let image = image.clone().unwrap_or_else(|| "e2bdev/base".into());
            (
                image.clone(),
                Carried {
                    env: BTreeMap::new(),
                    workdir: "/home/user".into(),
                    user: "user".into(),
                },
                format!("image {image}"),
            )
        }
    };
    build.log("info", format!("Building from {from}"), Some("base"));
    let store = e2b
        .daemon
        .image_store()
        .map_err(|e| base_err(e.to_string()))?;
    let image = {
        let store = store.clone();
        let r = base_ref.clone();
        tokio::task::spawn_blocking(move || {
            let image = store.image(&r)?;
            let root = store.rootfs(&image)?;
            Ok::<_, stockade_image::Error>((image, root))
        })
        .await
        .map_err(|e| base_err(e.to_string()))?
    };
    let (image, rootfs) = image.map_err(|e| {
        base_err(match e {
            stockade_image::Error::ImageNotFound { .. } => format!(
                "image {base_ref} is not in Stockade's image store (this server pulls from no \
                 registry for a build): bring it first with `stockade image pull` or \
                 `stockade image import`, then build from it by that name"
            ),
            e => format!("image {base_ref}: {e}"),
        })
    })?;
    let memory_mb = build.memory_mb.unwrap_or(BUILD_MEMORY_MB);
    let out = scratch.join("out");
    std::fs::create_dir_all(&out)
        .map_err(|e| base_err(format!("cannot make {}: {e}", out.display())))?;
    if let Some((uid, gid)) = e2b.home_owner {
        let _ = std::os::unix::fs::chown(&out, Some(uid), Some(gid));
    }
    let mut spec = SandboxSpec {
        // As the caller named it: the tenant's profile decides on that name.
        image: Some(base_ref.clone()),
        writable: true,
        timeout_secs: 3600,
        workdir: Some("/".into()),
        network: Network::Egress,
        ..SandboxSpec::default()
    };
    spec.limits.memory_bytes = memory_mb << 20;
    spec.limits.tmp_bytes = memory_mb << 19;
    if let Some(c) = build.cpus {
        spec.limits.cpus = c;
    }
    spec.limits.pids = spec.limits.pids.max(512);
    let mounts = vec![
        Mount {
            host: rootfs.clone(),
            target: BASE_AT.into(),
            writable: false,
        },
        Mount {
            host: out.clone(),
            target: OUT_AT.into(),
            writable: true,
        },
    ];
    spec.env.insert("HOME".into(), "/home/user".into());
    spec.labels.insert("e2b.build".into(), build_id.into());
    let made = match e2b
        .build_sandbox(&build.tenant, spec.clone(), mounts.clone())
        .await
    {
        // The tenant's profile allows no network: the build runs without.
        Err(stockade::Error::PolicyDenied(m)) if m.contains("(network)") => {
            build.log(
                "warn",
                "This build has no network (your profile allows none): RUN steps that \
                 download fail; COPY what they need instead",
                Some("base"),
            );
            spec.network = Network::None;
            e2b.build_sandbox(&build.tenant, spec, mounts).await
        }
        r => r,
    };
    let sandbox = made.map_err(|e| base_err(format!("cannot start the build's sandbox: {e}")))?;
    let r = steps(e2b, build, &sandbox, &body, &mut carried).await;
    let r = match r {
        Ok(()) => {
            finish(
                e2b, build, build_id, &sandbox, &body, &carried, &image, &out,
            )
            .await
        }
        Err(e) => Err(e),
    };
    let _ = e2b.daemon.destroy(&build.tenant, &sandbox).await;
    r
}

/// Runs `script` with `sh -c` in the build's sandbox as `uid`, its output logged.
async fn sh(
    e2b: &E2b,
    build: &Build,
    sandbox: &str,
    script: &str,
    uid: u32,
    c: &Carried,
    step: &str,
) -> Result<(), StepErr> {
    let mut req = ExecRequest::new(["/bin/sh", "-c", script]);
    req.uid = Some(uid);
    req.env = c.env.clone();
    req.env.insert(
        "HOME".into(),
        if uid == 0 { "/root" } else { "/home/user" }.into(),
    );
    req.env
        .insert("USER".into(), if uid == 0 { "root" } else { "user" }.into());
    req.cwd = Some(c.workdir.clone());
    req.timeout_ms = Some(STEP_TIMEOUT_MS);
    req.output_limit_bytes = 4 << 20;
    let o = e2b
        .daemon
        .exec(&build.tenant, sandbox, req)
        .await
        .map_err(|e| (format!("step {step}: {e}"), Some(step.to_string())))?;
    for (level, bytes) in [("info", &o.stdout), ("warn", &o.stderr)] {
        for line in String::from_utf8_lossy(bytes).lines() {
            build.log(level, line, Some(step));
        }
    }
    if o.timed_out {
        return Err((
            format!("step {step} ran past {} minutes", STEP_TIMEOUT_MS / 60_000),
            Some(step.into()),
        ));
    }
    if o.exit_code != 0 {
        // Its last words, so the reason says why without the log.
        let said = if o.stderr.is_empty() {
            &o.stdout
        } else {
            &o.stderr
        };
        let tail = last_lines(&String::from_utf8_lossy(said));
        return Err((
            format!(
                "step {step}: the command exited with status {}{}",
                o.exit_code, tail
            ),
            Some(step.into()),
        ));
    }
    Ok(())
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

async fn steps(
    e2b: &E2b,
    build: &Build,
    sandbox: &str,
    body: &BuildBody,
    c: &mut Carried,
) -> Result<(), StepErr> {
    let total = body.steps.len();
    for (i, s) in body.steps.iter().enumerate() {
        let step = (i + 1).to_string();
        let at = |m: String| (format!("step {step}: {m}"), Some(step.clone()));
        build.log(
            "info",
            format!("[{}/{total}] {} {}", i + 1, s.kind, s.args.join(" ")),
            Some(&step),
        );
        match s.kind.as_str() {
            "RUN" => {
                let user = s.args.get(1).map_or(c.user.as_str(), String::as_str);
                let uid = uid_of(user).map_err(at)?;
                let cmd = s.args.first().cloned().unwrap_or_default();
                sh(e2b, build, sandbox, &cmd, uid, c, &step).await?;
            }
            "ENV" => {
                for kv in s.args.chunks(2) {
                    if let [k, v] = kv {
                        c.env.insert(k.clone(), v.clone());
                    }
                }
            }
            "WORKDIR" => {
                let dir = resolve_in(&c.workdir, s.args.first().map_or("", String::as_str));
                let uid = uid_of(&c.user).map_err(at)?;
                let script = format!("mkdir -p {0} && chown {uid}:{uid} {0}", quote(&dir));
                let root = Carried {
                    env: c.env.clone(),
                    workdir: "/".into(),
                    user: "root".into(),
                };
                sh(e2b, build, sandbox, &script, 0, &root, &step).await?;
                c.workdir = dir;
            }
            "USER" => {
                let u = s.args.first().cloned().unwrap_or_default();
                uid_of(&u).map_err(at)?;
                c.user = u;
            }
            "COPY" => copy(e2b, build, sandbox, s, c, &step).await?,
            _ => unreachable!("checked at the start"),
        }
    }
    Ok(())
}

/// A COPY step: the archive unpacked in a staging directory, then moved to `dest` as
/// E2B's builder does (a file to the path, a directory's contents into it), owned by
/// the step's user, with its mode.
async fn copy(
    e2b: &E2b,
    build: &Build,
    sandbox: &str,
    s: &Step,
    c: &Carried,
    step: &str,
) -> Result<(), StepErr> {
    let at = |m: String| (format!("step {step}: {m}"), Some(step.to_string()));
    let hash = s
        .files_hash
        .clone()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let path = e2b.templates.file_path(&build.tenant, &hash);
    let archive = std::fs::read(&path).map_err(|_| {
        at(format!(
            "the files of COPY {} were not uploaded (hash {hash})",
            s.args[0]
        ))
    })?;
    let stage = format!("/tmp/.e2b-copy-{step}");
    e2b.daemon
        .file_as(
            &build.tenant,
            sandbox,
            0,
            FileOp::Upload {
                dest: stage.clone(),
                archive,
            },
        )
        .await
        .map_err(|e| at(format!("cannot unpack the files: {e}")))?;
    // The part of src before its first glob character: what the archive's entries
    // are found under.
    let src = s.args[0].trim_start_matches("./");
    let fixed: String = src
        .split('/')
        .take_while(|p| !p.contains(['*', '?', '[', '{']))
        .collect::<Vec<_>>()
        .join("/");
    let dest = resolve_in(&c.workdir, &s.args[1]);
    let owner = s.args.get(2).filter(|u| !u.is_empty()).unwrap_or(&c.user);
    let uid = uid_of(owner).map_err(at)?;
    let mode = s.args.get(3).filter(|m| !m.is_empty());
    if let Some(m) = mode
        && !(m.len() <= 4 && m.bytes().all(|b| (b'0'..=b'7').contains(&b)))
    {
        return Err(at(format!("mode {m:?} is not octal")));
    }
    let fix = |t: &str| {
        let chmod = mode.map_or(String::new(), |m| format!(" && chmod -R {m} {t}"));
        format!("chown -R {uid}:{uid} {t}{chmod}")
    };
    // A directory's contents go into dest; a file to dest itself, or into it when
    // dest is a directory or ends with '/'.
    let s_at = if fixed.is_empty() {
        stage.clone()
    } else {
        format!("{stage}/{fixed}")
    };
    let script = format!(
        "set -e; s={s}; d={d}\n\
         if [ -d \"$s\" ]; then\n\
           mkdir -p \"$d\"; cd \"$s\"\n\
           for f in * .[!.]* ..?*; do\n\
             if [ -e \"$f\" ] || [ -L \"$f\" ]; then cp -a \"$f\" \"$d/\"; {fix_each}; fi\n\
           done\n\
         else\n\
           case \"$d\" in */) mkdir -p \"$d\";; esac\n\
           if [ -d \"$d\" ]; then t=\"$d/$(basename \"$s\")\"; else mkdir -p \"$(dirname \"$d\")\"; t=\"$d\"; fi\n\
           cp -a \"$s\" \"$t\"; {fix_one}\n\
         fi\n\
         cd /; rm -rf {stage}",
        s = quote(&s_at),
        d = quote(&dest),
        fix_each = fix("\"$d/$f\""),
        fix_one = fix("\"$t\""),
        stage = quote(&stage),
    );
    let root = Carried {
        env: c.env.clone(),
        workdir: "/".into(),
        user: "root".into(),
    };
    sh(e2b, build, sandbox, &script, 0, &root, step).await
}

#[allow(clippy::too_many_arguments)]
async fn finish(
    e2b: &E2b,
    build: &Build,
    build_id: &str,
    sandbox: &str,
    body: &BuildBody,
    c: &Carried,
    image: &stockade_image::Image,
    out: &Path,
) -> Result<Built, StepErr> {
    let fin = |m: String| (m, Some("finalize".to_string()));
    let uid = uid_of(&c.user).map_err(fin)?;
    if let Some(start) = &body.start_cmd {
        build.log("info", format!("Starting: {start}"), Some("finalize"));
    }
    start_and_wait(
        e2b,
        &build.tenant,
        sandbox,
        body.start_cmd.as_deref(),
        body.ready_cmd.as_deref(),
        uid,
        c,
    )
    .await
    .map_err(fin)?;
    build.log(
        "info",
        "Taking the sandbox's changes as a layer",
        Some("finalize"),
    );
    let exclude = ["/proc", "/sys", "/dev", "/tmp", "/.e2b-build", "/.stockade"]
        .map(String::from)
        .to_vec();
    let store = e2b.daemon.image_store().map_err(|e| fin(e.to_string()))?;
    let max_bytes = store.limits().max_bytes;
    e2b.daemon
        .file_as(
            &build.tenant,
            sandbox,
            0,
            FileOp::Changes {
                base: BASE_AT.into(),
                out: format!("{OUT_AT}/layer.tar"),
                exclude,
                max_bytes,
            },
        )
        .await
        .map_err(|e| fin(format!("cannot take the sandbox's changes: {e}")))?;
    // Nothing of the sandbox runs while the host reads what it wrote: the start
    // command could swap the layer for a link to a host file.
    e2b.daemon
        .destroy(&build.tenant, sandbox)
        .await
        .map_err(|e| fin(format!("cannot stop the build's sandbox: {e}")))?;
    let layer = out.join("layer.tar");
    let size = match std::fs::symlink_metadata(&layer) {
        Ok(m) if m.file_type().is_file() && std::os::unix::fs::MetadataExt::nlink(&m) == 1 => {
            m.len()
        }
        _ => {
            return Err(fin(
                "the sandbox's changes are not a plain file where the agent wrote them (the \
                 build's code replaced it)"
                    .into(),
            ));
        }
    };
    build.log(
        "info",
        format!("Layer of {} KiB; committing the image", size >> 10),
        Some("finalize"),
    );
    let commit = stockade_image::Commit {
        env: c.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        workdir: Some(c.workdir.clone()),
        // E2B's users are the sandbox's own ("user", "root"), kept with the template:
        // not a name of the image's /etc/passwd.
        user: None,
        cmd: body
            .start_cmd
            .as_ref()
            .map(|s| vec!["/bin/sh".into(), "-c".into(), s.clone()]),
        created_by: format!("E2B template build {build_id} of {}", build.name),
    };
    let base = image.clone();
    let made = tokio::task::spawn_blocking(move || {
        let made = store.commit(&base, &layer, &commit, None)?;
        store.rootfs(&made)?;
        Ok::<_, stockade_image::Error>(made)
    })
    .await
    .map_err(|e| fin(e.to_string()))?
    .map_err(|e| fin(format!("cannot commit the image: {e}")))?;
    let digest = made.digest.to_string();
    if let Err(e) = e2b.daemon.own_image(&build.tenant, &digest, size) {
        // Past the tenant's image budget: the image goes again.
        if let Ok(store) = e2b.daemon.image_store() {
            let _ = store.remove(&digest);
        }
        return Err(fin(e.to_string()));
    }
    Ok(Built {
        tenant: build.tenant.clone(),
        template_id: build.template_id.clone(),
        name: build.name.clone(),
        tags: build.tags.clone(),
        build_id: build_id.into(),
        image: digest,
        env: c.env.clone(),
        workdir: c.workdir.clone(),
        user: c.user.clone(),
        start_cmd: body.start_cmd.clone(),
        ready_cmd: body.ready_cmd.clone(),
        cpus: build.cpus,
        memory_mb: build.memory_mb,
        created_ms: stockade::now_ms(),
        snapshot_of: None,
        home: None,
        owns_image: true,
        allow: Vec::new(),
        pids: None,
    })
}

/// Starts `start` (detached, as `uid`) and waits for `ready` to succeed; a start
/// command that ends first fails at once, with its last words.
async fn start_and_wait(
    e2b: &E2b,
    tenant: &str,
    sandbox: &str,
    start: Option<&str>,
    ready: Option<&str>,
    uid: u32,
    c: &Carried,
) -> Result<(), String> {
    let mut pid = None;
    if let Some(start) = start {
        let mut req = ExecRequest::new(["/bin/sh", "-c", start]);
        req.uid = Some(uid);
        req.env = c.env.clone();
        req.cwd = Some(c.workdir.clone());
        req.detach = true;
        let o = e2b
            .daemon
            .exec(tenant, sandbox, req)
            .await
            .map_err(|e| format!("cannot start {start:?}: {e}"))?;
        pid = o.pid;
    }
    let start = start.unwrap_or_default();
    let Some(ready) = ready else { return Ok(()) };
    let until = std::time::Instant::now() + READY_TIMEOUT;
    loop {
        // 99: the start command is gone (`ready` failed and its pid is no more).
        let script = match pid {
            Some(pid) => format!("( {ready} ) && exit 0; [ -d /proc/{pid} ] || exit 99; exit 1"),
            None => ready.to_string(),
        };
        let mut req = ExecRequest::new(["/bin/sh", "-c", &script]);
        req.uid = Some(uid);
        req.env = c.env.clone();
        req.cwd = Some(c.workdir.clone());
        req.timeout_ms = Some(10_000);
        match e2b.daemon.exec(tenant, sandbox, req).await {
            Ok(r) if r.exit_code == 0 => return Ok(()),
            Ok(r) if r.exit_code == 99 => {
                let log = match pid {
                    Some(pid) => last_words(e2b, tenant, sandbox, pid).await,
                    None => String::new(),
                };
                return Err(format!(
                    "the start command {start:?} ended before the ready command {ready:?} \
                     succeeded{log}"
                ));
            }
            _ => {}
        }
        if std::time::Instant::now() >= until {
            return Err(format!(
                "the ready command {ready:?} did not succeed within {} s",
                READY_TIMEOUT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The last three lines of `text` as `: a / b / c`, or nothing.
fn last_lines(text: &str) -> String {
    let mut tail: Vec<&str> = text.lines().rev().take(3).collect();
    tail.reverse();
    if tail.is_empty() {
        String::new()
    } else {
        format!(": {}", tail.join(" / "))
    }
}

/// The last lines a detached command wrote (`: ...`), or nothing.
async fn last_words(e2b: &E2b, tenant: &str, sandbox: &str, pid: u32) -> String {
    let op = FileOp::Read {
        path: stockade::detached_log(pid),
        offset: 0,
        limit: 64 << 10,
    };
    match e2b.daemon.file_as(tenant, sandbox, 0, op).await {
        Ok(stockade::FileResult::Data { data, .. }) => last_lines(&String::from_utf8_lossy(&data)),
        _ => String::new(),
    }
}

/// What a sandbox of a built template starts with: its start command, once its
/// ready command succeeds.
pub async fn started(e2b: &E2b, tenant: &str, sandbox: &str, b: &Built) -> Result<(), String> {
    if b.start_cmd.is_none() && b.ready_cmd.is_none() {
        return Ok(());
    }
    let c = Carried {
        env: b.env.clone(),
        workdir: b.workdir.clone(),
        user: b.user.clone(),
    };
    let uid = uid_of(&b.user)?;
    start_and_wait(
        e2b,
        tenant,
        sandbox,
        b.start_cmd.as_deref(),
        b.ready_cmd.as_deref(),
        uid,
        &c,
    )
    .await
}
