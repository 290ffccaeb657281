//! `stockade doctor`: every provider of this build checks the host (`probe`); with a
//! daemon configured, the daemon is checked too.

use serde_json::{Value, json};
use stockade::{Check, Provider as _, Result};

use super::Ctx;

/// One provider's verdict.
struct Row {
    name: String,
    usable: bool,
    detail: String,
    checks: Vec<Check>,
}

/// Probes `name`: usable when it can be built, its probe answers, and every check it
/// reports passes.
async fn probe(ctx: &Ctx, name: &str) -> Row {
    let result = match ctx.local_provider(name) {
        Ok(p) => p.probe().await,
        Err(e) => Err(e),
    };
    match result {
        Ok(checks) => {
            let failing: Vec<&str> = checks
                .iter()
                .filter(|c| !c.ok)
                .map(|c| c.name.as_str())
                .collect();
            let detail = if failing.is_empty() {
                "every check passes".to_string()
            } else {
                format!("failing: {}", failing.join(", "))
            };
            Row {
                name: name.to_string(),
                usable: failing.is_empty(),
                detail,
                checks,
            }
        }
        Err(e) => Row {
            name: name.to_string(),
            usable: false,
            detail: e.to_string(),
            checks: Vec::new(),
        },
    }
}

pub async fn run(ctx: &Ctx) -> Result<i32> {
    let mut rows = Vec::new();
    for name in stockade::PROVIDERS {
        rows.push(probe(ctx, name).await);
    }
    let daemon = match &ctx.remote {
        Some(r) => Some(match r.probe().await {
            Ok(checks) => (true, checks),
            Err(e) => (false, vec![failed("stockaded", &e)]),
        }),
        None => None,
    };
    // The exit code answers "can `stockade run` work here": through the daemon when
    // one is configured, else on the provider this CLI would use.
    let chosen = ctx.provider_name();
    let languages = super::languages::rows(ctx);
    let ok = match &daemon {
        Some((answers, _)) => *answers,
        None => rows.iter().any(|r| r.name == chosen && r.usable),
    };
    if ctx.json {
        let checks: Vec<Value> = rows
            .iter()
            .flat_map(|r| r.checks.iter().map(|c| check_json(&r.name, c)))
            .collect();
        let providers: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({"name": r.name, "usable": r.usable, "detail": r.detail,
                       "verbs": verbs_of(&r.name)})
            })
            .collect();
        let mut out = json!({"checks": checks, "providers": providers});
        out["languages"] = match &languages {
            Ok(rows) => json!(rows),
            Err(e) => json!({"error": e.to_string()}),
        };
        if let Some((answers, checks)) = &daemon {
            out["daemon"] = json!({
                "usable": answers,
                "checks": checks.iter().map(|c| check_json("stockaded", c)).collect::<Vec<_>>(),
            });
        }
        println!("{out}");
    } else {
        for r in &rows {
            println!("provider {}:", r.name);
            print_checks(&r.checks);
        }
        if let Some((_, checks)) = &daemon {
            println!("daemon:");
            print_checks(checks);
        }
        println!();
        for r in &rows {
            println!(
                "provider {:<8} {} ({})",
                r.name,
                if r.usable { "usable" } else { "unavailable" },
                r.detail
            );
        }
        println!();
        for r in &rows {
            let verbs = verbs_of(&r.name).unwrap_or_default();
            let served: Vec<_> = stockade::Verb::ALL
                .into_iter()
                .filter(|v| verbs.has(*v))
                .map(stockade::Verb::title)
                .collect();
            println!(
                "provider {:<8} serves {}",
                r.name,
                if served.is_empty() {
                    "none of the optional verbs".to_string()
                } else {
                    served.join(", ")
                }
            );
        }
        match &languages {
            Ok(rows) => {
                println!("\nlanguages on the {chosen} provider:");
                super::languages::print(rows);
            }
            Err(e) => println!("\nlanguages: {e}"),
        }
        if let Some((answers, _)) = &daemon {
            println!(
                "daemon           {}",
                if *answers {
                    "answers: commands run through it (`--direct` runs in-process)"
                } else {
                    "does not answer"
                }
            );
        }
    }
    Ok(if ok { 0 } else { 1 })
}

/// The optional verbs provider `name` declares.
fn verbs_of(name: &str) -> Option<stockade::Verbs> {
    stockade::PROVIDER_VERBS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
}

fn failed(name: &str, e: &stockade::Error) -> Check {
    Check {
        name: name.to_string(),
        ok: false,
        detail: e.to_string(),
        fix: None,
    }
}

fn check_json(provider: &str, c: &Check) -> Value {
    json!({"provider": provider, "name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix})
}

fn print_checks(checks: &[Check]) {
    for c in checks {
        println!(
            "  {} {:<28} {}",
            if c.ok { "ok  " } else { "FAIL" },
            c.name,
            c.detail
        );
        if let Some(f) = &c.fix {
            println!("       {:<28} fix: {f}", "");
        }
    }
}
