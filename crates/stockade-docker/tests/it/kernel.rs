//! The kernel surface a docker sandbox must not reach: the same probe as the native
//! suite (socket families, native AIO, POSIX message queues), as the default user and
//! as root inside (`--user 0`), where docker's own profile alone would allow most of it.

use stockade_spec::User;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unneeded_socket_families_and_shared_kernel_resources_are_refused() {
    let Some(image) = image() else { return };
    for user in [User::default(), User { uid: 0, gid: 0 }] {
        let mut s = spec(&image);
        s.user = user;
        let sb = sandbox(s).await;
        let out = py(&sb, stockade_testkit::KERNEL_SURFACE_PROBE, 60_000).await;
        stockade_testkit::assert_kernel_surface_blocked(&text(&out.stdout), &text(&out.stderr));
        sb.destroy().await.unwrap();
    }
}
