//! The monitor's control socket for a policy sandbox: what the policy refused (read
//! back from the firewall's deny sets) and a new policy, applied at once.

use super::*;

pub(super) fn serve_control(sh: &Shared, control: &UnixListener) {
    for conn in control.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
        let mut line = String::new();
        if BufReader::new(&conn).read_line(&mut line).is_err() {
            continue;
        }
        let reply = match serde_json::from_str::<NetRequest>(&line) {
            Ok(NetRequest::Denials { since_ms }) => match denials(sh, since_ms) {
                Ok(d) => NetReply::Denials(d),
                Err(e) => NetReply::Failed(e),
            },
            Ok(NetRequest::SetPolicy {
                firewall,
                policy,
                network,
            }) => match set_policy(sh, &firewall, policy, network) {
                Ok(()) => NetReply::Done,
                Err(e) => NetReply::Failed(e),
            },
            Err(e) => NetReply::Failed(format!("bad request: {e}")),
        };
        let _ = conn.write_all(&serde_json::to_vec(&reply).unwrap_or_default());
    }
}

/// Every denial at or after `since_ms`: lookups from memory, connections from the
/// deny chains' sets.
pub(super) fn denials(sh: &Shared, since_ms: u64) -> Result<Vec<EgressDenial>, String> {
    let text = {
        let _g = sh.nft_lock.lock();
        sh.run_nft(&["list", "table", "inet", "stockade"], None)?
    };
    let now = now_ms();
    let resolved = sh.resolved.lock().map(|r| r.clone()).unwrap_or_default();
    let mut out: Vec<EgressDenial> = sh
        .recorded
        .lock()
        .map(|d| d.iter().filter(|d| d.at_ms >= since_ms).cloned().collect())
        .unwrap_or_default();
    for (set, elems) in parse_set_elements(&text) {
        let Some((_, rule)) = DENY_CHAINS
            .iter()
            .find(|(c, _)| set.strip_prefix(c).is_some_and(|f| f == "4" || f == "6"))
        else {
            continue;
        };
        for e in elems {
            let at_ms = now.saturating_sub(e.timeout_ms.saturating_sub(e.expires_ms));
            if at_ms < since_ms {
                continue;
            }
            let name = e
                .addr
                .parse::<IpAddr>()
                .ok()
                .and_then(|ip| resolved.get(&ip).map(|(n, _)| n.clone()));
            out.push(EgressDenial {
                at_ms,
                protocol: e.proto,
                destination: e.addr,
                port: Some(e.port),
                name,
                rule: (*rule).to_string(),
            });
        }
    }
    out.sort_by_key(|d| d.at_ms);
    // One entry per destination, name and rule (a lookup asks for A and AAAA): the
    // latest.
    let mut seen = std::collections::HashSet::new();
    let mut dedup: Vec<EgressDenial> = out
        .into_iter()
        .rev()
        .filter(|d| {
            seen.insert((
                d.protocol.clone(),
                d.destination.clone(),
                d.port,
                d.name.clone(),
                d.rule.clone(),
            ))
        })
        .collect();
    dedup.reverse();
    Ok(dedup)
}

/// One element of a deny set as `nft list` prints it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct DeniedElem {
    pub(super) addr: String,
    pub(super) proto: String,
    pub(super) port: u16,
    pub(super) timeout_ms: u64,
    pub(super) expires_ms: u64,
}

/// The elements of each set in `nft list table` output.
pub(super) fn parse_set_elements(text: &str) -> Vec<(String, Vec<DeniedElem>)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("set ") {
        rest = &rest[i + 4..];
        let name: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
        let end = rest
            .find("\n\t}")
            .or_else(|| rest.find("\n  }"))
            .unwrap_or(rest.len());
        let body = &rest[..end];
        let mut elems = Vec::new();
        if let Some(j) = body.find("elements = {") {
            let list = &body[j + "elements = {".len()..];
            let list = list.split('}').next().unwrap_or("");
            for e in list.split(',') {
                if let Some(d) = parse_elem(e) {
                    elems.push(d);
                }
            }
        }
        out.push((name, elems));
        rest = &rest[end..];
    }
    out
}

pub(super) fn parse_elem(e: &str) -> Option<DeniedElem> {
    let words: Vec<&str> = e.split_whitespace().collect();
    // ADDR . PROTO . PORT timeout T expires E
    if words.len() < 5 || words[1] != "." || words[3] != "." {
        return None;
    }
    let proto = match words[2] {
        "6" => "tcp",
        "17" => "udp",
        p => p,
    }
    .to_string();
    let port = words[4].parse().ok()?;
    let field = |k: &str| {
        words
            .iter()
            .position(|w| *w == k)
            .and_then(|i| words.get(i + 1))
            .and_then(|v| parse_duration_ms(v))
    };
    Some(DeniedElem {
        addr: words[0].to_string(),
        proto,
        port,
        // Printed only when it differs from the set's own (one hour).
        timeout_ms: field("timeout").unwrap_or(DENY_SET_TIMEOUT_MS),
        expires_ms: field("expires").unwrap_or(0),
    })
}

/// nft's durations: `1h`, `59m59s987ms`, `3d2h`.
pub(super) fn parse_duration_ms(s: &str) -> Option<u64> {
    let mut total = 0u64;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: u64 = num.parse().ok()?;
        num.clear();
        let unit = match c {
            'd' => 86_400_000,
            'h' => 3_600_000,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                1
            }
            'm' => 60_000,
            's' => 1000,
            _ => return None,
        };
        total += n * unit;
    }
    num.is_empty().then_some(total)
}

/// Replaces the ruleset in one transaction, the resolver's rules, and the spec's
/// `network` in `state.json`. Addresses resolved before stay open only where the new
/// policy still allows their name.
pub(super) fn set_policy(
    sh: &Shared,
    firewall: &str,
    policy: EgressPlan,
    network: serde_json::Value,
) -> Result<(), String> {
    let mut batch = String::from("add table inet stockade\ndelete table inet stockade\n");
    batch.push_str(firewall);
    {
        let _g = sh.nft_lock.lock();
        sh.run_nft(&["-f", "-"], Some(&batch))?;
        if let Ok(mut p) = sh.policy.lock() {
            *p = policy.clone();
        }
    }
    let now = Instant::now();
    let kept: Vec<(IpAddr, String, u32)> = sh
        .resolved
        .lock()
        .map(|r| {
            r.iter()
                .filter(|(_, (_, until))| *until > now)
                .map(|(ip, (n, until))| (*ip, n.clone(), (*until - now).as_secs().max(1) as u32))
                .collect()
        })
        .unwrap_or_default();
    for (ip, name, ttl) in kept {
        if policy.deny.iter().any(|r| r.matches(&name)) {
            continue;
        }
        let rules: Vec<&NameRule> = policy.allow.iter().filter(|r| r.matches(&name)).collect();
        if !rules.is_empty() {
            open_addresses(sh, &[(ip, ttl)], &rules)?;
        }
    }
    let path = sh.state_dir.join("state.json");
    if let Ok(text) = fs::read_to_string(&path)
        && let Ok(mut st) = serde_json::from_str::<serde_json::Value>(&text)
    {
        st["spec"]["network"] = network;
        let tmp = sh.state_dir.join("state.json.net");
        if fs::write(&tmp, serde_json::to_vec_pretty(&st).unwrap_or_default()).is_ok() {
            let _ = fs::rename(&tmp, &path);
        }
    }
    Ok(())
}
