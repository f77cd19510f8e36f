//! cosign's key files, both ways, checked by an independent implementation
//! (`cosign_key.py`: the standard library's scrypt, PyNaCl's secretbox, Python's
//! `cryptography`): a key pair `keygen` writes is opened there and its signatures
//! verified there; a key sealed there signs `push`. Passwords come from `COSIGN_PASSWORD`, as
//! cosign reads them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::{
    Registry, manifest_of, python_packages_installed, python_with_cryptography, signed_by, text_of,
};
use crate::cli::{stderr, stdout};

fn script() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
        .join("tests/command/cosign_key.py")
}

fn independent(args: &[&str], password: &str) -> String {
    let out = python_with_cryptography()
        .arg(script())
        .args(args)
        .env("COSIGN_PASSWORD", password)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "cosign_key.py {args:?}: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// `llm-worker ARGS` with `COSIGN_PASSWORD` set to `password` (or unset), stdin not a terminal.
fn llm_worker(args: &[&str], password: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_llm-worker"));
    command
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("COSIGN_PASSWORD")
        .stdin(Stdio::null());
    if let Some(password) = password {
        command.env("COSIGN_PASSWORD", password);
    }
    command.output().expect("llm-worker")
}

fn push(registry: &Registry, key: &Path, repository: &str, password: Option<&str>) -> Output {
    let plugin = llm_worker_tests::plugin_path("greet");
    let reference = registry.reference(&format!("{repository}:1"));
    llm_worker(
        &[
            "push",
            text_of(&plugin),
            &reference,
            "--plain-http",
            "--sign",
            text_of(key),
            "--cache-dir",
            text_of(llm_worker_tests::compiled_cache()),
        ],
        password,
    )
}

#[test]
fn a_key_pair_generated_here_is_cosign_s_format_and_signs_what_others_verify() {
    if !super::independent_client_installed() || !python_packages_installed() {
        return;
    }
    let Some(registry) = Registry::start("registry-cosign-keys") else {
        return;
    };
    let prefix = registry.root.join("release");
    let out = llm_worker(
        &["keygen", "--output-key-prefix", text_of(&prefix)],
        Some("correct horse"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let key = registry.root.join("release.key");
    let public = std::fs::read_to_string(registry.root.join("release.pub")).expect("release.pub");
    assert!(
        std::fs::read_to_string(&key)
            .expect("key")
            .starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----")
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).expect("key").permissions().mode();
        assert_eq!(mode & 0o077, 0, "the key is its owner's alone: {mode:o}");
    }
    // The independent implementation opens it with the password, to the same public key.
    assert_eq!(
        independent(&["open", text_of(&key)], "correct horse"),
        public
    );
    // Nothing is overwritten.
    let again = llm_worker(
        &["keygen", "--output-key-prefix", text_of(&prefix)],
        Some("x"),
    );
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("nothing is overwritten"),
        "{}",
        stderr(&again)
    );

    // No password, no terminal: refused, saying what to set; a wrong one: refused.
    let out = push(&registry, &key, "acme/greet", None);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("set COSIGN_PASSWORD"),
        "{}",
        stderr(&out)
    );
    let out = push(&registry, &key, "acme/greet", Some("wrong"));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("password is wrong"),
        "{}",
        stderr(&out)
    );

    // Signed with it; verified by the independent implementation and by `pull`.
    let out = push(&registry, &key, "acme/greet", Some("correct horse"));
    assert!(out.status.success(), "{}", stderr(&out));
    let digest = manifest_of(&stdout(&out));
    let public_file = registry.root.join("release.pub");
    let verified = independent(
        &[
            "verify",
            "--registry",
            &registry.address,
            "--repository",
            "acme/greet",
            "--digest",
            &digest,
            "--public",
            text_of(&public_file),
        ],
        "",
    );
    assert!(
        verified.contains(&format!("acme/greet@{digest}")),
        "{verified}"
    );
    pulls_signed_by(&registry, "release", &public);
}

#[test]
fn a_key_sealed_by_another_implementation_signs_a_push() {
    if !super::independent_client_installed() || !python_packages_installed() {
        return;
    }
    let Some(registry) = Registry::start("registry-cosign-foreign-key") else {
        return;
    };
    let key = registry.root.join("foreign.key");
    let public = independent(&["make", text_of(&key)], "s3cret");
    // Private, as cosign writes its keys (the script writes it under the umask).
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let out = push(&registry, &key, "acme/greet", Some("s3cret"));
    assert!(out.status.success(), "{}", stderr(&out));
    pulls_signed_by(&registry, "foreign", &public);
}

/// Pulls `acme/greet:1` into a directory whose trust policy takes `public` as the key `name`,
/// which must verify it.
fn pulls_signed_by(registry: &Registry, name: &str, public: &str) {
    let dir = registry.root.join("plugins");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("llm-worker.trust.toml"),
        format!(
            "[keys]\n{name} = \"\"\"\n{public}\"\"\"\n\n{}",
            signed_by(registry, "acme/*", &format!("\"{name}\""))
        ),
    )
    .expect("trust");
    let out = registry.pull("acme/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(said.contains(&format!("signed by {name}")), "{said}");
}
