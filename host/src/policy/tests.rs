use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;
use std::time::Duration;

use super::*;

fn parse(text: &str) -> Result<SandboxPolicy, PolicyError> {
    SandboxPolicy::parse(
        text,
        Path::new("/plugins/w.policy.toml"),
        &Limits::default(),
    )
}

#[test]
fn an_empty_policy_grants_nothing() {
    assert_eq!(parse("").ok(), Some(SandboxPolicy::default()));
}

#[test]
fn limits_override_the_defaults_key_by_key() {
    let policy = parse("[limits]\nmemory_mib = 8\ntimeout_ms = 250\nschema_memory_mib = 1024\n")
        .expect("valid");
    assert_eq!(policy.limits.memory_bytes, 8 << 20);
    assert_eq!(policy.limits.schema_memory_bytes, 1 << 30);
    assert_eq!(policy.limits.call_timeout, Duration::from_millis(250));
    assert_eq!(
        policy.limits.max_output_bytes,
        Limits::default().max_output_bytes
    );
}

#[test]
fn errors_name_the_file_and_the_key() {
    assert_eq!(
        parse("[limits]\nfuel = 7\n")
            .ok()
            .and_then(|p| p.limits.fuel),
        Some(7)
    );
    let message = parse("[limits]\nmemory = 8\n")
        .expect_err("unknown")
        .to_string();
    assert!(
        message.contains("/plugins/w.policy.toml") && message.contains("memory"),
        "{message}"
    );
    let message = parse("[limits]\nmemory_mib = 0\n")
        .expect_err("range")
        .to_string();
    assert!(message.contains("limits.memory_mib"), "{message}");
    for bad in ["0", "4097"] {
        let message = parse(&format!("[limits]\nschema_memory_mib = {bad}\n"))
            .expect_err("range")
            .to_string();
        assert!(
            message.contains("limits.schema_memory_mib") && message.contains("1 to 4096"),
            "{message}"
        );
    }
    assert!(
        Limits::default()
            .schema_memory_bytes(1 << 19)
            .check()
            .is_err_and(|message| message.contains("schema memory"))
    );
    // A copy out of a plugin may take three times the output limit: it is held to 16 MiB.
    for bad in ["0", "16777217"] {
        let message = parse(&format!("[limits]\nmax_output_bytes = {bad}\n"))
            .expect_err("range")
            .to_string();
        assert!(
            message.contains("limits.max_output_bytes") && message.contains("16 MiB"),
            "{message}"
        );
    }
    assert!(
        Limits::default()
            .max_output_bytes(32 << 20)
            .check()
            .is_err_and(|message| message.contains("max_output_bytes"))
    );
    let message = parse("[limits]\ntimeout_ms = \"soon\"\n")
        .expect_err("type")
        .to_string();
    assert!(message.contains("timeout_ms"), "{message}");
    let message = parse("[[dirs]]\nhost = \"/no/such/dir\"\nguest = \"/d\"\n")
        .expect_err("missing dir")
        .to_string();
    assert!(message.contains("dirs[0].host"), "{message}");
    let message = parse("[[dirs]]\nhost = \"/\"\nguest = \"d\"\nmode = \"ro\"\n")
        .expect_err("relative guest")
        .to_string();
    assert!(message.contains("dirs[0].guest"), "{message}");
    let message = parse("[[dirs]]\nhost = \"/\"\nguest = \"/d\"\nmode = \"rwx\"\n")
        .expect_err("bad mode")
        .to_string();
    assert!(message.contains("rwx"), "{message}");
    let message = parse("[env]\ninherit = [\"LLM_WORKER_SURELY_UNSET\"]\n")
        .expect_err("unset")
        .to_string();
    assert!(message.contains("env.inherit[0]"), "{message}");
    let message = parse("[env]\nset = { \"A=B\" = \"c\" }\n")
        .expect_err("= in a name")
        .to_string();
    assert!(message.contains("env.set.A=B"), "{message}");
    let message = parse("[env]\ninherit = [\"A=B\"]\n")
        .expect_err("= in a name")
        .to_string();
    assert!(
        message.contains("not a valid environment variable name"),
        "{message}"
    );
    let message = parse(
        "[[dirs]]\nhost = \"/tmp\"\nguest = \"/d\"\n[[dirs]]\nhost = \"/\"\nguest = \"/d\"\n",
    )
    .expect_err("the same guest path twice")
    .to_string();
    assert!(message.contains("dirs[1].guest"), "{message}");
    // TOML errors say where, and the key of that line, without quoting the file.
    let message = parse("[limits]\nmemory_mib = \n")
        .expect_err("bad toml")
        .to_string();
    assert!(
        message.contains("at line 2, column 14 (`memory_mib = …`)"),
        "{message}"
    );
}

