//! Unit tests of lock version 2: writing, checking and the trust policy's refusals.

use super::*;

fn pulled(unsigned: Option<Unsigned>) -> LockFile {
    let sha = "ab".repeat(32);
    LockFile {
        version: 2,
        trust_sha256: None,
        access_sha256: None,
        plugins: vec![LockedPlugin {
            file: "greet.wasm".into(),
            sha256: sha.clone(),
            policy_sha256: "none".into(),
            dirs: Vec::new(),
            tools: vec!["greet".into()],
            offers: Vec::new(),
            imports: Vec::new(),
            source: Some(PluginSource {
                reference: "r.example/acme/greet:1".into(),
                repository: "r.example/acme/greet".into(),
                manifest: format!("sha256:{}", "cd".repeat(32)),
                layer: format!("sha256:{sha}"),
                signer: unsigned.is_none().then(|| "acme".into()),
                key: unsigned
                    .is_none()
                    .then(|| format!("sha256:{}", "ef".repeat(32))),
                unsigned,
                ..Default::default()
            }),
        }],
    }
}

#[test]
fn version_2_is_written_only_when_needed_and_checked_when_read() {
    let lock = pulled(None);
    let text = lock.to_toml();
    assert!(
        text.contains("version = 2") && text.contains("[plugin.source]"),
        "{text}"
    );
    let read: LockFile = toml::from_str(&text).expect("toml");
    assert_eq!(read.check_version(), Ok(()));
    assert_eq!(read.plugins, lock.plugins);

    let mut plain = lock.clone();
    plain.plugins[0].source = None;
    assert!(plain.to_toml().contains("version = 1"));

    let mut old = read.clone();
    old.version = 1;
    assert!(old.check_version().is_err(), "version 1 has no sources");
    let mut future = read.clone();
    future.version = 3;
    assert!(future.check_version().expect_err("3").contains("1 and 2"));
    let mut moved = read.clone();
    moved.plugins[0].sha256 = "00".repeat(32);
    assert!(
        moved
            .check_version()
            .expect_err("layer")
            .contains("same bytes")
    );
    let mut both = pulled(Some(Unsigned::ByFlag));
    assert_eq!(both.check_version(), Ok(()));
    if let Some(source) = &mut both.plugins[0].source {
        source.signer = Some("acme".into());
        source.key = Some("sha256:00".into());
    }
    assert!(both.check_version().is_err(), "signed and unsigned at once");
}

