//! Tools per identity: the operator's access policy ([`ACCESS_FILE`]) says which plugins and
//! tools each identity of the HTTP service may list and call. What an identity may not call it
//! does not see: its sessions list, read and render nothing of it, and create no instance of a
//! plugin it has no tool of.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::McpError;
use crate::Identity;

/// The access policy's file name, in the plugin directory beside the lock file (which pins
/// it, as it pins the trust policy).
pub const ACCESS_FILE: &str = crate::lock::ACCESS_FILE;

use crate::lock::MAX_ACCESS_BYTES;

/// Which identities may use which tools: grants, each naming who and what. An identity may
/// use what any grant that matches it gives; one that no grant matches sees no tool.
///
/// ```toml
/// [[grant]]
/// who = ["token:ops", "group:admins"]   # a static token's name; a `groups`/`roles` claim
/// tools = ["*"]                         # every plugin's tools, resources and prompts
///
/// [[grant]]
/// who = ["*"]                           # every authenticated identity
/// issuer = "https://auth.example.com"   # ... of this issuer (for access tokens)
/// tools = ["time/*", "fetch/fetch"]     # all of `time`; the tool `fetch` of `fetch`
/// ```
///
/// `who` takes `*`, `token:NAME`, `sub:SUBJECT`, `scope:SCOPE` and `group:NAME` (a `groups`
/// or `roles` claim holding it); `tools` takes `*`, `PLUGIN/*` (its tools, resources, prompts
/// and completions) and `PLUGIN/TOOL` (that tool alone).
///
/// Quotas ([`Quota`]) bound each identity: `[quota]` for all, or a grant's own
/// (`quota = { calls_per_minute = 600 }`), the first matching grant's that has one:
///
/// ```toml
/// [quota]
/// sessions = 4
/// calls_per_minute = 120
/// concurrent_calls = 4
/// cpu_seconds_per_minute = 30
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessPolicy {
    grants: Vec<Grant>,
    /// Every identity's quota, unless a grant that matches it gives one.
    quota: Quota,
    /// The SHA-256 of the file's bytes, as the lock pins it.
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    who: Vec<Who>,
    issuer: Option<String>,
    what: Vec<What>,
    quota: Option<Quota>,
}

