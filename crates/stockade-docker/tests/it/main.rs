//! The docker provider against a real dockerd: hardening as reported and as seen from
//! inside, attacks that fail the test when they succeed, images, errors, gc.
//!
//! Needs root, dockerd and the test image (crates/stockade-docker/ci-setup.sh). In CI
//! a missing part fails the tests; elsewhere they are skipped loudly.

mod attacks;
mod egress;
mod kernel;
mod lifecycle;
mod pause;
mod restart;
mod userns;

use std::sync::Arc;

use stockade_core::{CreateOptions, Provider, Sandbox, SandboxSpec};
use stockade_docker::{DockerLauncher, DockerProvider};
use stockade_testkit::{DOCKER_FIX, docker_test_image, require, root};

/// The test image, or `None` (after a SKIPPED line) when a part is missing outside CI.
pub fn image() -> Option<String> {
    require("root", root(), "run the tests as root")?;
    require(
        "dockerd and the docker test image",
        docker_test_image(),
        DOCKER_FIX,
    )
}

pub fn provider() -> Arc<DockerProvider> {
    Arc::new(DockerProvider::new())
}

pub fn spec(image: &str) -> SandboxSpec {
    SandboxSpec {
        image: Some(image.to_string()),
        ..Default::default()
    }
}

pub async fn sandbox(spec: SandboxSpec) -> Sandbox {
    let opts = CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    Sandbox::create(provider() as Arc<dyn Provider>, spec, opts)
        .await
        .expect("create sandbox")
}

pub use stockade_testkit::{py, sh, text};

/// The names of the containers of a sandbox still known to dockerd.
pub fn container_exists(id: &str) -> bool {
    std::process::Command::new("/usr/bin/docker")
        .args(["inspect", &stockade_docker::container_name(id)])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}
