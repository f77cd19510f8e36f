//! `llm-worker pull` and `push` against a real registry: Debian's `docker-registry`
//! (distribution 2.8) started on a loopback port with its own storage, and an independent
//! client (`oci_push.py`: python3 and openssl) beside our own.
//!
//! Without `docker-registry` (or python3 and openssl, for the independent client) these tests
//! say so and pass, except under CI (`CI` set), where that is a failure: `scripts/test.sh`
//! installs them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use llm_worker_tests::{plugin_path, scratch_dir};
use serde_json::json;

use super::cli::{run, stderr, stdout};
use super::mcp::{call, names, serve_watching, text};

/// The signing key the trust policies of these tests accept ("acme"), and another one.
const ACME_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgzQGqfcgro/uX8Fji
Aq3OnJnA2aQm6shetM737wxpQAGhRANCAAQXE6zR4o6mq11jlXXSO/4t3a5PO87m
f9wPlCaHANanCGbTUAcbC8Dde4QYyPUeTdYv0haZ+zCBRNRhAErHCfBz
-----END PRIVATE KEY-----
";
const ACME_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFxOs0eKOpqtdY5V10jv+Ld2uTzvO
5n/cD5QmhwDWpwhm01AHGwvA3XuEGMj1Hk3WL9IWmfswgUTUYQBKxwnwcw==
-----END PUBLIC KEY-----
";
const OTHER_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRrDSlp0LIX42h7Xz
XHtVqpMbzILz4K8cevI1JoXJsxWhRANCAAS6K10STf3rcy099TpaKDsf1QfZx9CQ
CzkA0QZ57w+JjAqvFhWUe3QIlKCyac21pEYDfnuVANZEK/espFtqudTL
-----END PRIVATE KEY-----
";
const OTHER_PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEuitdEk3963MtPfU6Wig7H9UH2cfQ
kAs5ANEGee8PiYwKrxYVlHt0CJSgsmnNtaRGA357lQDWRCv3rKRbarnUyw==
-----END PUBLIC KEY-----
";

/// Says that a test cannot run here; fails under CI, where everything must be installed.
fn skip(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{why}, and CI is set: scripts/test.sh installs it on Debian");
    }
    eprintln!("SKIPPED: {why} (scripts/test.sh installs it on Debian)");
}

/// Whether python3 and openssl (what `oci_push.py`, the independent client, needs) are
/// installed; if not, says the test is skipped (see [`skip`]).
fn independent_client_installed() -> bool {
    let installed = find_program("python3").is_some() && find_program("openssl").is_some();
    if !installed {
        skip("python3 and openssl (the independent OCI client) are not installed");
    }
    installed
}

/// `program` on the PATH.
fn find_program(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    })
}

/// A `docker-registry` on a loopback port, with its own storage; stopped when dropped.
struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    address: String,
    /// Where it keeps blobs (for the tampering test).
    storage: PathBuf,
    /// A directory for the test's files (keys, plugin directories, the cache), removed with
    /// the last of its handles.
    root: std::rc::Rc<llm_worker_tests::ScratchDir>,
}