/// How much one identity may use of the server at once and per minute (`[quota]` of the
/// access policy, or a grant's `quota`); a limit not given is unlimited.
///
/// "Calls" are the requests that run plugin code: `tools/call`, `resources/read`, `prompts/get`
/// and `completion/complete`; a call that becomes a task runs until the task ends.
/// `cpu_seconds_per_minute` counts the CPU time their plugin code took in the last minute (the
/// thread CPU clock read around each run of it, a contract 1.0.0 instance's event loop
/// included; on Unix).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Quota {
    /// Most MCP sessions open at once.
    pub sessions: Option<u32>,
    /// Most calls started in any minute.
    pub calls_per_minute: Option<u32>,
    /// Most calls running at once.
    pub concurrent_calls: Option<u32>,
    /// Most CPU seconds of calls finished in any minute.
    pub cpu_seconds_per_minute: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Who {
    Anyone,
    Token(String),
    Subject(String),
    Scope(String),
    Group(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum What {
    Everything,
    Plugin(String),
    Tool(String, String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    #[serde(default)]
    grant: Vec<GrantFormat>,
    #[serde(default)]
    quota: Quota,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantFormat {
    who: Vec<String>,
    #[serde(default)]
    issuer: Option<String>,
    tools: Vec<String>,
    #[serde(default)]
    quota: Option<Quota>,
}

impl AccessPolicy {
    /// The policy in `text` (the TOML above); an error naming the grant and what to fix.
    pub fn parse(text: &str) -> Result<Self, String> {
        let format: FileFormat = toml::from_str(text).map_err(|e| e.to_string())?;
        let grants = format
            .grant
            .into_iter()
            .enumerate()
            .map(|(index, grant)| {
                let at = |reason: String| format!("grant {}: {reason}", index + 1);
                if grant.who.is_empty() || grant.tools.is_empty() {
                    return Err(at("give `who` and `tools`, neither empty".into()));
                }
                let who = grant
                    .who
                    .iter()
                    .map(|who| parse_who(who).map_err(&at))
                    .collect::<Result<_, _>>()?;
                let what = grant
                    .tools
                    .iter()
                    .map(|what| parse_what(what).map_err(&at))
                    .collect::<Result<_, _>>()?;
                Ok(Grant {
                    who,
                    issuer: grant.issuer,
                    what,
                    quota: grant.quota,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            grants,
            quota: format.quota,
            sha256: crate::digest::sha256_hex(text.as_bytes()),
        })
    }

    /// The access policy of the plugin directory `dir`, if it has one. Like the lock file, it
    /// must be a regular file that no one but its owner (this user, or root) may write.
    pub fn read(dir: &Path) -> Result<Option<Self>, McpError> {
        let path = dir.join(ACCESS_FILE);
        let error = |reason: String| McpError::AccessPolicy {
            path: path.clone(),
            reason,
        };
        let Some(file) = crate::lock::open_trusted(dir, &path).map_err(|e| error(e.to_string()))?
        else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.take(MAX_ACCESS_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| error(e.to_string()))?;
        if bytes.len() as u64 > MAX_ACCESS_BYTES {
            return Err(error(format!("it is over {MAX_ACCESS_BYTES} bytes")));
        }
        let text = String::from_utf8(bytes).map_err(|_| error("it is not UTF-8 text".into()))?;
        Self::parse(&text).map(Some).map_err(error)
    }

    /// The quota of `identity`: that of the first grant matching it that gives one, else the
    /// policy's `[quota]`.
    pub fn quota(&self, identity: Option<&Identity>) -> Quota {
        identity
            .and_then(|identity| {
                self.grants
                    .iter()
                    .filter(|grant| grant.matches(identity))
                    .find_map(|grant| grant.quota)
            })
            .unwrap_or(self.quota)
    }

    /// The grants (numbered from 1) that name identities by a claim (`sub:`, `scope:`,
    /// `group:`) without naming the issuer: with several issuers, any of them could issue
    /// such a claim, so such a grant must say whose it trusts.
    pub fn grants_without_issuer(&self) -> Vec<usize> {
        self.grants
            .iter()
            .enumerate()
            .filter(|(_, grant)| {
                grant.issuer.is_none()
                    && grant
                        .who
                        .iter()
                        .any(|who| matches!(who, Who::Subject(_) | Who::Scope(_) | Who::Group(_)))
            })
            .map(|(index, _)| index + 1)
            .collect()
    }

    /// The grants (numbered from 1) for anyone (`who = ["*"]`) without an issuer: with several
    /// issuers, every token of each of them gets what they grant, a weaker issuer's (one that
    /// registers any client) included.
    pub fn grants_to_anyone_of_any_issuer(&self) -> Vec<usize> {
        self.grants
            .iter()
            .enumerate()
            .filter(|(_, grant)| {
                grant.issuer.is_none() && grant.who.iter().any(|who| matches!(who, Who::Anyone))
            })
            .map(|(index, _)| index + 1)
            .collect()
    }

    /// What names `identity` with its grants under this policy, as far as what it is sent goes
    /// (its sessions, the notices and tasks of its stateless requests): two tokens of one
    /// subject with other scopes or groups are two callers, so that the narrower never hears of
    /// or reaches what only the wider may use.
    #[cfg_attr(not(feature = "mcp-http"), allow(dead_code))]
    pub(crate) fn caller_key(&self, identity: &Identity) -> [u8; 16] {
        use sha2::{Digest, Sha256};
        let allowed = self.allowed(Some(identity));
        let mut hash = Sha256::new();
        hash.update(identity.key());
        hash.update([u8::from(allowed.everything)]);
        let mut text = |text: &str| {
            hash.update(text.len().to_le_bytes());
            hash.update(text.as_bytes());
        };
        for plugin in &allowed.plugins {
            text(plugin);
        }
        text("\u{0}tools");
        for (plugin, tool) in &allowed.tools {
            text(plugin);
            text(tool);
        }
        let digest = hash.finalize();
        let mut key = [0u8; 16];
        key.copy_from_slice(&digest[..16]);
        key
    }

    /// What `identity` may use (`None`, an unauthenticated request: nothing).
    pub(crate) fn allowed(&self, identity: Option<&Identity>) -> Allowed {
        let mut allowed = Allowed::default();
        let Some(identity) = identity else {
            return allowed;
        };
        for grant in self.grants.iter().filter(|grant| grant.matches(identity)) {
            for what in &grant.what {
                match what {
                    What::Everything => allowed.everything = true,
                    What::Plugin(plugin) => {
                        allowed.plugins.insert(plugin.clone());
                    }
                    What::Tool(plugin, tool) => {
                        allowed.tools.insert((plugin.clone(), tool.clone()));
                    }
                }
            }
        }
        allowed
    }
}

impl Grant {
    fn matches(&self, identity: &Identity) -> bool {
        // An issuer named binds the grant to that issuer's tokens; static tokens have none.
        if self
            .issuer
            .as_ref()
            .is_some_and(|issuer| identity.issuer.as_ref() != Some(issuer))
        {
            return false;
        }
        self.who.iter().any(|who| match who {
            Who::Anyone => true,
            Who::Token(name) => identity.issuer.is_none() && identity.name == *name,
            // The token's own `sub`, never a name taken from another claim.
            Who::Subject(subject) => {
                identity.issuer.is_some()
                    && identity.claims.get("sub").and_then(Value::as_str) == Some(subject)
            }
            Who::Scope(scope) => identity.scopes.contains(scope),
            Who::Group(group) => {
                ["groups", "roles"]
                    .iter()
                    .any(|claim| match identity.claims.get(*claim) {
                        Some(Value::String(one)) => one == group,
                        Some(Value::Array(many)) => many.iter().any(|v| v.as_str() == Some(group)),
                        _ => false,
                    })
            }
        })
    }
}

fn parse_who(text: &str) -> Result<Who, String> {
    if text == "*" {
        return Ok(Who::Anyone);
    }
    let (kind, value) = text
        .split_once(':')
        .filter(|(_, value)| !value.is_empty())
        .ok_or_else(|| {
            format!(
                "{text:?} names no one: write `*`, `token:NAME`, `sub:SUBJECT`, `scope:SCOPE` or \
                 `group:NAME`"
            )
        })?;
    let value = value.to_owned();
    match kind {
        "token" => Ok(Who::Token(value)),
        "sub" => Ok(Who::Subject(value)),
        "scope" => Ok(Who::Scope(value)),
        "group" => Ok(Who::Group(value)),
        _ => Err(format!(
            "{text:?}: `{kind}:` is not known; write `token:`, `sub:`, `scope:` or `group:`"
        )),
    }
}

fn parse_what(text: &str) -> Result<What, String> {
    if text == "*" {
        return Ok(What::Everything);
    }
    match text.split_once('/') {
        Some((plugin, "*")) if !plugin.is_empty() => Ok(What::Plugin(plugin.to_owned())),
        Some((plugin, tool)) if !plugin.is_empty() && !tool.is_empty() && !tool.contains('*') => {
            Ok(What::Tool(plugin.to_owned(), tool.to_owned()))
        }
        _ => Err(format!("{text:?} is not `*`, `PLUGIN/*` or `PLUGIN/TOOL`")),
    }
}

/// What one identity may use.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Allowed {
    everything: bool,
    plugins: BTreeSet<String>,
    tools: BTreeSet<(String, String)>,
}

impl Allowed {
    /// Whether it may use anything of the plugin (group) `group`.
    pub(crate) fn any_of(&self, group: &str) -> bool {
        self.whole(group) || self.tools.iter().any(|(plugin, _)| plugin == group)
    }

    /// Whether it may use all of `group`: its resources, prompts and completions too.
    pub(crate) fn whole(&self, group: &str) -> bool {
        self.everything || self.plugins.contains(group)
    }

    /// Whether it may list and call the tool `tool` of `group`.
    pub(crate) fn tool(&self, group: &str, tool: &str) -> bool {
        self.whole(group)
            || self
                .tools
                .iter()
                .any(|(plugin, name)| plugin == group && name == tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str) -> Identity {
        Identity::token(name)
    }

    fn subject(issuer: &str, claims: Value) -> Identity {
        let Value::Object(claims) = claims else {
            panic!("claims are an object")
        };
        Identity::from_claims(issuer, claims, true).expect("an identity")
    }

    /// Two tokens of one subject with other scopes are two callers (their stateless
    /// requests' notices and tasks, their sessions are apart); with the same grants, one.
    #[test]
    fn a_callers_key_is_its_identity_with_its_grants() {
        let issuer = "https://auth.example";
        let policy = AccessPolicy::parse(&format!(
            "[[grant]]\nwho = [\"scope:notes\"]\nissuer = \"{issuer}\"\ntools = [\"notes/*\"]\n\
             [[grant]]\nwho = [\"*\"]\nissuer = \"{issuer}\"\ntools = [\"time/*\"]\n"
        ))
        .expect("a policy");
        let erin =
            |scope: &str| subject(issuer, serde_json::json!({"sub": "erin", "scope": scope}));
        let (wide, narrow) = (erin("notes other"), erin("other"));
        assert_eq!(wide.key(), narrow.key(), "one identity");
        assert_ne!(policy.caller_key(&wide), policy.caller_key(&narrow));
        assert_eq!(
            policy.caller_key(&narrow),
            policy.caller_key(&erin("other more"))
        );
        let frank = subject(
            issuer,
            serde_json::json!({"sub": "frank", "scope": "other"}),
        );
        assert_ne!(policy.caller_key(&frank), policy.caller_key(&narrow));
    }

    #[test]
    fn grants_give_what_they_name_to_whom_they_name() {
        let policy = AccessPolicy::parse(
            r#"
            [[grant]]
            who = ["token:ops", "group:admins"]
            tools = ["*"]

            [[grant]]
            who = ["*"]
            issuer = "https://auth.example"
            tools = ["time/*", "fetch/fetch"]

            [[grant]]
            who = ["scope:notes.write", "sub:carol"]
            tools = ["notes/*"]
            "#,
        )
        .expect("a policy");
        let ops = policy.allowed(Some(&token("ops")));
        assert!(ops.whole("anything") && ops.tool("filesystem", "write_file"));

        let admin = subject(
            "https://other.example",
            serde_json::json!({"sub": "dave", "roles": ["admins"]}),
        );
        assert!(policy.allowed(Some(&admin)).whole("filesystem"));

        let alice = subject("https://auth.example", serde_json::json!({"sub": "alice"}));
        let allowed = policy.allowed(Some(&alice));
        assert!(allowed.whole("time"));
        assert!(allowed.tool("fetch", "fetch") && !allowed.whole("fetch"));
        assert!(allowed.any_of("fetch") && !allowed.any_of("filesystem"));
        assert!(!allowed.tool("filesystem", "read_text_file"));

        // `*` of one issuer is not every issuer's, nor a static token's.
        let mallory = subject("https://other.example", serde_json::json!({"sub": "alice"}));
        assert_eq!(policy.allowed(Some(&mallory)), Allowed::default());
        assert_eq!(policy.allowed(Some(&token("alice"))), Allowed::default());
        // `sub:` is an access token's `sub`, never a static token's name, nor a `client_id`.
        let client = subject(
            "https://other.example",
            serde_json::json!({"client_id": "carol"}),
        );
        assert_eq!(client.name, "carol");
        assert!(!policy.allowed(Some(&client)).any_of("notes"));
        assert!(!policy.allowed(Some(&token("carol"))).any_of("notes"));
        let carol = subject("https://other.example", serde_json::json!({"sub": "carol"}));
        assert!(policy.allowed(Some(&carol)).whole("notes"));
        let writer = subject(
            "https://x.example",
            serde_json::json!({"sub": "e", "scope": "notes.write"}),
        );
        assert!(policy.allowed(Some(&writer)).whole("notes"));
        // Unauthenticated: nothing.
        assert_eq!(policy.allowed(None), Allowed::default());
    }

    #[test]
    fn grants_by_claim_without_an_issuer_are_found() {
        let policy = AccessPolicy::parse(
            r#"
            [[grant]]
            who = ["token:ops", "*"]
            tools = ["*"]

            [[grant]]
            who = ["group:admins"]
            tools = ["*"]

            [[grant]]
            who = ["sub:alice"]
            issuer = "https://auth.example"
            tools = ["*"]
            "#,
        )
        .expect("a policy");
        assert_eq!(policy.grants_without_issuer(), [2]);
    }

    #[test]
    fn a_policy_that_says_something_else_is_refused() {
        for (text, expected) in [
            ("[[grant]]\nwho = []\ntools = [\"*\"]", "neither empty"),
            (
                "[[grant]]\nwho = [\"alice\"]\ntools = [\"*\"]",
                "names no one",
            ),
            (
                "[[grant]]\nwho = [\"user:alice\"]\ntools = [\"*\"]",
                "not known",
            ),
            (
                "[[grant]]\nwho = [\"*\"]\ntools = [\"fetch\"]",
                "PLUGIN/TOOL",
            ),
            (
                "[[grant]]\nwho = [\"*\"]\ntools = [\"fetch/f*\"]",
                "PLUGIN/TOOL",
            ),
            (
                "[[grant]]\nwho = [\"*\"]\ntools = [\"*\"]\nwhom = 1",
                "unknown field",
            ),
        ] {
            let error = AccessPolicy::parse(text).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
