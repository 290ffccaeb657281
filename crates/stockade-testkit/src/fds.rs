//! Descriptors a careless caller leaks to what it starts (issue 14, finding 3).
//!
//! [`planted`] opens, once per test process, one descriptor of each kind without
//! close-on-exec: a root-only file holding a secret, the host's `/`, a file opened for
//! append, a unix socket, a listening TCP socket and both ends of a pipe. Every process
//! the test process starts from then on inherits them, as the processes of an agent
//! framework or a shell would. [`PlantedFds::probe`] is the `sh` script the code runs
//! inside to find and use them; [`PlantedFds::assert_none_leaked`] fails with what got
//! through.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The planted descriptors (kept open for the life of the test process).
pub struct PlantedFds {
    /// `(fd, what)` for each planted descriptor.
    pub fds: Vec<(i32, &'static str)>,
    /// The secret in the root-only file.
    pub secret: String,
    /// The file open for append; it must stay empty.
    pub append_path: PathBuf,
    secret_fd: i32,
    dir_fd: i32,
    append_fd: i32,
    _keep: Vec<OwnedFd>,
    _dir: tempfile::TempDir,
}

fn inheritable(fd: OwnedFd) -> OwnedFd {
    nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .expect("clear FD_CLOEXEC");
    fd
}

/// The descriptors of this test process, planted on first use.
pub fn planted() -> &'static PlantedFds {
    static PLANTED: OnceLock<PlantedFds> = OnceLock::new();
    PLANTED.get_or_init(plant)
}

fn plant() -> PlantedFds {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = format!("stockade-secret-{}", std::process::id());
    let secret_path = dir.path().join("root-only");
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&secret_path)
        .expect("create the root-only file");
    f.write_all(secret.as_bytes()).unwrap();
    drop(f);
    let append_path = dir.path().join("append-only");
    File::create(&append_path).unwrap();
    let secret_fd = inheritable(File::open(&secret_path).unwrap().into());
    let dir_fd = inheritable(File::open("/").unwrap().into());
    let append_fd = inheritable(
        OpenOptions::new()
            .append(true)
            .open(&append_path)
            .unwrap()
            .into(),
    );
    let (sock, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
    let sock = inheritable(sock.into());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listener = inheritable(listener.into());
    let (pipe_r, pipe_w) = nix::unistd::pipe().unwrap();
    let (pipe_r, pipe_w) = (inheritable(pipe_r), inheritable(pipe_w));
    let fds = vec![
        (secret_fd.as_raw_fd(), "root-only file"),
        (dir_fd.as_raw_fd(), "directory /"),
        (append_fd.as_raw_fd(), "append file"),
        (sock.as_raw_fd(), "unix socket"),
        (listener.as_raw_fd(), "listening tcp socket"),
        (pipe_r.as_raw_fd(), "pipe read end"),
        (pipe_w.as_raw_fd(), "pipe write end"),
    ];
    PlantedFds {
        fds,
        secret,
        append_path,
        secret_fd: secret_fd.as_raw_fd(),
        dir_fd: dir_fd.as_raw_fd(),
        append_fd: append_fd.as_raw_fd(),
        _keep: vec![secret_fd, dir_fd, append_fd, sock, listener, pipe_r, pipe_w],
        _dir: dir,
    }
}

impl PlantedFds {
    /// An `sh` script for the code inside: names every planted descriptor it holds,
    /// reads the secret through it, lists the host's `/` through the directory,
    /// appends to the host file, and prints `FDS:` with the descriptors a fresh
    /// process holds (`ls` itself adds one, 3, for the directory it lists).
    pub fn probe(&self) -> String {
        let mut s = self.probe_planted();
        s.push_str("echo \"FDS: $(ls /proc/self/fd | tr '\\n' ' ')\"\n");
        s
    }

    /// [`probe`](Self::probe) for gVisor 2022, whose `ls` cannot list `/proc/self/fd`
    /// (gVisor answers `EINVAL` to the `statx` with `AT_NO_AUTOMOUNT` that Debian 12's
    /// `ls` makes on a `/proc` path): the last line lists the descriptors by the
    /// shell's own glob in a fresh subshell (`opendir`, which holds 3 as `ls` does),
    /// so an inherited descriptor still shows there, and fails the check.
    pub fn probe_by_glob(&self) -> String {
        let mut s = self.probe_planted();
        s.push_str("echo \"FDS: $(cd /proc/self/fd && echo *)\"\n");
        s
    }

    /// The probe's lines for each planted descriptor.
    fn probe_planted(&self) -> String {
        let mut s = String::new();
        for (fd, what) in &self.fds {
            s.push_str(&format!(
                "[ -e /proc/self/fd/{fd} ] && echo \"LEAK fd {fd} ({what}) -> $(readlink /proc/self/fd/{fd})\"\n"
            ));
        }
        s.push_str(&format!(
            "[ -e /proc/self/fd/{0} ] && head -c 100 <&{0}; echo\n",
            self.secret_fd
        ));
        s.push_str(&format!(
            "[ -e /proc/self/fd/{0} ] && echo \"HOST ROOT: $(ls /proc/self/fd/{0}/ | tr '\\n' ' ')\"\n",
            self.dir_fd
        ));
        s.push_str(&format!(
            "[ -e /proc/self/fd/{0} ] && echo PWNED >&{0}\n",
            self.append_fd
        ));
        s
    }

    /// Fails with what leaked, given the probe's stdout.
    pub fn assert_none_leaked(&self, stdout: &str) {
        assert!(
            !stdout.contains("LEAK") && !stdout.contains(&self.secret),
            "the caller's descriptors reached the sandboxed code:\n{stdout}"
        );
        assert!(
            !stdout.contains("HOST ROOT"),
            "the code listed the host's / through an inherited directory:\n{stdout}"
        );
        let appended = std::fs::read_to_string(&self.append_path).unwrap_or_default();
        assert!(
            appended.is_empty(),
            "the code appended to a host file through an inherited descriptor: {appended:?}"
        );
        let fds = stdout
            .lines()
            .find_map(|l| l.strip_prefix("FDS:"))
            .unwrap_or_else(|| panic!("the probe did not run to the end:\n{stdout}"));
        assert_eq!(
            fds.split_whitespace().collect::<Vec<_>>(),
            ["0", "1", "2", "3"],
            "a process inside must start with stdin, stdout and stderr only (3 is ls's own directory):\n{stdout}"
        );
    }
}
