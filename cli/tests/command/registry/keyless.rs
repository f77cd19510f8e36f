//! Keyless signatures (Sigstore): a test authority made by `sigstore_sign.py` (Python's
//! `cryptography`, without llm-worker) plays Fulcio, the CT log, Rekor and cosign; its
//! `trusted_root.json` is the operator's root file. A bundle attached as an OCI 1.1 referrer
//! (the referrers tag, as distribution 2.8 has no referrers API) and cosign's legacy `.sig`
//! layout are pulled, verified offline, locked with the signer's identity and served; every
//! way a keyless signature can be wrong is refused.

use std::path::{Path, PathBuf};

use super::{Registry, independent_client_installed, lock_of, source_of, text_of};
use crate::cli::{run, stderr, stdout};

const ISSUER: &str = "https://token.actions.githubusercontent.com";
const WORKFLOW: &str =
    "https://github.com/acme/greet/.github/workflows/release.yml@refs/tags/v1.0.0";

fn script() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
        .join("tests/command/sigstore_sign.py")
}

fn python(args: &[&str]) {
    let out = super::python_with_cryptography()
        .arg(script())
        .args(args)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "sigstore_sign.py {args:?}: {}",
        stderr(&out)
    );
}

/// A test authority under the registry's directory: its `trusted_root.json` and keys.
fn authority(registry: &Registry, name: &str) -> PathBuf {
    let dir = registry.root.join(name);
    python(&["root", text_of(&dir)]);
    dir
}

/// Pushes `greet` unsigned to `repository:1`; the manifest's digest and size.
fn push(registry: &Registry, repository: &str) -> (String, u64) {
    let digest = super::manifest_of(&registry.push("greet", &format!("{repository}:1"), None));
    let size = manifest_size(registry, repository, &digest);
    (digest, size)
}

fn manifest_size(registry: &Registry, repository: &str, digest: &str) -> u64 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(&registry.address).expect("connect");
    let request = format!(
        "HEAD /v2/{repository}/manifests/{digest} HTTP/1.0\r\nHost: {}\r\nAccept: \
         application/vnd.oci.image.manifest.v1+json\r\n\r\n",
        registry.address
    );
    stream.write_all(request.as_bytes()).expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    answer
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .expect("content-length")
}

/// Signs `digest` of `repository` (under the registry) as `identity`, with `extra` options of
/// `sigstore_sign.py sign`, and attaches it (`attach` or `attach-legacy`).
fn sign_and_attach(
    registry: &Registry,
    authority: &Path,
    repository: &str,
    (digest, size): &(String, u64),
    identity: &str,
    extra: &[&str],
    how: &str,
) {
    let bundle = authority.join(format!("{}.json", digest.replace(':', "-")));
    let full = registry.reference(repository);
    let mut args = vec![
        "sign",
        text_of(authority),
        "--digest",
        digest,
        "--repository",
        &full,
        "--identity",
        identity,
        "--issuer",
        ISSUER,
        "--source-repository",
        "https://github.com/acme/greet",
        "--ref",
        "refs/tags/v1.0.0",
        "--trigger",
        "push",
        "--repository-id",
        "123456789",
        "--owner-id",
        "987654321",
        "--out",
        text_of(&bundle),
    ];
    if how == "attach-legacy" {
        args.extend(["--format", "legacy"]);
    }
    args.extend_from_slice(extra);
    python(&args);
    let size = size.to_string();
    python(&[
        how,
        "--registry",
        &registry.address,
        "--repository",
        repository,
        "--digest",
        digest,
        "--size",
        &size,
        "--bundle",
        text_of(&bundle),
    ]);
}

/// A plugin directory whose trust policy accepts the release workflow of acme/greet for
/// `repository`, with `root`'s trusted root beside it.
fn keyless_dir(registry: &Registry, name: &str, authority: &Path, repository: &str) -> PathBuf {
    let dir = registry.root.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(
        authority.join("trusted_root.json"),
        dir.join("trusted_root.json"),
    )
    .expect("root");
    std::fs::write(
        dir.join("llm-worker.trust.toml"),
        format!(
            "[sigstore]\ntrusted_root = \"trusted_root.json\"\n\n\
             [identities.release]\nissuer = \"{ISSUER}\"\n\
             subject = \"https://github.com/acme/greet/.github/workflows/release.yml@refs/tags/v*\"\n\
             source_repository = \"https://github.com/acme/greet\"\ntrigger = \"push\"\n\
             source_repository_id = \"123456789\"\nowner_id = \"987654321\"\n\n\
             [[rule]]\nrepository = \"{}/{repository}\"\nsigners = [\"release\"]\n",
            registry.address
        ),
    )
    .expect("trust policy");
    dir
}

