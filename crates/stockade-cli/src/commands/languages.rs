//! `stockade languages`: which languages run here with the provider commands use, and
//! how (the host's interpreter, an image in the store, an image pulled on first use,
//! a WASI runtime), with the one fix for those that do not run yet.

use stockade::Result;
use stockade::languages::LanguageSupport;

use super::{Ctx, image};

/// Every language of the table on the provider `run` would use.
pub fn rows(ctx: &Ctx) -> Result<Vec<LanguageSupport>> {
    let store = image::store(ctx)?;
    let home = ctx
        .home
        .clone()
        .unwrap_or_else(stockade::host::stockade_home);
    stockade::languages::languages(&ctx.provider_name(), &store, &home)
}

/// Prints `rows` as a table.
pub fn print(rows: &[LanguageSupport]) {
    println!("{:<11} {:<12} {:<5} DETAIL", "LANGUAGE", "HOW", "READY");
    for r in rows {
        let how = serde_json::to_value(r.how)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        println!(
            "{:<11} {:<12} {:<5} {}",
            r.language,
            how,
            if r.ready { "yes" } else { "no" },
            r.detail
        );
        if let Some(fix) = &r.fix {
            println!("{:<30} fix: {fix}", "");
        }
    }
}

pub fn run(ctx: &Ctx) -> Result<i32> {
    let rows = rows(ctx)?;
    if ctx.json {
        println!("{}", serde_json::to_string(&rows).unwrap_or_default());
    } else {
        println!("languages on the {} provider:", ctx.provider_name());
        print(&rows);
    }
    Ok(0)
}
