//! `serve --metrics ADDR`: a real Prometheus (Debian's package) scrapes the server's metrics
//! and answers queries of them.
//!
//! Without `prometheus` the test says so and passes, except under CI (`CI` set), where that is
//! a failure: `scripts/test.sh` installs it on Debian.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Server, count, raw_get};

/// A Prometheus scraping `target` every second, on a loopback port; stopped when dropped.
struct Prometheus {
    child: Child,
    address: String,
    _root: llm_worker_tests::ScratchDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn start(target: &str) -> Option<Self> {
        let Some(program) = find_program("prometheus") else {
            if std::env::var_os("CI").is_some() {
                panic!("prometheus is not installed, and CI is set: scripts/test.sh installs it");
            }
            eprintln!(
                "SKIPPED: prometheus is not installed (scripts/test.sh installs it on Debian)"
            );
            return None;
        };
        let root = llm_worker_tests::scratch_dir("prometheus");
        let config = root.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - \
                 job_name: llm-worker\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("config");
        // A free port, given back before Prometheus takes it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let address = format!("127.0.0.1:{port}");
        let child = Command::new(program)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                root.join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        Some(Self {
            child,
            address,
            _root: root,
        })
    }

    /// The value of the instant query `query`, once Prometheus has one (within a minute).
    fn value(&self, query: &str) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        let path = format!("/api/v1/query?query={}", url_encode(query));
        loop {
            if std::net::TcpStream::connect(&self.address).is_ok() {
                let (status, body) = raw_get(&self.address, &path);
                if status.contains("200")
                    && let Ok(answer) = serde_json::from_str::<Value>(&body)
                    && let Some(value) = answer["data"]["result"][0]["value"][1].as_str()
                {
                    return value.parse().expect("a number");
                }
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus had no value for {query} within a minute"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn find_program(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_servers_metrics() {
    let server = Server::start(
        "http-metrics",
        &["counter"],
        "127.0.0.1:0",
        &["--metrics", "127.0.0.1:0"],
    )
    .await;
    let metrics = server
        .startup
        .lines()
        .find_map(|line| line.strip_prefix("llm-worker: metrics on http://"))
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no metrics address in: {}", server.startup))
        .to_owned();
    let client = server.client().await;
    for expected in ["0", "1", "2"] {
        assert_eq!(count(&client).await, expected);
    }
    let (status, text) = raw_get(&metrics, "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(text.contains("llm_worker_requests_total"), "{text}");
    assert!(raw_get(&metrics, "/other").0.contains("404"));

    let Some(prometheus) = Prometheus::start(&metrics) else {
        return;
    };
    let scraped = tokio::task::spawn_blocking(move || {
        (
            prometheus.value(r#"up{job="llm-worker"}"#),
            prometheus.value(
                r#"llm_worker_requests_total{event="tools/call",plugin="counter",target="count",outcome="ok"}"#,
            ),
            prometheus.value("llm_worker_sessions"),
        )
    })
    .await
    .expect("queries");
    assert_eq!(scraped, (1.0, 3.0, 1.0));
    client.cancel().await.expect("close");
    server.stop().await;
}
