//! What `pull` refuses (unverified, tampered, oversized and non-Wasm artifacts, a signature made
//! for another repository, names outside the directory, plain HTTP off loopback), and the
//! unsigned exceptions it records as such.

use llm_worker_tests::plugin_path;

use super::{
    ACME_KEY, OTHER_KEY, Registry, independent_client_installed, independent_push, manifest_of,
    push_to, sha256_file, signed_by, source_of, text_of, write_trust,
};
use crate::cli::{run, stderr, stdout};

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

        // A manifest of 150,000 tiny objects (1.35 MB of text, some 100 MB once parsed as
        // JSON values): refused before it is parsed.
        independent_push(
            &registry,
            "acme/padded",
            &plugin_path("greet"),
            &["--sign", text_of(&acme), "--padding", "150000"],
        );
        let out = registry.pull("acme/padded:1", &dir, &[]);
        assert_eq!(out.status.code(), Some(1));
        let message = stderr(&out);
        assert!(
            message.contains("the manifest") && message.contains("over the cap of 1048576 bytes"),
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

    // The flag is for what no rule covers: it never overrides a rule that wants signers.
    registry.push("greet", "acme/greet:1", None);
    let out = registry.pull(
        "acme/greet:1",
        &dir,
        &["--allow-unsigned", "--name", "flagged"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no signature") && stderr(&out).contains("acme"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.join("flagged.wasm").exists());
    // ... nor does a trust policy the lock did not approve say that no rule covers it.
    write_trust(
        &dir,
        &format!("{}# edited\n", signed_by(&registry, "acme/*", "\"acme\"")),
    );
    let out = registry.pull(
        "scratch/greet:1",
        &dir,
        &["--allow-unsigned", "--name", "flagged"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("not the one the lock approved"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.join("flagged.wasm").exists());
    // A rule written later that wants signers binds a plugin pulled with the flag.
    write_trust(&dir, &signed_by(&registry, "scratch/*", "\"acme\""));
    let out = run(&registry.cache(), &["lock", "--check", text_of(&dir)], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains(
            "refused: greet.wasm: it was pulled unsigned with `pull --allow-unsigned`, and a rule"
        ),
        "{}",
        stdout(&out)
    );
    let out = run(
        &registry.cache(),
        &["call", text_of(&dir), "greet", r#"{"name":"x"}"#],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("pull --allow-unsigned"),
        "{}",
        stderr(&out)
    );
    // The way out the refusal names: delete the file, approve with `lock`, pull a signed one.
    assert!(
        stderr(&out).contains("delete its file, approve the directory and its trust policy"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_file(dir.join("greet.wasm")).expect("delete");
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let acme = registry.key("acme", ACME_KEY);
    registry.push("greet", "scratch/greet:1", Some(&acme));
    let out = registry.pull("scratch/greet:1", &dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        source_of(&dir, "greet.wasm")["signer"].as_str(),
        Some("acme")
    );

    // A rule may let a repository's plugins come unsigned; that is recorded too.
    let rules = format!(
        "[[rule]]\nrepository = \"{}/scratch/*\"\nunsigned = true\n",
        registry.address
    );
    write_trust(&dir, &rules);
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    // (Under another name in another directory: one directory cannot serve the same tools
    // twice.)
    let other = registry.plugin_dir("others", &rules);
    let out = registry.pull("scratch/greet:1", &other, &["--name", "greet2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        source_of(&other, "greet2.wasm")["unsigned"].as_str(),
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

/// The port of the test's registry, for spelling its address other ways.
fn port_of(registry: &Registry) -> &str {
    registry
        .address
        .rsplit_once(':')
        .map(|(_, port)| port)
        .expect("HOST:PORT")
}

#[test]
fn other_spellings_of_a_registry_are_bound_by_its_rules() {
    let Some(registry) = Registry::start("registry-spellings") else {
        return;
    };
    let port = port_of(&registry);
    registry.push("greet", "acme/greet:1", None);
    // One rule, naming this machine one way.
    let rules =
        format!("[[rule]]\nrepository = \"localhost:{port}/acme/*\"\nsigners = [\"acme\"]\n");
    let dir = registry.plugin_dir("plugins", &rules);
    // The same registry, spelt as the rule's text is not: case, a leading zero in the port,
    // this machine's address in IPv4's other forms and as an IPv4-mapped IPv6 address (a
    // connection to it reaches the IPv4 address). `--allow-unsigned` is for what no rule
    // covers, and the rule covers each of these.
    for spelling in [
        format!("LOCALHOST:{port}"),
        format!("localhost:0{port}"),
        format!("LocalHost.:00{port}"),
        format!("127.0.0.1:{port}"),
        format!("127.1:{port}"),
        format!("0x7f.0.0.1:0{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
        format!("[::FFFF:7F00:1]:0{port}"),
    ] {
        let reference = format!("{spelling}/acme/greet:1");
        let out = pull_allowing_unsigned(&registry, &reference, &dir);
        assert_eq!(out.status.code(), Some(1), "{reference}: {}", stdout(&out));
        let message = stderr(&out);
        assert!(
            message.contains("no signature") && message.contains("signed by acme"),
            "{reference}: {message}"
        );
        assert!(
            !dir.join("greet.wasm").exists() && !dir.join("llm-worker.lock").exists(),
            "{reference}: nothing written"
        );
    }
    // What is shown and recorded is the registry's one name.
    let out = run(
        &registry.cache(),
        &[
            "pull",
            &format!("LOCALHOST:0{port}/acme/greet:1"),
            text_of(&dir),
            "--plain-http",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("localhost:{port}/acme/greet:1 is not verified")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_lock_entry_spelt_another_way_is_refused_once_a_rule_wants_it_signed() {
    let Some(registry) = Registry::start("registry-odd-lock") else {
        return;
    };
    let port = port_of(&registry);
    registry.push("greet", "scratch/greet:1", None);
    let dir = registry.plugin_dir("plugins", &signed_by(&registry, "acme/*", "\"acme\""));
    let reference = format!("localhost:{port}/scratch/greet:1");
    let out = pull_allowing_unsigned(&registry, &reference, &dir);
    assert!(out.status.success(), "{}", stderr(&out));
    // The entry as an earlier llm-worker recorded it, the registry spelt as typed.
    let lock_path = dir.join("llm-worker.lock");
    let text = std::fs::read_to_string(&lock_path).expect("lock");
    let canonical = format!("\"localhost:{port}/scratch/greet");
    assert_eq!(text.matches(&canonical).count(), 2, "{text}");
    let odd = text.replace(&canonical, &format!("\"LOCALHOST:0{port}/scratch/greet"));
    std::fs::write(&lock_path, odd).expect("rewrite the lock");
    assert_eq!(
        source_of(&dir, "greet.wasm")["repository"].as_str(),
        Some(format!("LOCALHOST:0{port}/scratch/greet").as_str())
    );
    let call = || {
        run(
            &registry.cache(),
            &["call", text_of(&dir), "greet", r#"{"name":"x"}"#],
            None,
        )
    };
    let out = call();
    assert!(
        out.status.success(),
        "no rule binds it yet: {}",
        stderr(&out)
    );

    // A rule for the registry's name wants the repository signed: `lock` does not approve
    // the directory with it, and the plugin no longer loads.
    write_trust(
        &dir,
        &format!("[[rule]]\nrepository = \"localhost:{port}/scratch/*\"\nsigners = [\"acme\"]\n"),
    );
    let out = run(&registry.cache(), &["lock", text_of(&dir)], None);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let why = format!(
        "refused: greet.wasm: it was pulled unsigned with `pull --allow-unsigned`, and a rule of \
         llm-worker.trust.toml now wants localhost:{port}/scratch/greet signed by acme"
    );
    assert!(stderr(&out).contains(&why), "{}", stderr(&out));
    let out = call();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("pull --allow-unsigned"),
        "{}",
        stderr(&out)
    );
}

/// `pull --plain-http --allow-unsigned REFERENCE DIR`.
fn pull_allowing_unsigned(
    registry: &Registry,
    reference: &str,
    dir: &std::path::Path,
) -> std::process::Output {
    run(
        &registry.cache(),
        &[
            "pull",
            reference,
            text_of(dir),
            "--plain-http",
            "--allow-unsigned",
        ],
        None,
    )
}

/// A TCP proxy on the loopback address in front of `upstream` (`host:port`) that holds each
/// piece a client sends for `delay` before passing it on: a registry that answers every request
/// slowly. Returns its `host:port`; it serves until the test process ends.
fn slow_proxy(upstream: &str, delay: std::time::Duration) -> String {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
    let address = listener.local_addr().expect("address").to_string();
    let upstream = upstream.to_owned();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(&upstream) else {
                continue;
            };
            let (Ok(mut from_client), Ok(mut to_client)) = (client.try_clone(), client.try_clone())
            else {
                continue;
            };
            let (Ok(mut to_server), Ok(mut from_server)) = (server.try_clone(), server.try_clone())
            else {
                continue;
            };
            std::thread::spawn(move || {
                let mut buffer = [0u8; 16 << 10];
                while let Ok(read @ 1..) = from_client.read(&mut buffer) {
                    std::thread::sleep(delay);
                    if to_server.write_all(&buffer[..read]).is_err() {
                        break;
                    }
                }
                let _ = to_server.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from_server, &mut to_client);
                let _ = to_client.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    address
}

/// A registry answering each of a pull's requests just inside the time limit of one request
/// held the pull for all of them together (dozens, with signatures); the pull's requests now
/// share its limit.
#[test]
fn a_slow_registry_cannot_hold_a_pull_past_its_limit() {
    let Some(registry) = Registry::start("registry-slow") else {
        return;
    };
    registry.push("greet", "scratch/slow:1", None);
    let proxy = slow_proxy(&registry.address, std::time::Duration::from_millis(600));
    let dir = registry.plugin_dir(
        "plugins",
        &format!("[[rule]]\nrepository = \"{proxy}/scratch/*\"\nunsigned = true\n"),
    );
    let reference = format!("{proxy}/scratch/slow:1");
    let pull = |limit: &str| {
        run(
            &registry.cache(),
            &[
                "pull",
                &reference,
                text_of(&dir),
                "--plain-http",
                "--timeout-secs",
                limit,
            ],
            None,
        )
    };
    // Each request takes 0.6 s, inside the second the limit gives one; not all of them.
    let out = pull("1");
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let message = stderr(&out);
    assert!(message.contains("time limit of one pull"), "{message}");
    assert!(!dir.join("slow.wasm").exists());
    assert!(!dir.join("llm-worker.lock").exists());
    // Given time enough, the same pull through the same slow registry is done.
    let out = pull("120");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sha256_file(&dir.join("slow.wasm")),
        sha256_file(&plugin_path("greet"))
    );
}

/// A proxy on the loopback address in front of `upstream` that, once `armed`, answers every
/// GET of `tag_path` after the first with the manifest at `other_path` (set once known): a registry (or a tag
/// moved at the right moment) naming one manifest to the first question and another to the
/// second. One request per connection (`Connection: close` both ways). Returns its
/// `host:port`; it serves until the test process ends.
fn two_faced_proxy(
    upstream: &str,
    tag_path: String,
    other_path: std::sync::Arc<std::sync::Mutex<String>>,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> String {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
    let address = listener.local_addr().expect("address").to_string();
    let upstream = upstream.to_owned();
    let asked = AtomicUsize::new(0);
    std::thread::spawn(move || {
        for mut client in listener.incoming().flatten() {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 64 << 10 {
                match client.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let mut lines = head.split("\r\n");
            let mut request_line = lines.next().unwrap_or_default().to_owned();
            if request_line == format!("GET {tag_path} HTTP/1.1")
                && armed.load(Ordering::SeqCst)
                && asked.fetch_add(1, Ordering::SeqCst) >= 1
            {
                let other_path = other_path.lock().expect("lock").clone();
                request_line = format!("GET {other_path} HTTP/1.1");
            }
            let mut forwarded = format!("{request_line}\r\n");
            for line in lines.filter(|line| {
                !line.is_empty() && !line.to_ascii_lowercase().starts_with("connection:")
            }) {
                forwarded.push_str(line);
                forwarded.push_str("\r\n");
            }
            forwarded.push_str("Connection: close\r\n\r\n");
            let Ok(mut server) = TcpStream::connect(&upstream) else {
                continue;
            };
            // The request's body (a push's), then the answer.
            let (Ok(mut body_from), Ok(mut body_to)) = (client.try_clone(), server.try_clone())
            else {
                continue;
            };
            if server.write_all(forwarded.as_bytes()).is_ok() {
                std::thread::spawn(move || std::io::copy(&mut body_from, &mut body_to));
                let _ = std::io::copy(&mut server, &mut client);
            }
            let _ = client.shutdown(std::net::Shutdown::Both);
            let _ = server.shutdown(std::net::Shutdown::Both);
        }
    });
    address
}

/// The lock pins a manifest: a pull restoring a missing file asked the registry for the tag
/// twice (to compare it with the lock, then to pull), so a registry answering the second
/// question with an older manifest (signed by the same key: a rollback) had it installed and
/// locked without `--update`. The restoring pull now fetches the manifest it compared.
#[test]
fn a_restoring_pull_installs_the_locked_manifest_whatever_the_tag_says_next() {
    let Some(registry) = Registry::start("registry-two-faced") else {
        return;
    };
    let acme = registry.key("acme", ACME_KEY);
    let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let older = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let proxy = two_faced_proxy(
        &registry.address,
        "/v2/acme/tool/manifests/1.0".into(),
        std::sync::Arc::clone(&older),
        std::sync::Arc::clone(&armed),
    );
    // Pushed (and signed) under the proxy's address, the one the pulls name.
    let reference = format!("{proxy}/acme/tool:1.0");
    let push = |plugin: &str| manifest_of(&push_to(plugin, &reference, Some(&acme)));
    *older.lock().expect("lock") = format!("/v2/acme/tool/manifests/{}", push("counter"));
    let newer = push("greet");
    let dir = registry.plugin_dir(
        "plugins",
        &format!("[[rule]]\nrepository = \"{proxy}/acme/*\"\nsigners = [\"acme\"]\n"),
    );
    let pull = || {
        run(
            &registry.cache(),
            &["pull", &reference, text_of(&dir), "--plain-http"],
            None,
        )
    };
    let out = pull();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        source_of(&dir, "tool.wasm")["manifest"].as_str(),
        Some(newer.as_str())
    );

    // The file is lost (a checkout with the lock but not the plugin); the registry turns
    // two-faced, and the file is pulled again.
    std::fs::remove_file(dir.join("tool.wasm")).expect("remove the plugin");
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let out = pull();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        source_of(&dir, "tool.wasm")["manifest"].as_str(),
        Some(newer.as_str()),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        sha256_file(&dir.join("tool.wasm")),
        sha256_file(&plugin_path("greet"))
    );
}

/// `pull --plain-http` speaks to a registry on this machine: with a proxy in the environment
/// (as many companies set one, making no exception for loopback) the requests, and the local
/// registry's credentials, went to the proxy in clear, which reached `localhost` on its own
/// side. And a plugin directory others may add files to (sticky or not) is refused before
/// anything is fetched or written: the lock would protect nothing there.
#[cfg(unix)]
#[test]
fn plain_http_takes_no_proxy_and_a_shared_directory_is_refused_first() {
    use std::os::unix::fs::PermissionsExt;
    let Some(registry) = Registry::start("registry-no-proxy") else {
        return;
    };
    registry.push("greet", "scratch/direct:1", None);
    let rules = format!(
        "[[rule]]\nrepository = \"{}/scratch/*\"\nunsigned = true\n",
        registry.address
    );
    let pull = |dir: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"))
            .args(["pull", &registry.reference("scratch/direct:1")])
            .arg(dir)
            .arg("--plain-http")
            .arg("--cache-dir")
            .arg(registry.cache())
            .env_remove("RUST_LOG")
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            // A proxy nobody listens on: a request sent through it fails.
            .env("HTTP_PROXY", "http://127.0.0.1:1")
            .env("http_proxy", "http://127.0.0.1:1")
            .env("ALL_PROXY", "http://127.0.0.1:1")
            .output()
            .expect("llm-worker pull")
    };
    let dir = registry.plugin_dir("plugins", &rules);
    let out = pull(&dir);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        sha256_file(&dir.join("direct.wasm")),
        sha256_file(&plugin_path("greet"))
    );

    let shared = registry.plugin_dir("shared", &rules);
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let out = pull(&shared);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let message = stderr(&out);
    assert!(
        message.contains("cannot hold a lock file") && message.contains("nothing was pulled"),
        "{message}"
    );
    assert!(!shared.join("direct.wasm").exists());
    assert!(!shared.join("llm-worker.lock").exists());
}