/// The parser's own message quotes the line it stopped at, and a value it did not expect: a
/// secret with a typo beside it (or in the wrong place) would be printed by `check` and logged
/// by `serve`.
#[test]
fn a_file_that_does_not_parse_is_not_quoted() {
    for text in [
        "[http]\nallow = [\"api.example.com\"]\n[[http.secrets]]\nhost = \"api.example.com\"\n\
         header = \"X-Key\"\nvaleu = \"sk-live-0123\"\n",
        "[limits]\nmemory_mib = \"sk-live-0123\"\n",
        "[env]\nset = { KEY = sk-live-0123 }\n",
        // A number where a string goes: serde quotes it in backticks.
        "[env]\nset = { KEY = 987654321 }\n",
        // A bare line of base64 (it ends in `=`).
        "[http]\nallow = [\n\"a.example\",\nc2stbGl2ZS0wMTIz=\n]\n",
    ] {
        let message = parse(text).expect_err("does not parse").to_string();
        assert!(
            !["sk-live", "987654321", "c2stbGl2ZS0wMTIz"]
                .iter()
                .any(|secret| message.contains(secret))
                && message.contains("at line"),
            "{message}"
        );
    }
    let message = parse("[limits]\nmemory = 8\n")
        .expect_err("unknown")
        .to_string();
    assert!(
        message.contains("at line 2, column 1") && message.contains("`memory`"),
        "{message}"
    );
}

/// Values that parse but are refused are quoted in the message, unless they may hold a
/// secret: a curl header line pasted as a header name, a URL with a key in its user
/// information as a rule or a secret's host.
#[test]
fn a_refused_value_that_may_hold_a_secret_is_not_quoted_whole() {
    for text in [
        "[http]\nallow = [\"https://api.example.com\"]\n[[http.secrets]]\n\
         host = \"https://api.example.com\"\nheader = \"Authorization: Bearer sk-live-0123\"\n\
         value = \"x\"\n",
        "[http]\nallow = [\"https://api:key-0123@api.example.com\"]\n",
        "[http]\nallow = [\"https://api.example.com\"]\n[[http.secrets]]\n\
         host = \"https://u:key-0123@other.example\"\nheader = \"X-Key\"\nvalue = \"x\"\n",
        // A password holding `/`, a key in the query.
        "[http]\nallow = [\"https://u:ab/key-0123@api.example.com\"]\n",
        "[http]\nallow = [\"https://api.example.com/?api_key=key-0123\"]\n",
    ] {
        let message = parse(text).expect_err("refused").to_string();
        assert!(
            !message.contains("sk-live") && !message.contains("key-0123"),
            "{message}"
        );
    }
    let message = parse(
        "[http]\nallow = [\"https://api.example.com\"]\n[[http.secrets]]\n\
         host = \"https://api.example.com\"\nheader = \"Authorization: Bearer sk\"\n\
         value = \"x\"\n",
    )
    .expect_err("refused")
    .to_string();
    assert!(
        message.contains("\"Authorization\"") && message.contains("not shown"),
        "{message}"
    );
}