/// A registry holding `acme/greet:1` signed keylessly by the release workflow (`how`:
/// `attach` or `attach-legacy`), and a plugin directory that trusts that workflow; `None` where
/// the tests cannot run here.
fn signed_keylessly(name: &str, how: &str) -> Option<(Registry, PathBuf)> {
    if !independent_client_installed() || !super::python_packages_installed() {
        return None;
    }
    let registry = Registry::start(name)?;
    let authority = authority(&registry, "authority");
    let pushed = push(&registry, "acme/greet");
    sign_and_attach(
        &registry,
        &authority,
        "acme/greet",
        &pushed,
        WORKFLOW,
        &[],
        how,
    );
    let dir = keyless_dir(&registry, "plugins", &authority, "acme/greet");
    Some((registry, dir))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_bundle_is_verified_offline_locked_with_its_identity_and_served() {
    let Some((registry, dir)) = signed_keylessly("registry-keyless", "attach") else {
        return;
    };
    let out = registry.pull("acme/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(
        said.contains(&format!(
            "signed keylessly by release ({WORKFLOW}, issuer {ISSUER}, log index 5)"
        )),
        "{said}"
    );
    let source = source_of(&dir, "greet.wasm");
    assert_eq!(source["signer"].as_str(), Some("release"));
    assert_eq!(source["identity"].as_str(), Some(WORKFLOW));
    assert_eq!(source["issuer"].as_str(), Some(ISSUER));
    assert_eq!(source["log_index"].as_integer(), Some(5));
    assert_eq!(source["source_ref"].as_str(), Some("refs/tags/v1.0.0"));
    assert_eq!(source["source_repository_id"].as_str(), Some("123456789"));
    assert_eq!(source["owner_id"].as_str(), Some("987654321"));
    assert!(source.get("key").is_none());
    // `check` says who signed.
    let out = run(&registry.cache(), &["check", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "verified: signed keylessly by release ({WORKFLOW}"
        )),
        "{}",
        stdout(&out)
    );
    assert!(lock_of(&dir)["trust_sha256"].as_str().is_some());

    // Served, locked.
    assert_eq!(
        super::serve_and_greet(&registry, &dir, "keyless").await,
        "Hello, keyless!"
    );

    // A rule changed later is checked at load: wanting another trigger refuses the plugin.
    let trust = dir.join("llm-worker.trust.toml");
    let text = std::fs::read_to_string(&trust).expect("trust");
    std::fs::write(
        &trust,
        text.replace("trigger = \"push\"", "trigger = \"release\""),
    )
    .expect("w");
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("its signer 'release'") && said.contains("no longer trusted"),
        "{said}"
    );
    // So is a rule naming another owner (the name `acme` taken over by someone else, whose
    // GitHub id differs): the recorded claims no longer satisfy it.
    std::fs::write(&trust, text.replace("987654321", "555")).expect("w");
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("owner identifier"), "{said}");
}

#[test]
fn cosign_s_legacy_keyless_signature_is_verified_too() {
    let Some((registry, dir)) = signed_keylessly("registry-keyless-legacy", "attach-legacy") else {
        return;
    };
    let out = registry.pull("acme/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("signed keylessly by release"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        source_of(&dir, "greet.wasm")["identity"].as_str(),
        Some(WORKFLOW)
    );
}

