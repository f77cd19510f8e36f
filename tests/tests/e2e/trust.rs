//! Trusting a stranger's plugin: a lock file approving exact bytes, secrets the plugin never
//! holds, and HTTP grants narrowed per tool.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llm_worker::*;
use llm_worker_tests::{host, plugin_path, scratch_dir, session};
use serde_json::json;

/// A directory with the counter and greet plugins, and a policy for greet.
fn plugin_dir(name: &str) -> PathBuf {
    let dir = scratch_dir(name);
    for plugin in ["counter", "greet"] {
        std::fs::copy(plugin_path(plugin), dir.join(format!("{plugin}.wasm"))).expect("copy");
    }
    std::fs::write(
        dir.join("greet.policy.toml"),
        "[limits]\ntimeout_ms = 5000\n",
    )
    .expect("policy");
    dir
}

fn lock(dir: &Path) {
    let loaded = host()
        .load_dir_with(
            dir,
            LoadDirOptions::default().ignore_lock(true),
            |_, _, _| {},
        )
        .expect("load");
    assert!(loaded.failures.is_empty(), "{:?}", loaded.failures);
    LockFile::of(dir, &loaded.plugins)
        .write(dir)
        .expect("write the lock");
}

fn not_approved(loaded: &PluginDir, file: &str) -> String {
    loaded
        .failures
        .iter()
        .find(|failure| {
            matches!(failure, PluginError::NotApproved { .. })
                && failure.path().is_some_and(|p| p.ends_with(file))
        })
        .map(ToString::to_string)
        .unwrap_or_else(|| panic!("{file} is not refused: {:?}", loaded.failures))
}

#[test]
fn a_locked_directory_loads_only_what_was_approved() {
    let dir = plugin_dir("lock");
    lock(&dir);
    let text = std::fs::read_to_string(dir.join(LOCK_FILE)).expect("lock file");
    assert!(
        text.contains("file = \"counter.wasm\"") && text.contains("tools = [\"greet\"]"),
        "{text}"
    );
    let loaded = host().load_dir(&dir).expect("load");
    assert_eq!(loaded.plugins.len(), 2, "{:?}", loaded.failures);

    // One byte changed in a plugin.
    let mut bytes = std::fs::read(dir.join("counter.wasm")).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(dir.join("counter.wasm"), &bytes).expect("write");
    // The policy changed.
    std::fs::write(
        dir.join("greet.policy.toml"),
        "[limits]\ntimeout_ms = 6000\n",
    )
    .expect("write");
    // A new plugin, not in the lock.
    std::fs::copy(plugin_path("calc"), dir.join("calc.wasm")).expect("copy");
    let loaded = host().load_dir(&dir).expect("load");
    assert!(loaded.plugins.is_empty());
    let counter = not_approved(&loaded, "counter.wasm");
    let lock_entry = LockFile::read(&dir).expect("read").expect("a lock");
    let old_hash = &lock_entry
        .plugins
        .iter()
        .find(|p| p.file == "counter.wasm")
        .expect("counter is locked")
        .sha256;
    assert!(
        counter.contains("changed since it was locked")
            && counter.contains(old_hash.as_str())
            && counter.contains("llm-worker lock"),
        "{counter}"
    );
    assert!(
        not_approved(&loaded, "greet.wasm").contains("policy"),
        "{loaded:?}"
    );
    assert!(not_approved(&loaded, "calc.wasm").contains("not in the lock"));

    // A locked plugin that is gone.
    std::fs::remove_file(dir.join("counter.wasm")).expect("remove");
    let loaded = host().load_dir(&dir).expect("load");
    assert!(not_approved(&loaded, "counter.wasm").contains("gone"));

    // The lock's differences, as `lock --check` prints them.
    let now = LockFile::of(
        &dir,
        &host()
            .load_dir_with(
                &dir,
                LoadDirOptions::default().ignore_lock(true),
                |_, _, _| {},
            )
            .expect("load")
            .plugins,
    );
    let differences = lock_entry.differences(&now);
    assert_eq!(differences.len(), 3, "{differences:?}");
}

/// A server on 127.0.0.1 that answers "ok" and keeps the headers of every request.
struct HeaderServer {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

fn header_server() -> HeaderServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("address").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut buffer = [0u8; 8192];
                    let read = stream.read(&mut buffer).unwrap_or(0);
                    let head = String::from_utf8_lossy(&buffer[..read]).into_owned();
                    record.lock().expect("lock").push(head);
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                    );
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    HeaderServer { port, seen }
}

impl HeaderServer {
    fn authorization(&self) -> Vec<Option<String>> {
        self.seen
            .lock()
            .expect("lock")
            .iter()
            .map(|head| {
                head.lines()
                    .find(|line| line.to_ascii_lowercase().starts_with("authorization:"))
                    .map(|line| line["authorization:".len()..].trim().to_owned())
            })
            .collect()
    }
}