/// A secret made of an environment variable that the policy also hands the plugin would be in
/// the plugin's hands: refused at load, naming both.
#[test]
fn a_secrets_variable_is_never_handed_to_the_plugin() {
    // `PATH`, set wherever tests run, stands for the secret's variable.
    let path = std::env::var("PATH").expect("PATH is set");
    let message = parse(
        "[env]\ninherit = [\"HOME\", \"PATH\"]\n[http]\n\
         allow = [\"https://api.example.com\"]\n[[http.secrets]]\n\
         host = \"https://api.example.com\"\nheader = \"X-Key\"\n\
         value = \"Bearer ${PATH}\"\n",
    )
    .expect_err("refused")
    .to_string();
    assert!(
        message.contains("env.inherit[1]")
            && message.contains("http.secrets[0].value")
            && !message.contains(&path),
        "{message}"
    );
    // The same value under another name.
    let inherited = [
        ("HOME".to_owned(), "/home/ci".to_owned()),
        ("GH_TOKEN".to_owned(), "ghp_0123456789abcdef".to_owned()),
    ];
    assert_eq!(
        super::file::handing_over(&inherited, "GITHUB_TOKEN", "ghp_0123456789abcdef"),
        Some(1)
    );
    assert_eq!(
        super::file::handing_over(&inherited, "GITHUB_TOKEN", "other-token"),
        None
    );
    // A secret made of an inherited one.
    assert_eq!(
        super::file::handing_over(&inherited, "AUTH", "Bearer ghp_0123456789abcdef"),
        Some(1)
    );
    // Short values match too often to mean anything.
    assert_eq!(super::file::handing_over(&inherited, "X", "ci"), None);
}

#[test]
fn grants_are_resolved() {
    let policy = parse(
        "[env]\ninherit = [\"PATH\"]\nset = { MODE = \"test\" }\n\
         [[dirs]]\nhost = \"/tmp\"\nguest = \"/scratch\"\nmode = \"rw\"\n",
    )
    .expect("valid");
    assert_eq!(policy.env[0].0, "PATH");
    assert_eq!(policy.env[1], ("MODE".to_owned(), "test".to_owned()));
    assert_eq!(policy.dirs[0].guest, "/scratch");
    assert!(policy.dirs[0].writable);
    assert!(policy.dirs[0].host.is_absolute());
}

