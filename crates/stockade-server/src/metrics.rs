//! Prometheus metrics (text format 0.0.4) and the small HTTP server of `/metrics`.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::daemon::ReapReason;

/// Upper bounds of the latency buckets, seconds.
const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// A latency histogram.
#[derive(Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| s <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cum += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        let n = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count {n}");
    }
}

/// Every metric of the daemon.
#[derive(Default)]
pub struct Metrics {
    pub creates_ok: AtomicU64,
    pub creates_failed: AtomicU64,
    pub pool_hits: AtomicU64,
    pub pool_misses: AtomicU64,
    pub execs: AtomicU64,
    pub exec_errors: AtomicU64,
    pub exec_seconds: Histogram,
    pub create_seconds: Histogram,
    pub acquire_seconds: Histogram,
    /// Reaps by reason.
    reaps: Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

/// Gauges read at scrape time.
pub struct Gauges {
    pub live: usize,
    pub idle: usize,
    pub creating: usize,
    pub running_execs: usize,
}

impl Metrics {
    /// Counts a sandbox the daemon destroyed on its own.
    pub fn reaped(&self, reason: ReapReason) {
        if let Ok(mut m) = self.reaps.lock() {
            *m.entry(reason.as_str()).or_default() += 1;
        }
    }

    /// The reaps counted for `reason`.
    pub fn reaps(&self, reason: ReapReason) -> u64 {
        self.reaps
            .lock()
            .map(|m| m.get(reason.as_str()).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// The text exposition.
    pub fn render(&self, g: &Gauges) -> String {
        let mut o = String::new();
        let gauge = |o: &mut String, name: &str, help: &str, v: usize| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        gauge(
            &mut o,
            "stockade_sandboxes_live",
            "Sandboxes handed out to tenants.",
            g.live,
        );
        gauge(
            &mut o,
            "stockade_pool_idle",
            "Warm sandboxes waiting in pools.",
            g.idle,
        );
        gauge(
            &mut o,
            "stockade_pool_creating",
            "Pool sandboxes being created.",
            g.creating,
        );
        gauge(
            &mut o,
            "stockade_execs_running",
            "Streamed execs running.",
            g.running_execs,
        );
        let _ = writeln!(
            o,
            "# HELP stockade_creates_total Sandboxes created, by result.\n# TYPE stockade_creates_total counter"
        );
        let _ = writeln!(
            o,
            "stockade_creates_total{{result=\"ok\"}} {}",
            self.creates_ok.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "stockade_creates_total{{result=\"error\"}} {}",
            self.creates_failed.load(Ordering::Relaxed)
        );
        for (name, help, v) in [
            (
                "stockade_pool_hits_total",
                "Creates served by a warm sandbox.",
                &self.pool_hits,
            ),
            (
                "stockade_pool_misses_total",
                "Creates with a pool of that template but no warm sandbox.",
                &self.pool_misses,
            ),
            ("stockade_execs_total", "Execs run.", &self.execs),
            (
                "stockade_exec_errors_total",
                "Execs that failed (not a non-zero exit).",
                &self.exec_errors,
            ),
        ] {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            o,
            "# HELP stockade_reaps_total Sandboxes reaped by the daemon, by reason.\n# TYPE stockade_reaps_total counter"
        );
        if let Ok(m) = self.reaps.lock() {
            for (reason, n) in m.iter() {
                let _ = writeln!(o, "stockade_reaps_total{{reason=\"{reason}\"}} {n}");
            }
        }
        self.exec_seconds.render(
            &mut o,
            "stockade_exec_duration_seconds",
            "Exec round trip inside the daemon.",
        );
        self.create_seconds.render(
            &mut o,
            "stockade_create_duration_seconds",
            "Sandbox creation by the provider.",
        );
        self.acquire_seconds.render(
            &mut o,
            "stockade_pool_acquire_duration_seconds",
            "Handing over a warm sandbox.",
        );
        o
    }
}

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub async fn serve_http(
    listener: TcpListener,
    render: impl Fn() -> String + Send + Sync + 'static,
) {
    let render = std::sync::Arc::new(render);
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut n = 0;
            // Read the request head (bounded, with a deadline).
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while n < buf.len() {
                    let m = conn.read(&mut buf[n..]).await?;
                    if m == 0 {
                        break;
                    }
                    n += m;
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            if !matches!(read, Ok(Ok(()))) {
                return;
            }
            let head = String::from_utf8_lossy(&buf[..n]);
            let path = head.split_whitespace().nth(1).unwrap_or("");
            let (status, body) = if head.starts_with("GET ") && path == "/metrics" {
                ("200 OK", render())
            } else {
                ("404 Not Found", "not found; try /metrics\n".to_string())
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(resp.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_counters_gauges_and_cumulative_buckets() {
        let m = Metrics::default();
        m.creates_ok.fetch_add(3, Ordering::Relaxed);
        m.reaped(ReapReason::Lifetime);
        m.reaped(ReapReason::Lifetime);
        m.exec_seconds.observe(Duration::from_micros(700));
        m.exec_seconds.observe(Duration::from_millis(20));
        let t = m.render(&Gauges {
            live: 2,
            idle: 1,
            creating: 0,
            running_execs: 0,
        });
        assert!(t.contains("stockade_sandboxes_live 2\n"), "{t}");
        assert!(t.contains("stockade_creates_total{result=\"ok\"} 3\n"));
        assert!(t.contains("stockade_reaps_total{reason=\"lifetime\"} 2\n"));
        assert!(t.contains("stockade_exec_duration_seconds_bucket{le=\"0.0005\"} 0\n"));
        assert!(t.contains("stockade_exec_duration_seconds_bucket{le=\"0.001\"} 1\n"));
        assert!(t.contains("stockade_exec_duration_seconds_bucket{le=\"0.025\"} 2\n"));
        assert!(t.contains("stockade_exec_duration_seconds_count 2\n"));
        assert_eq!(m.reaps(ReapReason::Lifetime), 2);
    }
}
