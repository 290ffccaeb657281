use super::*;

fn record(tenant: &str, name: &str, id: &str) -> Built {
    Built {
        tenant: tenant.into(),
        template_id: id.into(),
        name: name.into(),
        tags: vec!["default".into()],
        build_id: format!("build-{id}"),
        image: String::new(),
        env: BTreeMap::new(),
        workdir: "/home/user".into(),
        user: "user".into(),
        start_cmd: None,
        ready_cmd: None,
        cpus: None,
        memory_mb: None,
        created_ms: 1,
        snapshot_of: None,
        home: None,
        owns_image: true,
        allow: Vec::new(),
        pids: None,
    }
}

fn ids(t: &Templates) -> Vec<String> {
    lock(&t.built)
        .iter()
        .map(|b| b.template_id.clone())
        .collect()
}

#[test]
fn a_name_taken_again_replaces_the_tenants_record_only_and_a_failed_save_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("stockade-templates-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t = Templates::open(dir.clone()).unwrap();
    assert!(t.replace(record("a", "web", "t1")).unwrap().is_empty());
    assert!(t.replace(record("b", "web", "t2")).unwrap().is_empty());
    let old = t.replace(record("a", "web", "t3")).unwrap();
    assert_eq!(old.len(), 1);
    assert_eq!(old[0].template_id, "t1");
    assert_eq!(ids(&t), ["t2", "t3"]);
    // What was saved reads back.
    assert_eq!(ids(&Templates::open(dir.clone()).unwrap()), ["t2", "t3"]);
    // The list cannot be written (its temporary name is taken by a directory): the
    // record comes back with the error and the list is as it was, in memory and on disk.
    std::fs::create_dir(dir.join("index.json.tmp")).unwrap();
    let failed = t.replace(record("a", "web", "t4")).unwrap_err();
    assert_eq!(failed.0.template_id, "t4");
    assert_eq!(ids(&t), ["t2", "t3"]);
    std::fs::remove_dir(dir.join("index.json.tmp")).unwrap();
    assert_eq!(ids(&Templates::open(dir.clone()).unwrap()), ["t2", "t3"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
