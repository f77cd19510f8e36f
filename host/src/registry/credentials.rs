//! Registry credentials, found as other registry clients find them: the environment
//! (`LLM_WORKER_REGISTRY_USERNAME` and `LLM_WORKER_REGISTRY_PASSWORD`, for the one registry
//! `LLM_WORKER_REGISTRY` names), then Docker's config file (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`): its `auths` entries and its credential helpers (`credHelpers`,
//! `credsStore`, run as `docker-credential-NAME get`).

use std::fmt;
use std::path::PathBuf;

use crate::registry_name::canonical_registry;

/// The environment variables that give credentials for the registry being pulled or pushed.
pub const USERNAME_VARIABLE: &str = "LLM_WORKER_REGISTRY_USERNAME";
/// See [`USERNAME_VARIABLE`].
pub const PASSWORD_VARIABLE: &str = "LLM_WORKER_REGISTRY_PASSWORD";
/// The registry (`host[:port]`) the credentials of [`USERNAME_VARIABLE`] and
/// [`PASSWORD_VARIABLE`] are for: they go to that registry only, never to another one a
/// command, a lock or a trust policy names.
pub const REGISTRY_VARIABLE: &str = "LLM_WORKER_REGISTRY";

/// Largest Docker config file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A user name and password (or token) for one registry; `Debug` does not show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub username: String,
    password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"[redacted]")
            .finish()
    }
}

impl Credentials {
    /// Credentials from a user name and a password or token.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }

    /// The password or token.
    pub(crate) fn password(&self) -> &str {
        &self.password
    }

    /// The credentials for `registry` (`host[:port]` as a reference names it): from the
    /// environment, else from Docker's config file; `None` when neither has any (anonymous
    /// access). A config file that is there but unreadable is an error.
    pub fn find(registry: &str) -> Result<Option<Self>, String> {
        if let Some(found) = from_environment(registry, |name| {
            std::env::var(name).ok().filter(|v| !v.is_empty())
        })? {
            return Ok(Some(found));
        }
        let Some(path) = docker_config_path() else {
            return Ok(None);
        };
        let bytes = match crate::file::read_regular_file(&path, MAX_CONFIG_BYTES) {
            Ok(bytes) => bytes,
            Err(crate::file::ReadError::Io(error))
                if error.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(None);
            }
            Err(_) => {
                return Err(format!(
                    "cannot read Docker's config file {} (not a regular file of at most 1 MiB)",
                    path.display()
                ));
            }
        };
        let config: serde_json::Value = serde_json::from_slice(&bytes).map_err(|error| {
            format!(
                "Docker's config file {} is not valid JSON: {error}",
                path.display()
            )
        })?;
        from_docker_config(&config, registry)
            .map_err(|error| format!("Docker's config file {}: {error}", path.display()))
    }
}

/// The credentials the environment (read through `var`) gives for `registry`: only when
/// [`REGISTRY_VARIABLE`] names it. Credentials without it are an error (fail closed: they
/// would otherwise go to whatever registry a reference names).
fn from_environment(
    registry: &str,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<Credentials>, String> {
    let (username, password) = match (var(USERNAME_VARIABLE), var(PASSWORD_VARIABLE)) {
        (Some(username), Some(password)) => (username, password),
        (None, None) => return Ok(None),
        _ => {
            return Err(format!(
                "set both {USERNAME_VARIABLE} and {PASSWORD_VARIABLE}, or neither"
            ));
        }
    };
    let Some(for_registry) = var(REGISTRY_VARIABLE) else {
        return Err(format!(
            "{USERNAME_VARIABLE} and {PASSWORD_VARIABLE} are set, but not {REGISTRY_VARIABLE}: \
             set it to the registry (host[:port]) they are for, so that they are never sent to \
             another one"
        ));
    };
    let for_registry = for_registry.trim();
    if let Err(why) = canonical_registry(for_registry) {
        return Err(format!(
            "{REGISTRY_VARIABLE} is not the registry the credentials are for: {why}; set it to \
             host[:port]"
        ));
    }
    if same_registry(for_registry, registry) {
        Ok(Some(Credentials::new(username, password)))
    } else {
        // Another registry's credentials: not this one's business.
        Ok(None)
    }
}

/// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
fn docker_config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty())?;
    Some(PathBuf::from(home).join(".docker").join("config.json"))
}

/// Whether `key` (a Docker config key: `host[:port]`, perhaps with a scheme and a path, as
/// `https://index.docker.io/v1/`) names `registry`, both in their canonical spelling: the
/// registry a reference names is its canonical name already, and a key written
/// `LOCALHOST:05000` is for `localhost:5000`. A key that names no registry is no one's.
fn same_registry(key: &str, registry: &str) -> bool {
    let host = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = host.split('/').next().unwrap_or_default();
    match (canonical_registry(host), canonical_registry(registry)) {
        (Ok(key), Ok(registry)) => key == registry,
        _ => false,
    }
}

/// The credentials a parsed Docker config holds for `registry`.
fn from_docker_config(
    config: &serde_json::Value,
    registry: &str,
) -> Result<Option<Credentials>, String> {
    let helper = config
        .get("credHelpers")
        .and_then(serde_json::Value::as_object)
        .and_then(|helpers| {
            helpers
                .iter()
                .find(|(key, _)| same_registry(key, registry))
                .and_then(|(_, helper)| helper.as_str())
        })
        .or_else(|| config.get("credsStore").and_then(serde_json::Value::as_str));
    if let Some(helper) = helper
        && let Some(found) = from_helper(helper, registry)?
    {
        return Ok(Some(found));
    }
    let Some(auths) = config.get("auths").and_then(serde_json::Value::as_object) else {
        return Ok(None);
    };
    let Some(entry) = auths
        .iter()
        .find(|(key, _)| same_registry(key, registry))
        .map(|(_, entry)| entry)
    else {
        return Ok(None);
    };
    let text = |field: &str| {
        entry
            .get(field)
            .and_then(serde_json::Value::as_str)
            .filter(|v| !v.is_empty())
    };
    if let Some(auth) = text("auth") {
        let decoded = <base64ct::Base64 as base64ct::Encoding>::decode_vec(auth)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| format!("the `auth` of {registry} is not base64 of USER:PASSWORD"))?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| format!("the `auth` of {registry} is not base64 of USER:PASSWORD"))?;
        return Ok(Some(Credentials::new(username, password)));
    }
    match (text("username"), text("password")) {
        (Some(username), Some(password)) => Ok(Some(Credentials::new(username, password))),
        _ => Ok(None),
    }
}