#[test]
fn http_grants_match_scheme_host_and_port() {
    let grant = |rule: &str| HttpGrant::parse(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
    let api = grant("https://api.example.com");
    assert!(api.allows("https", "api.example.com", None));
    assert!(api.allows("https", "API.example.com", Some(443)));
    assert!(!api.allows("http", "api.example.com", None));
    assert!(!api.allows("https", "api.example.com", Some(8443)));
    assert!(!api.allows("https", "evil.com", None));
    let wild = grant("*.example.org");
    assert!(wild.allows("https", "a.example.org", None));
    assert!(wild.allows("http", "a.b.example.org", Some(80)));
    assert!(!wild.allows("https", "example.org", None));
    assert!(!wild.allows("https", "evilexample.org", None));
    let local = grant("http://127.0.0.1:8080");
    assert!(local.allows("http", "127.0.0.1", Some(8080)));
    assert!(!local.allows("http", "127.0.0.1", None));
    for bad in [
        "ftp://x",
        "https://x/path",
        "x:notaport",
        "",
        "https://user@x",
        "*.",
        "http://127.0.0.1:0",
        "localhost:65536",
    ] {
        assert!(HttpGrant::parse(bad).is_err(), "{bad}");
    }
    let message = parse("[http]\nallow = [\"https://ok.com\", \"gopher://x\"]\n")
        .expect_err("bad scheme")
        .to_string();
    assert!(message.contains("http.allow[1]"), "{message}");
}

#[test]
fn ipv6_addresses_are_granted_in_brackets() {
    let grant = |rule: &str| HttpGrant::parse(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
    let v6 = grant("http://[0:0::1]:8080");
    assert_eq!(v6.to_string(), "http://[::1]:8080");
    assert_eq!(v6.address(), Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    assert!(v6.allows("http", "[::1]", Some(8080)));
    assert!(v6.allows("http", "[0::1]", Some(8080)));
    assert!(!v6.allows("http", "[::2]", Some(8080)));
    assert!(!v6.allows("http", "::1", Some(8080)));
    assert!(grant("[2001:DB8::1]").allows("https", "[2001:db8::1]", None));
    assert_eq!(
        grant("http://127.0.0.1").address(),
        Some([127, 0, 0, 1].into())
    );
    for not_an_address in ["localhost", "*.0.0.1", "127.1", "2130706433"] {
        assert_eq!(grant(not_an_address).address(), None, "{not_an_address}");
    }
    for bad in [
        "http://[::1",
        "http://[x]:80",
        "http://[::1]80",
        "http://[::1]:0",
        "::1",
    ] {
        assert!(HttpGrant::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn allow_private_grants_its_rules_with_the_opt_in() {
    let policy = parse(
        "[http]\nallow = [\"https://api.example.com\", \"http://intranet:8080\"]\n\
         allow_private = [\"http://intranet:8080\", \"http://wiki.intranet\"]\n",
    )
    .expect("valid");
    let rules: Vec<(String, bool)> = policy
        .http
        .iter()
        .map(|grant| (grant.to_string(), grant.allows_private_addresses()))
        .collect();
    assert_eq!(
        rules,
        [
            ("https://api.example.com".to_owned(), false),
            ("http://intranet:8080".to_owned(), true),
            ("http://wiki.intranet".to_owned(), true),
        ]
    );
    let message = parse("[http]\nallow_private = [\"ftp://x\"]\n")
        .expect_err("bad rule")
        .to_string();
    assert!(message.contains("http.allow_private[0]"), "{message}");
    // A tool's list may narrow to an opted-in rule.
    assert!(
        parse(
            "[http]\nallow_private = [\"http://wiki.intranet\"]\n\
             [tools.t.http]\nallow = [\"http://wiki.intranet\"]\n"
        )
        .is_ok()
    );
}

#[test]
fn secrets_go_over_https_or_to_a_loopback_address_named_literally() {
    let secret = |allow: &str, rule: &str| {
        parse(&format!(
            "[http]\n{allow} = [\"{rule}\"]\n[[http.secrets]]\nhost = \"{rule}\"\n\
             header = \"Authorization\"\nvalue = \"x\"\n"
        ))
    };
    for rule in [
        "https://api.example.com",
        "https://10.0.0.1:8443",
        "http://127.0.0.1:8080",
        "127.0.0.2",
        "http://[::1]:8080",
        "http://[::ffff:127.0.0.1]",
    ] {
        assert!(secret("allow", rule).is_ok(), "{rule}");
    }
    for (allow, rule) in [
        ("allow", "http://api.example.com"),
        ("allow", "api.example.com"),
        ("allow", "http://localhost:8080"),
        ("allow", "http://10.0.0.1"),
        ("allow", "http://*.example.com"),
        ("allow_private", "http://localhost:8080"),
    ] {
        let message = secret(allow, rule).expect_err(rule).to_string();
        assert!(
            message.contains("http.secrets[0].host") && message.contains("https://"),
            "{rule}: {message}"
        );
    }
    // The message names the rule to write.
    let message = secret("allow", "api.example.com:8443")
        .expect_err("plain http")
        .to_string();
    assert!(
        message.contains("\"https://api.example.com:8443\""),
        "{message}"
    );
}

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    /// Policy-shaped text: known and unknown keys, values of every type and range.
    fn policy_text() -> impl Strategy<Value = String> {
        let value = prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            Just("0".to_owned()),
            Just("4097".to_owned()),
            "\"[a-z0-9:/.*@?-]{0,24}\"",
            Just("[\"PATH\"]".to_owned()),
            Just("{ A = \"b\" }".to_owned()),
            Just("true".to_owned()),
            Just("1.5".to_owned()),
        ];
        let line = (
            prop_oneof![
                Just("[limits]"),
                Just("[env]"),
                Just("[http]"),
                Just("[[dirs]]"),
                Just("")
            ],
            prop_oneof![
                Just("memory_mib"),
                Just("timeout_ms"),
                Just("max_input_bytes"),
                Just("max_output_bytes"),
                Just("max_consecutive_failures"),
                Just("fuel"),
                Just("schema_memory_mib"),
                Just("inherit"),
                Just("set"),
                Just("allow"),
                Just("allow_private"),
                Just("host"),
                Just("guest"),
                Just("mode"),
                Just("other"),
            ],
            value,
        )
            .prop_map(|(table, key, value)| format!("{table}\n{key} = {value}\n"));
        prop::collection::vec(line, 0..6).prop_map(|lines| lines.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// Any text: an error or a policy, never a panic.
        #[test]
        fn any_text_is_a_policy_or_an_error(text in "(?s).{0,200}") {
            let _ = SandboxPolicy::parse(&text, Path::new("/p/x.policy.toml"), &Limits::default());
        }

        /// Policy-shaped text: whatever is accepted is within the documented ranges, and
        /// every HTTP grant has a port from 1 to 65535.
        #[test]
        fn accepted_policies_are_within_range(text in policy_text()) {
            if let Ok(policy) = SandboxPolicy::parse(&text, Path::new("/p/x.policy.toml"), &Limits::default()) {
                prop_assert!(policy.limits.check().is_ok(), "{:?}", policy.limits);
                for grant in &policy.http {
                    prop_assert!(grant.port != Some(0), "{}", grant);
                }
            }
        }

        /// HTTP rules: parsed or refused, never a panic; an accepted rule allows its own
        /// host and never a host outside it.
        #[test]
        fn http_rules_allow_only_their_host(rule in "[a-z*.:/0-9@-]{0,30}", other in "[a-z]{1,8}") {
            if let Ok(grant) = HttpGrant::parse(&rule) {
                let host = grant.host.trim_start_matches("*.").to_owned();
                let outside = format!("{other}x.invalid");
                prop_assert!(!grant.allows("https", &outside, None) || host == outside);
            }
        }
    }
}

#[test]
fn policy_files_sit_beside_plugins() {
    assert_eq!(
        SandboxPolicy::path_for(Path::new("/p/weather.wasm")),
        Path::new("/p/weather.policy.toml")
    );
}

#[test]
fn the_client_table_is_deny_by_default_for_sampling_and_roots_and_checked() {
    let defaults = Limits::default();
    let path = std::path::Path::new("p.policy.toml");
    let policy = SandboxPolicy::parse("", path, &defaults).expect("empty policy");
    assert!(policy.client.elicitation);
    assert!(!policy.client.sampling);
    assert!(!policy.client.roots);
    let policy = SandboxPolicy::parse(
        "[client]\nsampling = true\nroots = true\nelicitation = false\nmax_questions = 3\n\
         max_question_bytes = 2048\nanswer_timeout_ms = 1500\n",
        path,
        &defaults,
    )
    .expect("valid [client]");
    assert!(policy.client.sampling && policy.client.roots && !policy.client.elicitation);
    assert_eq!(policy.client.max_questions, 3);
    assert_eq!(policy.client.max_question_bytes, 2048);
    assert_eq!(
        policy.client.answer_timeout,
        std::time::Duration::from_millis(1500)
    );
    for (bad, key) in [
        ("max_questions = 0", "client.max_questions"),
        ("max_question_bytes = 10", "client.max_question_bytes"),
        ("answer_timeout_ms = 0", "client.answer_timeout_ms"),
    ] {
        let error = SandboxPolicy::parse(&format!("[client]\n{bad}\n"), path, &defaults)
            .expect_err(bad)
            .to_string();
        assert!(error.contains(key), "{error}");
    }
    let unknown = SandboxPolicy::parse("[client]\nsampel = true\n", path, &defaults)
        .expect_err("unknown key")
        .to_string();
    assert!(unknown.contains("sampel"), "{unknown}");
}