#[test]
fn a_one_off_unsigned_pull_needs_no_trust_policy_and_a_signed_one_does() {
    let dir = std::env::temp_dir().join(format!("llm-worker-lock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    assert!(
        pulled(Some(Unsigned::ByFlag))
            .source_refusals(&dir)
            .is_empty()
    );
    let refusals = pulled(None).source_refusals(&dir);
    assert!(refusals["greet.wasm"].contains("is gone"), "{refusals:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_one_off_unsigned_pull_stops_loading_once_a_rule_wants_its_repository_signed() {
    let dir = llm_worker_tests::scratch_dir("lock-flag-bound");
    let mut lock = pulled(Some(Unsigned::ByFlag));
    // Writes the trust policy; the lock approves it when `approve`.
    let mut write_trust = |rules: &str, approve: bool| {
        let key = crate::trust::tests::KEY;
        let text = format!("[keys]\nacme = \"\"\"\n{key}\"\"\"\n{rules}");
        std::fs::write(dir.path().join(crate::trust::TRUST_FILE), text).expect("write");
        if approve {
            lock.trust_sha256 = crate::trust::TrustPolicy::pin(dir.path()).expect("pin");
        }
        lock.clone()
    };
    // Approved rules that say nothing of its repository, or let it come unsigned: it loads.
    let other = "[[rule]]\nrepository = \"r.example/other/*\"\nsigners = [\"acme\"]\n";
    assert!(
        write_trust(other, true)
            .source_refusals(dir.path())
            .is_empty()
    );
    let unsigned = "[[rule]]\nrepository = \"r.example/acme/*\"\nunsigned = true\n";
    assert!(
        write_trust(unsigned, true)
            .source_refusals(dir.path())
            .is_empty()
    );
    // The same rules, not approved: a policy the lock did not approve decides nothing.
    let refusals = write_trust(other, false).source_refusals(dir.path());
    assert!(
        refusals["greet.wasm"].contains("changed since it was locked"),
        "{refusals:?}"
    );
    // A rule that wants it signed binds the exception too.
    let signed = "[[rule]]\nrepository = \"r.example/acme/*\"\nsigners = [\"acme\"]\n";
    let refusals = write_trust(signed, true).source_refusals(dir.path());
    let reason = &refusals["greet.wasm"];
    assert!(
        reason.contains("--allow-unsigned") && reason.contains("signed by acme"),
        "{reason}"
    );
    // A trust policy that cannot be read cannot say no rule binds it.
    std::fs::write(
        dir.path().join(crate::trust::TRUST_FILE),
        "[[rule]]\nbroken",
    )
    .expect("write");
    let refusals = lock.source_refusals(dir.path());
    assert!(refusals["greet.wasm"].contains("invalid"), "{refusals:?}");
}

#[test]
fn a_lock_entry_is_judged_by_its_registry_s_canonical_name() {
    let dir = llm_worker_tests::scratch_dir("lock-odd-spelling");
    let key = crate::trust::tests::KEY;
    let rules = "[[rule]]\nrepository = \"r.example/acme/*\"\nsigners = [\"acme\"]\n";
    std::fs::write(
        dir.path().join(crate::trust::TRUST_FILE),
        format!("[keys]\nacme = \"\"\"\n{key}\"\"\"\n{rules}"),
    )
    .expect("write");
    let pin = crate::trust::TrustPolicy::pin(dir.path()).expect("pin");
    let spelt = |repository: &str, unsigned: Option<Unsigned>| {
        let mut lock = pulled(unsigned);
        lock.trust_sha256.clone_from(&pin);
        if let Some(source) = &mut lock.plugins[0].source {
            repository.clone_into(&mut source.repository);
        }
        lock.source_refusals(dir.path())
    };
    // Pulled unsigned under another spelling of the repository the rule binds: refused.
    for repository in [
        "R.EXAMPLE/acme/greet",
        "r.example:443/acme/greet",
        "r.example:0443/acme/greet",
        "r.example./acme/greet",
    ] {
        let refusals = spelt(repository, Some(Unsigned::ByFlag));
        let reason = refusals.get("greet.wasm").map(String::as_str).unwrap_or("");
        assert!(
            reason.contains("--allow-unsigned") && reason.contains("r.example/acme/greet"),
            "{repository}: {refusals:?}"
        );
    }
    // A name that is no registry's repository binds nothing and loads nothing: its registry
    // no host's, or its path no repository's (the rule's `r.example/acme/greet` written with
    // a trailing slash, in capitals, with a `.` part or a tag: no rule covered it, so the
    // unsigned plugin loaded).
    for repository in [
        "r.example:0/acme/greet",
        "r.example/acme/greet/",
        "r.example/Acme/greet",
        "r.example/acme/./greet",
        "r.example/acme//greet",
        "r.example/acme/greet:1",
    ] {
        let refusals = spelt(repository, Some(Unsigned::ByFlag));
        assert!(
            refusals
                .get("greet.wasm")
                .is_some_and(|reason| reason.contains("not a registry's repository")),
            "{repository}: {refusals:?}"
        );
    }
    // The key the rule accepts, recorded under another spelling: still allowed.
    let fingerprint = crate::trust::TrustPolicy::read(dir.path())
        .expect("read")
        .expect("a policy")
        .keys["acme"]
        .fingerprint
        .clone();
    let mut lock = pulled(None);
    lock.trust_sha256.clone_from(&pin);
    if let Some(source) = &mut lock.plugins[0].source {
        source.repository = "R.Example:443/acme/greet".into();
        source.key = Some(fingerprint);
    }
    assert!(lock.source_refusals(dir.path()).is_empty());
}

#[test]
fn a_lock_approving_one_file_twice_is_invalid() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("llm-worker-lock-twice-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut lock = pulled(None);
    let mut local = lock.plugins[0].clone();
    local.source = None;
    local.sha256 = "00".repeat(32);
    lock.plugins.push(local);
    let path = dir.join(LOCK_FILE);
    std::fs::write(&path, lock.to_toml()).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let error = LockFile::read(&dir).expect_err("two entries").to_string();
    assert!(
        error.contains("greet.wasm has more than one entry"),
        "{error}"
    );
    // One entry is read.
    lock.plugins.pop();
    std::fs::write(&path, lock.to_toml()).expect("write");
    assert!(LockFile::read(&dir).expect("valid").is_some());
    std::fs::remove_dir_all(&dir).expect("clean up");
}
