//! `stockade doctor`

use serde_json::json;
use stockade::Result;

use super::Ctx;

fn wasm_row() -> (&'static str, bool, String) {
    match stockade::wasm::list_runtimes() {
        Ok(l) => {
            let py = l.runtimes.iter().any(|r| r.installed);
            let detail = if py {
                "usable; python-wasm installed".to_string()
            } else {
                "usable for .wasm modules; for python: stockade runtime install python-wasm"
                    .to_string()
            };
            ("wasm", true, detail)
        }
        Err(e) => ("wasm", false, e.to_string()),
    }
}

async fn docker_row() -> (&'static str, bool, String) {
    use stockade::Provider as _;
    match stockade::DockerProvider::new().probe().await {
        Ok(checks) => {
            let failing: Vec<String> = checks
                .iter()
                .filter(|c| !c.ok)
                .map(|c| match &c.fix {
                    Some(f) => format!("{}: {} (fix: {f})", c.name, c.detail),
                    None => format!("{}: {}", c.name, c.detail),
                })
                .collect();
            if failing.is_empty() {
                let detail = checks
                    .iter()
                    .map(|c| c.detail.clone())
                    .collect::<Vec<_>>()
                    .join("; ");
                ("docker", true, format!("usable; {detail}"))
            } else {
                ("docker", false, failing.join("; "))
            }
        }
        Err(e) => ("docker", false, e.to_string()),
    }
}

pub async fn run(ctx: &Ctx) -> Result<i32> {
    let checks = stockade_native::host_checks();
    let ok = |name: &str| checks.iter().any(|c| c.name == name && c.ok);
    let native = [
        "root",
        "namespaces",
        "cgroups",
        "landlock",
        "seccomp",
        "stockade-agent",
    ]
    .iter()
    .all(|n| ok(n));
    let providers = vec![
        (
            "native",
            native,
            if native {
                "usable".to_string()
            } else {
                "needs the failing checks above".to_string()
            },
        ),
        docker_row().await,
        ("microvm", false, "not built into this version".to_string()),
        wasm_row(),
    ];
    if ctx.json {
        let p: Vec<_> = providers
            .iter()
            .map(|(n, u, d)| json!({"name": n, "usable": u, "detail": d}))
            .collect();
        println!("{}", json!({"checks": checks, "providers": p}));
    } else {
        for c in &checks {
            println!(
                "{} {:<24} {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.name,
                c.detail
            );
            if let Some(f) = &c.fix {
                println!("     {:<24} fix: {f}", "");
            }
        }
        println!();
        for (n, u, d) in &providers {
            println!(
                "provider {n:<8} {} ({d})",
                if *u { "usable" } else { "unavailable" }
            );
        }
    }
    Ok(if native { 0 } else { 1 })
}
