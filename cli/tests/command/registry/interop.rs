//! Independent OCI tools, both ways: Debian's `skopeo` (1.9) copies our Wasm artifacts and
//! their signatures between registries and through an OCI layout, digests unchanged, and the
//! copies are pulled, verified and served; the Bytecode Alliance's `wkg` publishes a component
//! we pull and serve, and fetches one we pushed byte for byte.
//!
//! skopeo copies the manifest it is named and nothing attached to it: a cosign signature lives
//! under its own tag (`sha256-<hex>.sig`), which is copied as one more manifest. A signature
//! names the repository it was made for, so a copy under another registry is refused as signed
//! (taken unsigned only with `--allow-unsigned`), while a copy back into the same repository
//! verifies. Debian's build cannot make sigstore signatures ("sigstore disabled"), so it only
//! carries ours.

use std::path::Path;
use std::process::Command;

use super::{ACME_KEY, Registry, find_program, manifest_of, signed_by, text_of};
use crate::cli::{stderr, stdout};

/// Says the tool is missing (a failure under CI, which installs it).
fn tool(name: &str) -> Option<std::path::PathBuf> {
    let found = find_program(name);
    if found.is_none() {
        super::skip(&format!("{name} is not installed"));
    }
    found
}

fn skopeo(program: &Path, args: &[&str]) {
    let out = Command::new(program)
        .args(["--insecure-policy", "copy", "--quiet"])
        .args(args)
        .output()
        .expect("skopeo");
    assert!(out.status.success(), "skopeo {args:?}: {}", stderr(&out));
}

#[test]
fn skopeo_copies_a_signed_artifact_between_registries_and_through_an_oci_layout() {
    let Some(skopeo_program) = tool("skopeo") else {
        return;
    };
    let (Some(from), Some(to)) = (
        Registry::start("registry-skopeo-from"),
        Registry::start("registry-skopeo-to"),
    ) else {
        return;
    };
    let key = from.key("acme", ACME_KEY);
    let digest = manifest_of(&from.push("greet", "acme/greet:1", Some(&key)));
    let signature = format!("{}.sig", digest.replacen(':', "-", 1));
    let plain = ["--src-tls-verify=false", "--dest-tls-verify=false"];
    // Registry to registry, the artifact and its signature tag.
    for tag in ["1", signature.as_str()] {
        let mut args = plain.to_vec();
        let source = format!("docker://{}/acme/greet:{tag}", from.address);
        let target = format!("docker://{}/acme/greet:{tag}", to.address);
        args.extend([source.as_str(), target.as_str()]);
        skopeo(&skopeo_program, &args);
    }
    // The copy is the same manifest; its signature names the repository it was made for, so
    // under another registry it is refused as a signature copied from elsewhere, and taken
    // unsigned only by the operator's choice.
    let dir = to.plugin_dir("plugins", &signed_by(&to, "acme/*", "\"acme\""));
    let out = to.pull("acme/greet:1", &dir, &[]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!(
            "made for the repository {}/acme/greet",
            from.address
        )),
        "{}",
        stderr(&out)
    );
    let mirror = to.plugin_dir("mirror", "");
    let out = to.pull("acme/greet:1", &mirror, &["--allow-unsigned"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&digest),
        "digest unchanged: {}",
        stdout(&out)
    );

    // Through an OCI layout on disk and back under another tag of the same repository: the
    // digest is unchanged, so the signature still applies.
    let layout = to.root.join("layout");
    let at = format!("oci:{}:greet", text_of(&layout));
    let source = format!("docker://{}/acme/greet:1", from.address);
    skopeo(&skopeo_program, &["--src-tls-verify=false", &source, &at]);
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).expect("index.json"))
            .expect("JSON");
    assert_eq!(
        index["manifests"][0]["digest"].as_str(),
        Some(digest.as_str())
    );
    let back = format!("docker://{}/acme/greet:copied", from.address);
    skopeo(&skopeo_program, &["--dest-tls-verify=false", &at, &back]);
    let dir = from.plugin_dir("copied", &signed_by(&from, "acme/*", "\"acme\""));
    let out = from.pull("acme/greet:copied", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("signed by acme"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&digest),
        "digest unchanged: {}",
        stdout(&out)
    );
    assert_eq!(
        super::sha256_file(&dir.join("greet.wasm")),
        super::sha256_file(&llm_worker_tests::plugin_path("greet"))
    );
}

#[test]
fn wkg_publishes_what_we_pull_and_fetches_what_we_push() {
    let Some(wkg) = tool("wkg") else {
        return;
    };
    let Some(registry) = Registry::start("registry-wkg") else {
        return;
    };
    let plugin = llm_worker_tests::plugin_path("greet");
    let insecure = format!("--insecure={}", registry.address);
    // wkg pushes; we pull and serve.
    let out = Command::new(&wkg)
        .args(["oci", "push", &insecure])
        .arg(registry.reference("by-wkg/greet:1"))
        .arg(&plugin)
        .env("HOME", registry.root.join("."))
        .output()
        .expect("wkg");
    assert!(out.status.success(), "wkg oci push: {}", stderr(&out));
    let dir = registry.plugin_dir("plugins", "");
    let out = registry.pull("by-wkg/greet:1", &dir, &["--allow-unsigned"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = crate::cli::run(
        &registry.cache(),
        &["call", text_of(&dir), "greet", "{\"name\": \"wkg\"}"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Hello, wkg!"), "{}", stdout(&out));

    // We push; wkg fetches the same bytes.
    registry.push("greet", "by-us/greet:1", None);
    let fetched = registry.root.join("fetched.wasm");
    let out = Command::new(&wkg)
        .args(["oci", "pull", &insecure, "-o"])
        .arg(&fetched)
        .arg(registry.reference("by-us/greet:1"))
        .env("HOME", registry.root.join("."))
        .output()
        .expect("wkg");
    assert!(out.status.success(), "wkg oci pull: {}", stderr(&out));
    assert_eq!(
        std::fs::read(&fetched).expect("fetched"),
        std::fs::read(&plugin).expect("plugin")
    );
}
