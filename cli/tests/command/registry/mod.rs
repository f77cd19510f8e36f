//! `llm-worker pull` and `push` against a real registry: Debian's `docker-registry`
//! (distribution 2.8) started on a loopback port with its own storage, and an independent
//! client (`oci_push.py`: python3 and openssl) beside our own.
//!
//! Without `docker-registry` (or python3 and openssl, for the independent client) these tests
//! say so and pass, except under CI (`CI` set), where that is a failure: `scripts/test.sh`
//! installs them.
//!
//! This module holds the registry, the keys and the helpers; the tests are in its submodules.

mod cosign;
mod interop;
mod keyless;
mod refused;
mod revoked;
mod round_trip;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use llm_worker_tests::{compiled_cache, plugin_path, scratch_dir};

use super::cli::{run, stderr, stdout};

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

/// Whether the Python packages of the independent checks (`cryptography`, PyNaCl) are
/// installed, or can be (once per target directory); if not, says the test is skipped.
fn python_packages_installed() -> bool {
    python_with_cryptography().get_program() == "python3"
}

/// `python3` with `cryptography` and PyNaCl importable (installed once per target directory,
/// as the reference servers are); plain `false` (a program that fails) where they cannot be.
fn python_with_cryptography() -> Command {
    use llm_worker_tests::reference::{CRYPTOGRAPHY, PYNACL, python_with};
    let target_tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    python_with(target_tmp, &[CRYPTOGRAPHY, PYNACL]).unwrap_or_else(|| Command::new("false"))
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

    /// A key file under the test's directory, private as a signing key must be.
    fn key(&self, name: &str, pem: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.root.join(format!("{name}.pem"));
        std::fs::write(&path, pem).expect("key");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        path
    }

    /// An empty plugin directory with a trust policy (keys acme and other, then `rules`).
    fn plugin_dir(&self, name: &str, rules: &str) -> PathBuf {
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        write_trust(&dir, rules);
        dir
    }

    /// The compiled cache the tests share.
    fn cache(&self) -> PathBuf {
        compiled_cache().to_owned()
    }

    /// `llm-worker push PLUGIN REFERENCE --plain-http [--sign KEY]`, which must succeed.
    fn push(&self, plugin: &str, repository_and_tag: &str, key: Option<&Path>) -> String {
        push_to(plugin, &self.reference(repository_and_tag), key)
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

/// `llm-worker push PLUGIN REFERENCE --plain-http [--sign KEY]`, which must succeed; what it
/// said.
fn push_to(plugin: &str, reference: &str, key: Option<&Path>) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command
        .arg("push")
        .arg(plugin_path(plugin))
        .arg(reference)
        .arg("--plain-http")
        .arg("--cache-dir")
        .arg(compiled_cache())
        .env_remove("RUST_LOG");
    if let Some(key) = key {
        command.arg("--sign").arg(key);
    }
    let out = command.output().expect("llm-worker push");
    assert!(out.status.success(), "push: {}", stderr(&out));
    stdout(&out)
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

/// The manifest digest `llm-worker push` says it pushed (`… (manifest sha256:…)`).
fn manifest_of(pushed: &str) -> String {
    pushed
        .split("(manifest ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no manifest digest in: {pushed}"))
        .to_owned()
}

/// Serves `dir` over stdio, locked, and calls `greet` with `name`; its answer.
async fn serve_and_greet(registry: &Registry, dir: &Path, name: &str) -> String {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command
        .args(["serve", "--locked", "--cache-dir"])
        .arg(registry.cache())
        .arg(dir);
    let transport = rmcp::transport::TokioChildProcess::new(command).expect("serve");
    let client = rmcp::ServiceExt::serve((), transport)
        .await
        .expect("initialize");
    let hello = client
        .call_tool(crate::mcp::call(
            "greet",
            serde_json::json!({ "name": name }),
        ))
        .await
        .expect("greet");
    client.cancel().await.expect("close");
    crate::mcp::text(&hello)
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
