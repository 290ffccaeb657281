//! The host-side file API: write, read, edit, ls, glob, grep, copy, mkdir, remove.

use stockade_core::ErrorCode;
use stockade_spec::Mount;
use stockade_wasm::FileKind;

use crate::support::{create, guest, provider, run, spec, text};

#[tokio::test]
async fn file_operations_round_trip_with_the_guest() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("readme.md"), "# data\nTODO: nothing\n").unwrap();
    let mut s = spec(&g);
    s.mounts = vec![Mount {
        host: data.path().to_path_buf(),
        target: "/data".into(),
        writable: false,
    }];
    let id = create(&p, s).await;

    p.write_file(&id, "/tmp/src/main.py", b"print('hi')\n# TODO: more\n")
        .await
        .unwrap();
    p.write_file(&id, "notes.txt", b"relative to the workdir\n")
        .await
        .unwrap();
    let out = run(&p, &id, &["g", "cat", "/tmp/src/main.py"]).await;
    assert_eq!(text(&out.stdout), "print('hi')\n# TODO: more\n");
    assert_eq!(
        p.read_file(&id, "/tmp/notes.txt").await.unwrap(),
        b"relative to the workdir\n"
    );
    assert_eq!(
        p.read_range(&id, "/tmp/notes.txt", 9, 6).await.unwrap(),
        b"to the"
    );

    // What the guest writes, the API reads.
    run(&p, &id, &["g", "write", "/tmp/from-guest", "g"]).await;
    assert_eq!(p.read_file(&id, "/tmp/from-guest").await.unwrap(), b"g");

    assert_eq!(
        p.edit_file(&id, "/tmp/src/main.py", "hi", "hello", false)
            .await
            .unwrap(),
        1
    );
    let err = p
        .edit_file(&id, "/tmp/src/main.py", "absent", "x", false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not in /tmp/src/main.py"), "{err}");
    p.write_file(&id, "/tmp/twice", b"a a").await.unwrap();
    let err = p
        .edit_file(&id, "/tmp/twice", "a", "b", false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("occurs 2 times"), "{err}");
    assert_eq!(
        p.edit_file(&id, "/tmp/twice", "a", "b", true)
            .await
            .unwrap(),
        2
    );
    assert_eq!(p.read_file(&id, "/tmp/twice").await.unwrap(), b"b b");

    let ls = p.list_dir(&id, "/tmp").await.unwrap();
    let names: Vec<_> = ls.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    assert_eq!(
        names,
        [
            ("from-guest", FileKind::File),
            ("notes.txt", FileKind::File),
            ("src", FileKind::Dir),
            ("twice", FileKind::File)
        ]
    );
    let root: Vec<_> = p
        .list_dir(&id, "/")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(root, ["data", "tmp"]);

    assert_eq!(
        p.glob(&id, "**/*.py", None).await.unwrap(),
        ["/tmp/src/main.py"]
    );
    assert_eq!(
        p.glob(&id, "*.py", None).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        p.glob(&id, "/data/*.md", None).await.unwrap(),
        ["/data/readme.md"]
    );

    let hits = p.grep(&id, "TODO", Some("/"), None, 10).await;
    assert!(hits.is_err(), "/ itself is not a directory of the sandbox");
    let hits = p.grep(&id, "TODO", Some("/tmp"), None, 10).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        (hits[0].path.as_str(), hits[0].line_number),
        ("/tmp/src/main.py", 2)
    );
    let hits = p
        .grep(&id, "TODO", Some("/data"), Some("*.md"), 10)
        .await
        .unwrap();
    assert_eq!(hits[0].line, "TODO: nothing");

    assert_eq!(
        p.copy(&id, "/data/readme.md", "/tmp/copy.md")
            .await
            .unwrap(),
        21
    );
    p.copy(&id, "/tmp/src", "/tmp/src2").await.unwrap();
    assert_eq!(
        p.read_file(&id, "/tmp/src2/main.py").await.unwrap(),
        b"print('hello')\n# TODO: more\n"
    );
    let err = p.copy(&id, "/tmp/copy.md", "/data/x.md").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::PolicyDenied);

    p.mkdir(&id, "/tmp/a/b/c").await.unwrap();
    let err = p.remove(&id, "/tmp/a", false).await.unwrap_err();
    assert!(err.to_string().contains("/tmp/a"), "{err}");
    p.remove(&id, "/tmp/a", true).await.unwrap();
    let err = p.remove(&id, "/tmp", true).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::PolicyDenied);
    assert_eq!(
        p.read_file(&id, "/tmp/a").await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    assert_eq!(
        p.read_file(&id, "/tmp/missing").await.unwrap_err().code(),
        ErrorCode::NotFound
    );
}

/// The same `Provider::file` API as the Linux providers.
#[tokio::test]
async fn the_provider_file_api_matches_the_linux_providers() {
    use stockade_core::{FileOp, FileResult, Provider};
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let id = create(&p, spec(&g)).await;
    let file = |op| p.file(&id, op);
    file(FileOp::Write {
        path: "/tmp/a/b.txt".into(),
        data: b"one two one\n".to_vec(),
        mode: None,
    })
    .await
    .unwrap();
    match file(FileOp::Read {
        path: "/tmp/a/b.txt".into(),
        offset: 4,
        limit: 3,
    })
    .await
    .unwrap()
    {
        FileResult::Data { data, size, eof } => {
            assert_eq!((data.as_slice(), size, eof), (&b"two"[..], 12, false));
        }
        other => panic!("{other:?}"),
    }
    let err = file(FileOp::Edit {
        path: "/tmp/a/b.txt".into(),
        old: "one".into(),
        new: "1".into(),
        replace_all: false,
    })
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidSpec, "{err}");
    assert_eq!(
        file(FileOp::Edit {
            path: "/tmp/a/b.txt".into(),
            old: "one".into(),
            new: "1".into(),
            replace_all: true
        })
        .await
        .unwrap(),
        FileResult::Edited { replacements: 2 }
    );
    match file(FileOp::Ls {
        path: "/tmp/a".into(),
    })
    .await
    .unwrap()
    {
        FileResult::Entries(e) => assert_eq!(
            (e[0].name.as_str(), e[0].kind, e[0].size),
            ("b.txt", stockade_core::FileKind::File, 8)
        ),
        other => panic!("{other:?}"),
    }
    match file(FileOp::Grep {
        regex: "two".into(),
        root: "/tmp".into(),
        include: None,
        max_matches: 0,
    })
    .await
    .unwrap()
    {
        FileResult::Matches { matches, truncated } => assert_eq!(
            (matches.len(), truncated, matches[0].line_number),
            (1, false, 1)
        ),
        other => panic!("{other:?}"),
    }
    let err = file(FileOp::Download {
        path: "/tmp".into(),
    })
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Unavailable, "{err}");
    p.destroy(&id).await.unwrap();
}