#[test]
fn every_wrong_keyless_signature_is_refused() {
    if !independent_client_installed() || !super::python_packages_installed() {
        return;
    }
    let Some(registry) = Registry::start("registry-keyless-refused") else {
        return;
    };
    let authority = authority(&registry, "authority");
    let stranger = registry.root.join("stranger");
    // Another Fulcio, the same logs: its certificates chain to a root the file does not hold.
    python(&[
        "root",
        text_of(&stranger),
        "--logs-from",
        text_of(&authority),
    ]);
    let other_digest = format!("sha256:{}", "ab".repeat(32));
    let cases: Vec<(&str, &Path, String, Vec<String>, &str)> = vec![
        (
            "identity",
            &authority,
            "https://github.com/evil/greet/.github/workflows/release.yml@refs/tags/v1.0.0".into(),
            vec![],
            "whom no identity of the rule accepts",
        ),
        (
            "issuer",
            &authority,
            WORKFLOW.into(),
            vec![
                "--issuer-override".into(),
                "https://accounts.google.com".into(),
            ],
            "its issuer is https://accounts.google.com",
        ),
        (
            "expired",
            &authority,
            WORKFLOW.into(),
            vec!["--expired".into()],
            "CertExpired",
        ),
        (
            "root",
            &stranger,
            WORKFLOW.into(),
            vec![],
            "certificate chain",
        ),
        (
            "entry",
            &authority,
            WORKFLOW.into(),
            vec!["--tlog-for-digest".into(), other_digest.clone()],
            "does not match the bundle",
        ),
        (
            "proof",
            &authority,
            WORKFLOW.into(),
            vec!["--tamper-proof".into()],
            "inclusion proof",
        ),
        (
            "digest",
            &authority,
            WORKFLOW.into(),
            vec!["--subject-digest".into(), other_digest.clone()],
            "artifact hash does not match",
        ),
        (
            "large",
            &authority,
            WORKFLOW.into(),
            vec!["--pad".into(), (300 << 10).to_string()],
            "over the cap of 262144 bytes",
        ),
    ];
    for (name, signer, identity, extra, why) in cases {
        let repository = format!("refused/{name}");
        let pushed = push(&registry, &repository);
        let extra: Vec<String> = extra
            .iter()
            .map(|arg| arg.replace("SELF", &registry.address))
            .collect();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        sign_and_attach(
            &registry,
            signer,
            &repository,
            &pushed,
            &identity,
            &extra,
            "attach",
        );
        let dir = keyless_dir(
            &registry,
            &format!("plugins-{name}"),
            &authority,
            &repository,
        );
        let out = registry.pull(&format!("{repository}:1"), &dir, &[]);
        let said = stderr(&out);
        assert!(!out.status.success(), "{name}: pulled: {}", stdout(&out));
        assert!(said.contains(why), "{name}: {said}");
        assert!(
            !dir.join("greet.wasm").exists(),
            "{name}: nothing is written"
        );
    }

    // A trusted root file that others could write is refused before anything is fetched.
    let repository = "refused/writable";
    let pushed = push(&registry, repository);
    sign_and_attach(
        &registry,
        &authority,
        repository,
        &pushed,
        WORKFLOW,
        &[],
        "attach",
    );
    let dir = keyless_dir(&registry, "plugins-writable", &authority, repository);
    use std::os::unix::fs::PermissionsExt;
    let root = dir.join("trusted_root.json");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = registry.pull(&format!("{repository}:1"), &dir, &[]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("trusted_root.json") && stderr(&out).contains("not trusted"),
        "{}",
        stderr(&out)
    );
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let out = registry.pull(&format!("{repository}:1"), &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_root_replaced_while_serving_stops_keyless_plugins_under_watch() {
    use std::time::{Duration, Instant};
    let Some((registry, dir)) = signed_keylessly("registry-keyless-watch", "attach") else {
        return;
    };
    let out = registry.pull("acme/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (client, changes, _stderr) = crate::mcp::serve_watching(&registry.cache(), &dir).await;
    assert_eq!(
        crate::mcp::names(client.list_all_tools().await.expect("list")),
        ["greet"]
    );
    // Only the trusted root changes (as when a CA is taken out of it): the trust policy's pin
    // no longer holds until `lock` approves it, and the watcher sees the root file too.
    let root = dir.join("trusted_root.json");
    let mut text = std::fs::read_to_string(&root).expect("root");
    text.push('\n');
    std::fs::write(&root, text).expect("root");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, changes.notified())
            .await
            .expect("notifications/tools/list_changed after the root changed");
        if crate::mcp::names(client.list_all_tools().await.expect("list")).is_empty() {
            break;
        }
    }
    client.cancel().await.expect("close");
}