fn fetcher_with(name: &str, policy: &str) -> Result<LoadedPlugin, PluginError> {
    let dir = scratch_dir(name);
    std::fs::copy(plugin_path("fetcher"), dir.join("fetcher.wasm")).expect("copy");
    std::fs::write(dir.join("fetcher.policy.toml"), policy).expect("policy");
    host().load(dir.join("fetcher.wasm"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_only_its_destination_and_never_the_plugin() {
    let (granted, other) = (header_server(), header_server());
    // The secret: a variable cargo sets for every test process (its package's name).
    let secret = std::env::var("CARGO_PKG_NAME").expect("cargo sets CARGO_PKG_NAME");
    let policy = format!(
        "[http]\nallow = [\"http://127.0.0.1:{a}\", \"http://127.0.0.1:{b}\"]\n\
         [[http.secrets]]\nhost = \"http://127.0.0.1:{a}\"\nheader = \"Authorization\"\n\
         value = \"Bearer ${{CARGO_PKG_NAME}}\"\n",
        a = granted.port,
        b = other.port
    );
    let plugin = fetcher_with("secret", &policy).unwrap_or_else(|e| panic!("{e}"));
    let debug = format!("{:?}", plugin.policy());
    assert!(!debug.contains(&secret), "redacted: {debug}");
    let tools = session(&plugin);
    let fetch = |url: String, authorization: Option<&str>| {
        let tools = tools.clone();
        let input = json!({"url": url, "authorization": authorization}).to_string();
        async move { tools.call_tool("fetch", &input).await }
    };
    let url = |port: u16| format!("http://127.0.0.1:{port}/");
    assert_eq!(
        fetch(url(granted.port), None).await.as_deref(),
        Ok("200 ok")
    );
    // The plugin's own value is replaced, not sent beside the secret.
    assert_eq!(
        fetch(url(granted.port), Some("Bearer forged"))
            .await
            .as_deref(),
        Ok("200 ok")
    );
    assert_eq!(fetch(url(other.port), None).await.as_deref(), Ok("200 ok"));
    assert_eq!(
        granted.authorization(),
        [
            Some(format!("Bearer {secret}")),
            Some(format!("Bearer {secret}"))
        ]
    );
    assert_eq!(
        other.authorization(),
        [None],
        "not sent to another destination"
    );

    // A variable that is not set is a load error naming it.
    let missing = policy.replace("CARGO_PKG_NAME", "LLM_WORKER_TEST_UNSET_TOKEN");
    let error = fetcher_with("secret-missing", &missing).expect_err("refused");
    assert!(
        error.to_string().contains("LLM_WORKER_TEST_UNSET_TOKEN")
            && error.to_string().contains("http.secrets[0].value"),
        "{error}"
    );
    // A secret for a destination that is not granted.
    let stray = format!(
        "[http]\nallow = [\"http://127.0.0.1:{}\"]\n[[http.secrets]]\nhost = \"https://elsewhere.example\"\n\
         header = \"Authorization\"\nvalue = \"x\"\n",
        granted.port
    );
    let error = fetcher_with("secret-stray", &stray).expect_err("refused");
    assert!(
        error.to_string().contains("http.secrets[0].host"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_without_the_grant_cannot_reach_the_host_its_sibling_can() {
    let (a, b) = (header_server(), header_server());
    // `fire` may reach B only; `fetch` has no list of its own: the plugin's, A and B.
    let policy = format!(
        "[http]\nallow = [\"http://127.0.0.1:{a}\", \"http://127.0.0.1:{b}\"]\n\
         [tools.fire.http]\nallow = [\"http://127.0.0.1:{b}\"]\n",
        a = a.port,
        b = b.port
    );
    let plugin = fetcher_with("per-tool", &policy).unwrap_or_else(|e| panic!("{e}"));
    let tools = session(&plugin);
    let url = |port: u16| format!("http://127.0.0.1:{port}/");
    assert_eq!(
        tools
            .call_tool("fetch", &json!({"url": url(a.port)}).to_string())
            .await
            .as_deref(),
        Ok("200 ok"),
        "the sibling reaches A"
    );
    let fired = tools
        .call_tool("fire", &json!({"url": url(a.port), "count": 1}).to_string())
        .await;
    assert_eq!(fired.as_deref(), Ok("sent 1"));
    assert_eq!(
        tools.call_tool("outcomes", "{}").await.as_deref(),
        Ok("HttpRequestDenied"),
        "`fire` may not reach A"
    );
    assert_eq!(a.authorization().len(), 1, "only `fetch` reached A");

    // A tool's list may not be wider than the plugin's.
    let wider = format!(
        "[http]\nallow = [\"http://127.0.0.1:{}\"]\n[tools.fetch.http]\nallow = [\"*.example.com\"]\n",
        a.port
    );
    let error = fetcher_with("per-tool-wider", &wider).expect_err("refused");
    assert!(
        error.to_string().contains("tools.fetch.http.allow[0]")
            && error.to_string().contains("*.example.com"),
        "{error}"
    );
    let unknown = format!(
        "[http]\nallow = [\"http://127.0.0.1:{}\"]\n[tools.nope.http]\nallow = []\n",
        a.port
    );
    let error = fetcher_with("per-tool-unknown", &unknown).expect_err("refused");
    assert!(error.to_string().contains("tools.nope"), "{error}");
}