impl Registry {
    /// Starts one, or says why not (see [`skip`]).
    fn start(name: &str) -> Option<Self> {
        let Some(program) = find_program("docker-registry") else {
            skip("docker-registry (Debian's distribution 2.8) is not installed");
            return None;
        };
        let root = std::rc::Rc::new(scratch_dir(name));
        let storage = root.join("registry");
        for _ in 0..5 {
            // A free port, given back before the registry takes it: if another process takes
            // it first, the registry exits and another port is tried.
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port();
            let address = format!("127.0.0.1:{port}");
            let config = root.join("registry.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    \
                     rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n",
                    storage.display()
                ),
            )
            .expect("registry config");
            let child = Command::new(&program)
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start docker-registry");
            let mut registry = Registry {
                child,
                address,
                storage: storage.clone(),
                root: root.clone(),
            };
            if registry.wait_until_up() {
                return Some(registry);
            }
        }
        panic!("docker-registry did not start on a loopback port");
    }

    /// Polls `GET /v2/` until it answers 200 (within a deadline); `false` if the registry
    /// exited (its port was taken).
    fn wait_until_up(&mut self) -> bool {
        use std::io::{Read, Write};
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut stream) = std::net::TcpStream::connect(&self.address) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let request = format!("GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", self.address);
                let mut answer = String::new();
                if stream.write_all(request.as_bytes()).is_ok()
                    && stream.read_to_string(&mut answer).is_ok()
                    && answer.split_whitespace().nth(1) == Some("200")
                {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("docker-registry did not answer on {} in 30 s", self.address);
    }

    /// `ADDRESS/repository:tag`.
    fn reference(&self, repository_and_tag: &str) -> String {
        format!("{}/{repository_and_tag}", self.address)
    }

    /// A key file under the test's directory.
    fn key(&self, name: &str, pem: &str) -> PathBuf {
        let path = self.root.join(format!("{name}.pem"));
        std::fs::write(&path, pem).expect("key");
        path
    }

    /// An empty plugin directory with a trust policy (keys acme and other, then `rules`).
    fn plugin_dir(&self, name: &str, rules: &str) -> PathBuf {
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        write_trust(&dir, rules);
        dir
    }

    /// The compiled cache of the test.
    fn cache(&self) -> PathBuf {
        self.root.join("cache")
    }

    /// `llm-worker push PLUGIN REFERENCE --plain-http [--sign KEY]`, which must succeed.
    fn push(&self, plugin: &str, repository_and_tag: &str, key: Option<&Path>) -> String {
        let mut command = Command::new(env!("CARGO_BIN_EXE_llm-worker"));
        command
            .arg("push")
            .arg(plugin_path(plugin))
            .arg(self.reference(repository_and_tag))
            .arg("--plain-http")
            .env_remove("RUST_LOG");
        if let Some(key) = key {
            command.arg("--sign").arg(key);
        }
        let out = command.output().expect("llm-worker push");
        assert!(out.status.success(), "push: {}", stderr(&out));
        stdout(&out)
    }

    /// `llm-worker pull REFERENCE DIR --plain-http EXTRA…`.
    fn pull(&self, repository_and_tag: &str, dir: &Path, extra: &[&str]) -> Output {
        let reference = self.reference(repository_and_tag);
        let mut args = vec!["pull", reference.as_str(), text_of(dir), "--plain-http"];
        args.extend_from_slice(extra);
        run(&self.cache(), &args, None)
    }

    /// The blob file the registry stores `digest` in.
    fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text_of(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Writes `dir`'s trust policy: the keys acme and other, then `rules`.
fn write_trust(dir: &Path, rules: &str) {
    std::fs::write(
        dir.join("llm-worker.trust.toml"),
        format!("[keys]\nacme = \"\"\"\n{ACME_PUBLIC}\"\"\"\nother = \"\"\"\n{OTHER_PUBLIC}\"\"\"\n\n{rules}"),
    )
    .expect("trust policy");
}

/// A rule: `repository` (under the registry) signed by `signers`.
fn signed_by(registry: &Registry, repository: &str, signers: &str) -> String {
    format!(
        "[[rule]]\nrepository = \"{}/{repository}\"\nsigners = [{signers}]\n",
        registry.address
    )
}

/// The lock file of `dir`, as TOML.
fn lock_of(dir: &Path) -> toml::Table {
    let text = std::fs::read_to_string(dir.join("llm-worker.lock")).expect("lock file");
    text.parse().expect("lock TOML")
}

/// The `[plugin.source]` of `file` in `dir`'s lock.
fn source_of(dir: &Path, file: &str) -> toml::Table {
    let lock = lock_of(dir);
    let plugins = lock["plugin"].as_array().expect("plugins");
    let entry = plugins
        .iter()
        .find(|entry| entry["file"].as_str() == Some(file))
        .unwrap_or_else(|| panic!("{file} is not in the lock: {lock}"));
    entry["source"].as_table().expect("a source").clone()
}

fn sha256_file(path: &Path) -> String {
    use sha2::Digest;
    let bytes = std::fs::read(path).expect("read");
    sha2::Sha256::digest(&bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_plugin_is_pushed_pulled_served_and_recorded_in_the_lock() {
    let Some(registry) = Registry::start("registry-round-trip") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    let pushed = registry.push("greet", "acme/greet:1.0", Some(&acme));
    assert!(pushed.contains("signed with sha256:"), "{pushed}");
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));

    let out = registry.pull("acme/greet:1.0", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("signed by acme"), "{}", stdout(&out));

    // The lock: the file's digest, the manifest, the layer and the signer.
    let lock = lock_of(&dir);
    assert_eq!(lock["version"].as_integer(), Some(2));
    assert!(lock.contains_key("trust_sha256"), "{lock}");
    let source = source_of(&dir, "greet.wasm");
    let sha256 = sha256_file(&dir.join("greet.wasm"));
    assert_eq!(sha256, sha256_file(&plugin_path("greet")));
    assert_eq!(
        source["layer"].as_str(),
        Some(format!("sha256:{sha256}").as_str())
    );
    assert_eq!(source["signer"].as_str(), Some("acme"));
    assert_eq!(
        source["reference"].as_str(),
        Some(registry.reference("acme/greet:1.0").as_str())
    );
    assert!(
        source["manifest"]
            .as_str()
            .is_some_and(|m| m.starts_with("sha256:"))
    );

    // `check` says what was verified, and does not take the trust policy for a stray policy.
    let out = run(&registry.cache(), &["check", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(
        report.contains("verified: signed by acme (sha256:")
            && report.contains("still allowed by llm-worker.trust.toml"),
        "{report}"
    );
    let out = run(&registry.cache(), &["list", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("trust.toml"),
        "not a stray policy: {}",
        stderr(&out)
    );

    // Pulling again changes nothing; `lock` keeps the provenance.
    let out = registry.pull("acme/greet:1.0", &dir, &[]);
    assert!(stdout(&out).contains("up to date"), "{}", stdout(&out));
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        source_of(&dir, "greet.wasm")["signer"].as_str(),
        Some("acme")
    );
    let out = run(&registry.cache(), &["lock", "--check", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stdout(&out));

    // Served over MCP, locked.
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command
        .args(["serve", "--locked", "--cache-dir"])
        .arg(registry.cache())
        .arg(&dir);
    let transport = rmcp::transport::TokioChildProcess::new(command).expect("serve");
    let client = rmcp::ServiceExt::serve((), transport)
        .await
        .expect("initialize");
    let hello = client
        .call_tool(call("greet", json!({"name": "registry"})))
        .await
        .expect("greet");
    assert_eq!(text(&hello), "Hello, registry!");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_changes_nothing_until_pull_update_and_watch_follows() {
    let Some(registry) = Registry::start("registry-moved-tag") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    registry.push("greet", "acme/tool:stable", Some(&acme));
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let out = registry.pull("acme/tool:stable", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = source_of(&dir, "tool.wasm")["manifest"]
        .as_str()
        .expect("manifest")
        .to_owned();
    let (client, changes, _stderr) = serve_watching(&registry.cache(), &dir).await;
    assert_eq!(
        names(client.list_all_tools().await.expect("list")),
        ["greet"]
    );

    // The tag now names another component (signed by the same key): refused until --update.
    registry.push("counter", "acme/tool:stable", Some(&acme));
    let out = registry.pull("acme/tool:stable", &dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains(&first) && message.contains("pull --update"),
        "{message}"
    );
    assert_eq!(
        source_of(&dir, "tool.wasm")["manifest"].as_str(),
        Some(first.as_str())
    );
    assert_eq!(
        sha256_file(&dir.join("tool.wasm")),
        sha256_file(&plugin_path("greet"))
    );

    let out = registry.pull("acme/tool:stable", &dir, &["--update"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("{first} ->")),
        "{}",
        stdout(&out)
    );
    assert_ne!(
        source_of(&dir, "tool.wasm")["manifest"].as_str(),
        Some(first.as_str())
    );

    // `serve --watch` picks the update up (the new file and the new lock, once both are there).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, changes.notified())
            .await
            .expect("notifications/tools/list_changed after pull --update");
        if names(client.list_all_tools().await.expect("list")) == ["count", "peek"] {
            break;
        }
    }
    client.cancel().await.expect("close");
}

#[test]
fn unverified_artifacts_are_refused_naming_what_failed() {
    let Some(registry) = Registry::start("registry-unverified") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    let other = registry.key("other", OTHER_KEY);
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let refused = |repository: &str, needles: &[&str]| {
        let out = registry.pull(repository, &dir, &[]);
        assert_eq!(out.status.code(), Some(1), "{repository}: {}", stdout(&out));
        let message = stderr(&out);
        for needle in needles {
            assert!(
                message.contains(needle),
                "{repository}: {needle:?} in {message}"
            );
        }
        assert!(
            !dir.join("greet.wasm").exists() && !dir.join("llm-worker.lock").exists(),
            "{repository}: nothing written"
        );
    };

    registry.push("greet", "acme/greet:unsigned", None);
    refused(
        "acme/greet:unsigned",
        &["no signature", ".sig", "signed by acme"],
    );

    registry.push("greet", "acme/greet:other", Some(&other));
    refused(
        "acme/greet:other",
        &["does not verify with acme", "signature 1"],
    );

    // The rule for the repository asks for another signer than the one who signed.
    registry.push("greet", "acme/greet:acme", Some(&acme));
    write_trust(&dir, &signed_by(&registry, "acme/*", "\"other\""));
    refused("acme/greet:acme", &["does not verify with other"]);

    // No rule covers the repository.
    write_trust(&dir, &signed_by(&registry, "acme/*", "\"acme\""));
    registry.push("greet", "elsewhere/greet:1", Some(&acme));
    refused(
        "elsewhere/greet:1",
        &["no rule", &format!("{}/elsewhere/greet", registry.address)],
    );

    // No trust policy at all.
    std::fs::remove_file(dir.join("llm-worker.trust.toml")).expect("rm");
    refused("acme/greet:acme", &["no trust policy", "--allow-unsigned"]);
}

#[test]
fn a_signature_made_for_another_repository_is_refused() {
    let Some(registry) = Registry::start("registry-identity") else {
        return;
    };
    if !independent_client_installed() {
        return;
    }
    let acme = registry.key("acme", ACME_KEY);
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    // A valid acme signature of the same manifest, made for acme/other and copied here.
    independent_push(
        &registry,
        "acme/greet",
        &plugin_path("greet"),
        &[
            "--sign",
            text_of(&acme),
            "--identity",
            &registry.reference("acme/other"),
        ],
    );
    let out = registry.pull("acme/greet:1", &dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains("is by acme")
            && message.contains(&format!(
                "made for the repository {}/acme/other",
                registry.address
            )),
        "{message}"
    );
    assert!(!dir.join("greet.wasm").exists());
}

/// `oci_push.py`: pushes `layer` to `repository:1` without llm-worker; the manifest digest.
fn independent_push(registry: &Registry, repository: &str, layer: &Path, extra: &[&str]) -> String {
    // Read at run time: a test binary reused from a build elsewhere must not look there.
    let script = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
        .join("tests/command/oci_push.py");
    let out = Command::new("python3")
        .arg(script)
        .args([
            "--registry",
            &registry.address,
            "--repository",
            repository,
            "--tag",
            "1",
        ])
        .arg("--layer")
        .arg(layer)
        .args(extra)
        .output()
        .expect("python3");
    assert!(out.status.success(), "oci_push.py: {}", stderr(&out));
    stdout(&out).trim().to_owned()
}

#[test]
fn tampered_oversized_and_non_wasm_artifacts_are_refused() {
    let Some(registry) = Registry::start("registry-hostile") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));

    // A byte of the stored component changed behind the registry's back.
    registry.push("greet", "acme/greet:1", Some(&acme));
    let digest = format!("sha256:{}", sha256_file(&plugin_path("greet")));
    let blob = registry.blob_file(&digest);
    let mut bytes = std::fs::read(&blob).expect("stored blob");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&blob, bytes).expect("tamper");
    let out = registry.pull("acme/greet:1", &dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains("the component of") && message.contains(&format!("not {digest}")),
        "{message}"
    );
    assert!(!dir.join("greet.wasm").exists());
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name())
        .filter(|name| name != "llm-worker.trust.toml")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A component over the host's plugin size cap (2 MiB, with --max-plugin-mib 1): refused
    // before it is fetched.
    let large = registry.root.join("large.wasm");
    let mut big = std::fs::read(plugin_path("greet")).expect("greet");
    big.resize(2 << 20, 0);
    std::fs::write(&large, &big).expect("large");
    if independent_client_installed() {
        independent_push(&registry, "acme/large", &large, &["--sign", text_of(&acme)]);
        let out = run(
            &registry.cache(),
            &[
                "pull",
                &registry.reference("acme/large:1"),
                text_of(&dir),
                "--plain-http",
                "--max-plugin-mib",
                "1",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(1));
        let message = stderr(&out);
        assert!(
            message.contains("2097152 bytes, over the cap of 1048576 bytes")
                && message.contains("max_plugin_bytes"),
            "{message}"
        );

        // A container image, not a Wasm artifact: refused naming its media type.
        independent_push(
            &registry,
            "acme/image",
            &plugin_path("greet"),
            &[
                "--sign",
                text_of(&acme),
                "--config-type",
                "application/vnd.oci.image.config.v1+json",
                "--layer-type",
                "application/vnd.oci.image.layer.v1.tar+gzip",
            ],
        );
        let out = registry.pull("acme/image:1", &dir, &[]);
        assert_eq!(out.status.code(), Some(1));
        let message = stderr(&out);
        assert!(
            message.contains("not a Wasm component artifact")
                && message.contains("application/vnd.oci.image.config.v1+json"),
            "{message}"
        );
    }
}

#[test]
fn an_artifact_pushed_by_an_independent_client_is_pulled_and_run() {
    let Some(registry) = Registry::start("registry-interop") else {
        return;
    };
    if !independent_client_installed() {
        return;
    }
    let acme = registry.key("acme", ACME_KEY);
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "tools/*", "\"acme\""));
    let digest = independent_push(
        &registry,
        "tools/calc",
        &plugin_path("calc"),
        &["--sign", text_of(&acme)],
    );
    let out = registry.pull("tools/calc:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        source_of(&dir, "calc.wasm")["manifest"].as_str(),
        Some(digest.as_str())
    );
    let out = run(
        &registry.cache(),
        &["call", text_of(&dir), "add", r#"{"a":2,"b":3}"#],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "5.0");

    // And by digest, under another name.
    let out = registry.pull(&format!("tools/calc@{digest}"), &dir, &["--name", "calc2"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_revoked_key_stops_loading() {
    let Some(registry) = Registry::start("registry-revoked") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    registry.push("greet", "acme/greet:1", Some(&acme));
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let out = registry.pull("acme/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let call = |cache: &Path| {
        run(
            cache,
            &["call", text_of(&dir), "greet", r#"{"name":"x"}"#],
            None,
        )
    };
    assert!(call(&registry.cache()).status.success());

    // acme's key is taken out of the rule: greet stops loading, saying whose key it was.
    write_trust(&dir, &signed_by(&registry, "acme/*", "\"other\""));
    let out = call(&registry.cache());
    assert_eq!(out.status.code(), Some(1));
    let message = stderr(&out);
    assert!(
        message.contains("signer 'acme'") && message.contains("no longer trusted"),
        "{message}"
    );
    // ... and `lock` does not approve it again.
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no longer trusted"),
        "{}",
        stderr(&out)
    );

    // A trust policy edited without a new lock is not used either.
    write_trust(
        &dir,
        &format!("{}# edited\n", signed_by(&registry, "acme/*", "\"acme\"")),
    );
    let out = call(&registry.cache());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("changed since it was locked"),
        "{}",
        stderr(&out)
    );
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(call(&registry.cache()).status.success());
}

/// `pull --update` approves new bytes, never a policy edited since the lock was written.
#[test]
fn pull_update_never_approves_a_policy_nobody_reviewed() {
    let Some(registry) = Registry::start("registry-policy-edit") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    registry.push("greet", "acme/tool:stable", Some(&acme));
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let out = registry.pull("acme/tool:stable", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));

    std::fs::write(
        dir.join("tool.policy.toml"),
        "[env]\nset = { MODE = \"edited\" }\n",
    )
    .expect("edit the policy");
    registry.push("counter", "acme/tool:stable", Some(&acme));
    let out = registry.pull("acme/tool:stable", &dir, &["--update"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let message = stderr(&out);
    assert!(
        message.contains("changed since it was locked") && message.contains("llm-worker lock"),
        "{message}"
    );
    // Nothing moved: the approved bytes stay, and no temporary file is left behind.
    assert_eq!(
        sha256_file(&dir.join("tool.wasm")),
        sha256_file(&plugin_path("greet"))
    );
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("read dir")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".pulling"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A key revoked while `serve --watch` serves a plugin it signed: the plugin stops being
/// served (a running server is no exception to "a revoked key stops loading").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_while_serving_stops_the_plugin_under_watch() {
    let Some(registry) = Registry::start("registry-revoked-watch") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    registry.push("greet", "acme/greet:1", Some(&acme));
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let out = registry.pull("acme/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (client, changes, _stderr) = serve_watching(&registry.cache(), &dir).await;
    assert_eq!(
        names(client.list_all_tools().await.expect("list")),
        ["greet"]
    );

    // Only the trust policy changes: acme's key is taken out of the rule.
    write_trust(&dir, &signed_by(&registry, "acme/*", "\"other\""));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, changes.notified())
            .await
            .expect("notifications/tools/list_changed after the key was revoked");
        if names(client.list_all_tools().await.expect("list")).is_empty() {
            break;
        }
    }
    client.cancel().await.expect("close");
}

#[test]
fn unsigned_pulls_are_recorded_and_plain_http_and_names_stay_local() {
    let Some(registry) = Registry::start("registry-unsigned") else {
        return;
    };
    registry.push("greet", "scratch/greet:1", None);
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let out = registry.pull("scratch/greet:1", &dir, &["--allow-unsigned"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        source_of(&dir, "greet.wasm")["unsigned"].as_str(),
        Some("pull --allow-unsigned")
    );
    let out = run(&registry.cache(), &["check", text_of(&dir)], None);
    assert!(
        stdout(&out).contains("unsigned, allowed by pull --allow-unsigned"),
        "{}",
        stdout(&out)
    );

    // A rule may let a repository's plugins come unsigned; that is recorded too.
    let rules = format!(
        "[[rule]]\nrepository = \"{}/scratch/*\"\nunsigned = true\n",
        registry.address
    );
    write_trust(&dir, &rules);
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = registry.pull("scratch/greet:1", &dir, &["--name", "greet2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        source_of(&dir, "greet2.wasm")["unsigned"].as_str(),
        Some("trust policy")
    );

    // Names cannot leave the directory; plain HTTP is for loopback only.
    for name in ["../evil", "a/b", ".hidden", ""] {
        let out = registry.pull("scratch/greet:1", &dir, &["--name", name]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert!(
            stderr(&out).contains("cannot name a plugin file"),
            "{}",
            stderr(&out)
        );
    }
    let out = run(
        &registry.cache(),
        &[
            "pull",
            "registry.example/acme/greet:1",
            text_of(&dir),
            "--plain-http",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("plain HTTP is only for"),
        "{}",
        stderr(&out)
    );
    assert!(!registry.root.join("evil.wasm").exists());
}