/// Asks `docker-credential-HELPER get` for `registry`'s credentials (`None`: it has none).
fn from_helper(helper: &str, registry: &str) -> Result<Option<Credentials>, String> {
    use std::io::Write;
    if helper.is_empty()
        || !helper
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!("'{helper}' is not a credential helper's name"));
    }
    let program = format!("docker-credential-{helper}");
    let mut child = match std::process::Command::new(&program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            tracing::debug!("credential helper {program} is not installed");
            return Ok(None);
        }
        Err(error) => return Err(format!("cannot run {program}: {error}")),
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(registry.as_bytes());
    }
    let output = child
        .wait_with_output()
        .map_err(|error| format!("cannot run {program}: {error}"))?;
    if !output.status.success() {
        // "credentials not found in native keychain": nothing stored for this registry.
        return Ok(None);
    }
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|_| format!("{program} answered something other than JSON"))?;
    let field = |name: &str| answer.get(name).and_then(serde_json::Value::as_str);
    match (field("Username"), field("Secret")) {
        (Some(username), Some(secret)) if !secret.is_empty() => {
            Ok(Some(Credentials::new(username, secret)))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_entries_are_found_by_registry() {
        let config = serde_json::json!({
            "auths": {
                "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="},
                "127.0.0.1:5000": {"username": "u", "password": "p"},
                "bad.example": {"auth": "bm9jb2xvbg=="}
            }
        });
        assert_eq!(
            from_docker_config(&config, "docker.io").expect("ok"),
            Some(Credentials::new("hub", "secret"))
        );
        assert_eq!(
            from_docker_config(&config, "127.0.0.1:5000").expect("ok"),
            Some(Credentials::new("u", "p"))
        );
        assert_eq!(from_docker_config(&config, "ghcr.io").expect("ok"), None);
        // Keys are compared in their canonical spelling, as references name registries.
        let odd = serde_json::json!({
            "auths": {
                "LOCALHOST:05000": {"username": "local", "password": "p"},
                "https://GHCR.io:443/v2/": {"username": "gh", "password": "p"},
                "127.1:7000": {"username": "ip", "password": "p"}
            }
        });
        let user = |registry: &str| {
            from_docker_config(&odd, registry)
                .expect("ok")
                .map(|found| found.username)
        };
        assert_eq!(user("localhost:5000").as_deref(), Some("local"));
        assert_eq!(user("ghcr.io").as_deref(), Some("gh"));
        assert_eq!(user("127.0.0.1:7000").as_deref(), Some("ip"));
        assert_eq!(user("localhost:5001"), None);
        assert_eq!(user("127.0.0.1:5000"), None);
        assert!(from_docker_config(&config, "bad.example").is_err());
        let shown = format!("{:?}", Credentials::new("u", "hunter2"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}

#[cfg(test)]
mod environment_tests {
    use super::*;

    fn env(pairs: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        let pairs = pairs.to_vec();
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn environment_credentials_go_only_to_the_registry_they_are_for() {
        let set = [
            (USERNAME_VARIABLE, "ci"),
            (PASSWORD_VARIABLE, "secret"),
            (REGISTRY_VARIABLE, "registry.example.com"),
        ];
        assert_eq!(
            from_environment("registry.example.com", env(&set)),
            Ok(Some(Credentials::new("ci", "secret")))
        );
        // A reference naming another registry does not get them.
        assert_eq!(from_environment("evil.example.net", env(&set)), Ok(None));
        // The variable names its registry in any spelling of it.
        let odd = [
            (USERNAME_VARIABLE, "ci"),
            (PASSWORD_VARIABLE, "secret"),
            (REGISTRY_VARIABLE, "LOCALHOST:05000"),
        ];
        assert_eq!(
            from_environment("localhost:5000", env(&odd)),
            Ok(Some(Credentials::new("ci", "secret")))
        );
        assert_eq!(from_environment("localhost:5001", env(&odd)), Ok(None));
        // A value that is no registry's is an error, not silence.
        let bad = from_environment(
            "r.example",
            env(&[
                (USERNAME_VARIABLE, "ci"),
                (PASSWORD_VARIABLE, "secret"),
                (REGISTRY_VARIABLE, "user@r.example"),
            ]),
        )
        .expect_err("not a registry");
        assert!(bad.contains(REGISTRY_VARIABLE), "{bad}");
        // Without saying which registry they are for, they go nowhere: an error.
        let unscoped = from_environment(
            "registry.example.com",
            env(&[(USERNAME_VARIABLE, "ci"), (PASSWORD_VARIABLE, "secret")]),
        )
        .expect_err("unscoped credentials");
        assert!(unscoped.contains(REGISTRY_VARIABLE), "{unscoped}");
        let half = from_environment("r", env(&[(USERNAME_VARIABLE, "ci")])).expect_err("half");
        assert!(half.contains("or neither"), "{half}");
        assert_eq!(from_environment("r", env(&[])), Ok(None));
    }
}
