//! `serve --http` for a team: named tokens are identities, the directory's access policy gives
//! each only its tools, and a policy the lock did not approve stops the server from starting.

use std::path::{Path, PathBuf};

use super::{Server, connect};
use crate::cli::{run, stderr, stdout};

const ACCESS: &str = r#"
[[grant]]
who = ["token:alice"]
tools = ["counter/*"]

[[grant]]
who = ["token:bob"]
tools = ["greet/greet"]
"#;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef01";

/// A private token file naming Alice's and Bob's tokens, in `dir`.
fn token_file(dir: &Path) -> PathBuf {
    let path = dir.join("tokens");
    std::fs::write(&path, format!("# the team\nalice: {ALICE}\nbob: {BOB}\n")).expect("write");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    path
}

async fn tool_names(url: &str, token: &str) -> Vec<String> {
    let client = connect(url, Some(token)).await.expect("admitted");
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|tool| tool.name.to_string())
        .collect();
    names.sort();
    client.cancel().await.expect("close");
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_identity_sees_only_what_the_access_policy_grants_it() {
    let secrets = llm_worker_tests::scratch_dir("http-identities-tokens");
    let tokens = token_file(&secrets);
    let server = Server::try_start_with(
        "http-identities",
        &["counter", "greet"],
        &[("llm-worker.access.toml", ACCESS)],
        "127.0.0.1:0",
        &["--token-file", tokens.to_str().expect("utf-8")],
    )
    .await
    .unwrap_or_else(|said| panic!("the server did not start: {said}"));
    assert_eq!(tool_names(&server.url, ALICE).await, ["count", "peek"]);
    assert_eq!(tool_names(&server.url, BOB).await, ["greet"]);
    server.stop().await;

    // Without identities, a policy cannot be applied: refused, not ignored.
    let refused = Server::try_start_with(
        "http-identities-open",
        &["counter"],
        &[("llm-worker.access.toml", ACCESS)],
        "127.0.0.1:0",
        &["--no-auth"],
    )
    .await;
    let said = refused.err().expect("refused");
    assert!(said.contains("--no-auth has none"), "{said}");

    // A token without a name would be `token-N` by its place in the file, and its grants
    // would move with the file's lines: under an access policy it is refused.
    let unnamed = secrets.join("unnamed");
    std::fs::write(
        &unnamed,
        format!(
            "alice: {ALICE}
{BOB}
"
        ),
    )
    .expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&unnamed, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let refused = Server::try_start_with(
        "http-identities-unnamed",
        &["counter"],
        &[("llm-worker.access.toml", ACCESS)],
        "127.0.0.1:0",
        &["--token-file", unnamed.to_str().expect("utf-8")],
    )
    .await;
    let said = refused.err().expect("refused");
    assert!(
        said.contains("line 2: a token without a name") && said.contains("NAME: TOKEN"),
        "{said}"
    );
}

#[test]
fn an_access_policy_changed_since_the_lock_is_not_served() {
    let root = llm_worker_tests::scratch_dir("http-identities-lock");
    let dir = root.join("plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::copy(
        llm_worker_tests::plugin_path("counter"),
        dir.join("counter.wasm"),
    )
    .expect("copy");
    let access = dir.join("llm-worker.access.toml");
    std::fs::write(&access, ACCESS).expect("write");
    let tokens = token_file(&root);
    let cache = llm_worker_tests::compiled_cache();
    let dir_arg = dir.to_str().expect("utf-8");
    let out = run(cache, &["lock", dir_arg], None);
    assert!(out.status.success(), "{}", stderr(&out));

    // Someone widens the policy after the lock: the server does not start on it.
    std::fs::write(
        &access,
        format!("{ACCESS}\n[[grant]]\nwho = [\"*\"]\ntools = [\"*\"]\n"),
    )
    .expect("write");
    let serve = || {
        run(
            cache,
            &[
                "serve",
                "--http",
                "127.0.0.1:0",
                "--token-file",
                tokens.to_str().expect("utf-8"),
                dir_arg,
            ],
            None,
        )
    };
    let out = serve();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("changed since it was locked"),
        "{}",
        stderr(&out)
    );
    let out = run(cache, &["lock", "--check", dir_arg], None);
    assert!(
        stdout(&out).contains("llm-worker.access.toml: changed"),
        "{}",
        stdout(&out)
    );
    // Removed after the lock: not served either (the lock pinned a policy).
    std::fs::remove_file(&access).expect("remove");
    let out = serve();
    assert!(stderr(&out).contains("is gone"), "{}", stderr(&out));
    // Approving it again is what `lock` says it did.
    std::fs::write(&access, ACCESS).expect("write");
    let out = run(cache, &["lock", dir_arg], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stdout(&out).contains("approved: llm-worker.access.toml"),
        "the same policy as locked: {}",
        stdout(&out)
    );
}
