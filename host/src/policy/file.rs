//! The policy file (`NAME.policy.toml` beside `NAME.wasm`): its TOML format, read within a
//! size cap, and checked key by key into a [`SandboxPolicy`], each error naming the key and
//! what to give instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::http::expand;
use super::*;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    limits: LimitsFile,
    #[serde(default)]
    env: EnvFile,
    #[serde(default)]
    dirs: Vec<DirFile>,
    #[serde(default)]
    http: HttpFile,
    #[serde(default)]
    tools: BTreeMap<String, ToolFile>,
    /// What requests other than tool calls may reach: `[resources.http]`, `[prompts.http]`,
    /// `[completion.http]`.
    #[serde(default)]
    resources: ToolFile,
    #[serde(default)]
    prompts: ToolFile,
    #[serde(default)]
    completion: ToolFile,
    #[serde(default)]
    client: ClientFile,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ClientFile {
    elicitation: Option<bool>,
    sampling: Option<bool>,
    roots: Option<bool>,
    max_questions: Option<u64>,
    max_question_bytes: Option<u64>,
    answer_timeout_ms: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    #[serde(default)]
    allow: Vec<String>,
    /// Rules granted like `allow`'s, whose names may resolve to non-public addresses.
    #[serde(default)]
    allow_private: Vec<String>,
    #[serde(default)]
    secrets: Vec<SecretFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretFile {
    host: String,
    header: String,
    value: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ToolFile {
    #[serde(default)]
    http: ToolHttpFile,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ToolHttpFile {
    #[serde(default)]
    allow: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    memory_mib: Option<u64>,
    timeout_ms: Option<u64>,
    max_input_bytes: Option<usize>,
    max_output_bytes: Option<usize>,
    max_consecutive_failures: Option<u32>,
    max_concurrent_calls: Option<u32>,
    task_timeout_ms: Option<u64>,
    fuel: Option<u64>,
    schema_memory_mib: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct EnvFile {
    #[serde(default)]
    inherit: Vec<String>,
    #[serde(default)]
    set: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DirFile {
    host: PathBuf,
    guest: String,
    #[serde(default)]
    mode: DirMode,
}

#[derive(Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum DirMode {
    #[default]
    Ro,
    Rw,
}

impl SandboxPolicy {
    /// The policy with these limits and no grants.
    pub fn with_limits(limits: Limits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// The policy file of a plugin: `weather.wasm` → `weather.policy.toml`, beside it.
    pub fn path_for(plugin: &Path) -> PathBuf {
        let stem = plugin.file_stem().unwrap_or_default().to_string_lossy();
        plugin.with_file_name(format!("{stem}.policy.toml"))
    }

    /// Reads a policy file; limits it does not set come from `defaults`.
    pub fn from_file(path: &Path, defaults: &Limits) -> Result<Self, PolicyError> {
        let text = Self::read_text(path)?;
        Self::parse(&text, path, defaults)
    }

    /// The text of a policy file: a regular file, within the size limit, UTF-8.
    pub(crate) fn read_text(path: &Path) -> Result<String, PolicyError> {
        Self::read_text_within(path, None)
    }

    /// [`Self::read_text`], and with `within` (a real path), only if the file opened, links
    /// followed, is inside that directory.
    pub(crate) fn read_text_within(
        path: &Path,
        within: Option<&Path>,
    ) -> Result<String, PolicyError> {
        let io = |source| PolicyError::Io {
            path: path.to_owned(),
            source,
        };
        let bytes = crate::file::read_regular_file_within(path, MAX_POLICY_BYTES, within).map_err(|error| {
            io(match error {
                crate::file::ReadError::Io(error) => error,
                crate::file::ReadError::NotAFile => std::io::Error::other(
                    "it is not a regular file (a FIFO, device, socket or directory)",
                ),
                crate::file::ReadError::TooLarge(size) => std::io::Error::other(format!(
                    "it is {size} bytes, over the limit of {MAX_POLICY_BYTES} bytes for a policy"
                )),
                crate::file::ReadError::Outside(real) => std::io::Error::other(format!(
                    "it is a link to {}, outside the plugin directory; copy the policy into the \
                     directory instead",
                    real.display()
                )),
            })
        })?;
        String::from_utf8(bytes).map_err(|_| io(std::io::Error::other("it is not UTF-8 text")))
    }

    /// Parses a policy; `path` names it in messages, and relative directories are resolved
    /// against its directory.
    pub fn parse(text: &str, path: &Path, defaults: &Limits) -> Result<Self, PolicyError> {
        let file: PolicyFile = toml::from_str(text).map_err(|e| PolicyError::Parse {
            path: path.to_owned(),
            message: parse_error(text, &e),
        })?;
        let invalid = |key: &str, message: String| PolicyError::Invalid {
            path: path.to_owned(),
            key: key.to_owned(),
            message,
        };

        let mut limits = defaults.clone();
        let l = &file.limits;
        if let Some(mib) = l.memory_mib {
            if !Limits::MEMORY_MIB.contains(&mib) {
                return Err(invalid(
                    "limits.memory_mib",
                    format!("is {mib}; {}", give(&Limits::MEMORY_MIB)),
                ));
            }
            limits.memory_bytes = usize::try_from(mib << 20).unwrap_or(usize::MAX);
        }
        if let Some(ms) = l.timeout_ms {
            if !Limits::TIMEOUT_MS.contains(&ms) {
                return Err(invalid(
                    "limits.timeout_ms",
                    format!("is {ms}; {} (one day)", give(&Limits::TIMEOUT_MS)),
                ));
            }
            limits.call_timeout = Duration::from_millis(ms);
        }
        if let Some(bytes) = l.max_input_bytes {
            limits.max_input_bytes = bytes;
        }
        if let Some(bytes) = l.max_output_bytes {
            if !Limits::MAX_OUTPUT_BYTES.contains(&bytes) {
                return Err(invalid(
                    "limits.max_output_bytes",
                    format!(
                        "is {bytes}; give 1 to {} (16 MiB)",
                        Limits::MAX_OUTPUT_BYTES.end()
                    ),
                ));
            }
            limits.max_output_bytes = bytes;
        }
        if let Some(failures) = l.max_consecutive_failures {
            if failures == 0 {
                return Err(invalid(
                    "limits.max_consecutive_failures",
                    "is 0; give at least 1".into(),
                ));
            }
            limits.max_consecutive_failures = failures;
        }
        if let Some(calls) = l.max_concurrent_calls {
            if !Limits::CONCURRENT_CALLS.contains(&calls) {
                return Err(invalid(
                    "limits.max_concurrent_calls",
                    format!("is {calls}; give 1 to {}", Limits::CONCURRENT_CALLS.end()),
                ));
            }
            limits.max_concurrent_calls = calls;
        }
        if let Some(ms) = l.task_timeout_ms {
            if !Limits::TIMEOUT_MS.contains(&ms) {
                return Err(invalid(
                    "limits.task_timeout_ms",
                    format!(
                        "is {ms}; give {} to {} (one day)",
                        Limits::TIMEOUT_MS.start(),
                        Limits::TIMEOUT_MS.end()
                    ),
                ));
            }
            limits.task_timeout = Some(Duration::from_millis(ms));
        }
        if let Some(fuel) = l.fuel {
            if !Limits::FUEL.contains(&fuel) {
                return Err(invalid("limits.fuel", "is 0; give at least 1".into()));
            }
            limits.fuel = Some(fuel);
        }
        if let Some(mib) = l.schema_memory_mib {
            if !Limits::SCHEMA_MEMORY_MIB.contains(&mib) {
                return Err(invalid(
                    "limits.schema_memory_mib",
                    format!("is {mib}; {}", give(&Limits::SCHEMA_MEMORY_MIB)),
                ));
            }
            limits.schema_memory_bytes = usize::try_from(mib << 20).unwrap_or(usize::MAX);
        }

        let mut env = Vec::new();
        for (index, name) in file.env.inherit.iter().enumerate() {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(invalid(
                    &format!("env.inherit[{index}]"),
                    format!(
                        "is {name:?}, not a valid environment variable name (it is empty or has \
                         '=' or NUL in it)"
                    ),
                ));
            }
            let value = std::env::var(name).map_err(|_| {
                invalid(
                    &format!("env.inherit[{index}]"),
                    format!("names {name}, which is not set in the host's environment; set it or remove the grant"),
                )
            })?;
            env.push((name.clone(), value));
        }
        for name in file.env.set.keys() {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(invalid(
                    &format!("env.set.{name}"),
                    "is not a valid environment variable name (it is empty or has '=' or NUL \
                     in it)"
                        .into(),
                ));
            }
        }
        env.extend(file.env.set);

        let base = path.parent().unwrap_or_else(|| Path::new("."));
        let mut dirs = Vec::new();
        // Each grant's path as written (absolute, `..` taken lexically), beside where it leads.
        let mut written = Vec::new();
        let mut written_dirs = Vec::new();
        for (index, dir) in file.dirs.into_iter().enumerate() {
            let host = base.join(&dir.host);
            written.push(lexical(&host));
            written_dirs.push(std::path::absolute(&host).unwrap_or_else(|_| host.clone()));
            let host = host.canonicalize().map_err(|e| {
                invalid(
                    &format!("dirs[{index}].host"),
                    format!("is {}, which cannot be opened: {e}", host.display()),
                )
            })?;
            if !host.is_dir() {
                return Err(invalid(
                    &format!("dirs[{index}].host"),
                    format!("is {}, which is not a directory", host.display()),
                ));
            }
            if dirs
                .iter()
                .any(|granted: &DirGrant| granted.guest == dir.guest)
            {
                return Err(invalid(
                    &format!("dirs[{index}].guest"),
                    format!(
                        "is {:?}, which an earlier grant uses already; give each directory its \
                         own guest path",
                        dir.guest
                    ),
                ));
            }
            if !dir.guest.starts_with('/') {
                return Err(invalid(
                    &format!("dirs[{index}].guest"),
                    format!(
                        "is {:?}; give an absolute path such as \"/data\"",
                        dir.guest
                    ),
                ));
            }
            dirs.push(DirGrant {
                host,
                guest: dir.guest,
                writable: dir.mode == DirMode::Rw,
            });
        }
        // A grant inside a writable one could be replaced by the plugin with a link to any
        // directory, which the next load would grant in its place.
        for (index, grant) in dirs.iter().enumerate() {
            let outer = dirs.iter().enumerate().find(|&(other, outer)| {
                other != index
                    && outer.writable
                    && ((grant.host != outer.host && grant.host.starts_with(&outer.host))
                        || (written[index] != written[other]
                            && written[index].starts_with(&written[other])))
            });
            if let Some((other, outer)) = outer {
                return Err(invalid(
                    &format!("dirs[{index}].host"),
                    format!(
                        "is {}, which lies inside dirs[{other}] ({}), a writable grant: the \
                         plugin could put a link to any directory in its place, which the next \
                         load would grant; grant one of them, or make the outer one read-only",
                        grant.host.display(),
                        outer.host.display()
                    ),
                ));
            }
            // Reached through a link (or a directory) inside a writable grant, though written
            // and resolved outside it: `ref` -> `work/current` -> elsewhere, `work` writable.
            let looked = crate::file::looked_up_in(&written_dirs[index]);
            let through = dirs.iter().enumerate().find(|&(other, outer)| {
                other != index
                    && outer.writable
                    && looked
                        .as_ref()
                        .is_none_or(|looked| looked.iter().any(|dir| dir.starts_with(&outer.host)))
            });
            if let Some((other, outer)) = through {
                return Err(invalid(
                    &format!("dirs[{index}].host"),
                    format!(
                        "is {}, which is reached through dirs[{other}] ({}), a writable grant: \
                         the plugin could change a link there, which the next load would \
                         follow; grant where it leads directly, or make the other read-only",
                        written_dirs[index].display(),
                        outer.host.display()
                    ),
                ));
            }
        }
        let grants = |key: &str, rules: &[String]| -> Result<Vec<HttpGrant>, PolicyError> {
            rules
                .iter()
                .enumerate()
                .map(|(index, rule)| {
                    HttpGrant::parse(rule).map_err(|message| {
                        let rule = without_userinfo(rule);
                        invalid(&format!("{key}[{index}]"), format!("({rule:?}) {message}"))
                    })
                })
                .collect()
        };
        let mut http = grants("http.allow", &file.http.allow)?;
        for grant in grants("http.allow_private", &file.http.allow_private)? {
            let grant = grant.with_private_addresses();
            match http.iter_mut().find(|rule| rule.same_destination(&grant)) {
                Some(rule) => *rule = grant,
                None => http.push(grant),
            }
        }
        let mut http_secrets = Vec::new();
        for (index, secret) in file.http.secrets.iter().enumerate() {
            let key = |field: &str| format!("http.secrets[{index}].{field}");
            let grant = HttpGrant::parse(&secret.host)
                .ok()
                .filter(|grant| http.iter().any(|rule| rule.same_destination(grant)))
                .ok_or_else(|| {
                    invalid(
                        &key("host"),
                        format!(
                            "is {:?}, which is not one of the rules of [http] allow; a secret \
                             goes only to a granted destination",
                            without_userinfo(&secret.host)
                        ),
                    )
                })?;
            if !may_carry_secrets(grant.scheme.as_deref(), &grant.host) {
                let https = HttpGrant {
                    scheme: Some("https".into()),
                    ..grant.clone()
                };
                return Err(invalid(
                    &key("host"),
                    format!(
                        "is {:?}, a rule that allows plain http, which would send the secret \
                         unencrypted: a secret goes only over https, or over http to a loopback \
                         address the rule names literally (such as http://127.0.0.1:8080); \
                         grant and name \"{https}\" instead",
                        without_userinfo(&secret.host)
                    ),
                ));
            }
            let header_ok = !secret.header.is_empty()
                && secret
                    .header
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !header_ok {
                // Only up to where it stops being a name: `Authorization: Bearer sk-…` pasted
                // whole holds the secret after it.
                let name_ends = secret
                    .header
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)))
                    .unwrap_or(secret.header.len());
                let shown = &secret.header[..name_ends];
                let rest = if name_ends < secret.header.len() {
                    " and more, not shown: it may hold the secret"
                } else {
                    ""
                };
                return Err(invalid(
                    &key("header"),
                    format!(
                        "is not an HTTP header name (it starts {shown:?}{rest}); give the name \
                         alone, and the secret in `value`"
                    ),
                ));
            }
            let value = expand(&secret.value).map_err(|message| invalid(&key("value"), message))?;
            // Never quote the value: it is the secret.
            if !crate::policy::is_header_value(&value) {
                return Err(invalid(
                    &key("value"),
                    "holds, once expanded, a character no HTTP header value may (only visible \
                     ASCII, spaces and tabs): a line break, another control character or a \
                     letter beyond ASCII"
                        .into(),
                ));
            }
            let mut made_of = HttpSecret::new(grant, secret.header.clone(), value);
            // A variable the secret is made of, handed to the plugin too, is the secret in the
            // plugin's hands.
            let mut rest = secret.value.as_str();
            while let Some(start) = rest.find("${") {
                let after = &rest[start + 2..];
                let Some(end) = after.find('}') else {
                    break;
                };
                let name = &after[..end];
                if !made_of.variables.iter().any(|known| known == name) {
                    made_of.variables.push(name.to_owned());
                }
                let value = std::env::var(name).unwrap_or_default();
                let inherited = &env[..file.env.inherit.len()];
                if let Some(inherited) = handing_over(inherited, name, &value) {
                    return Err(invalid(
                        &format!("env.inherit[{inherited}]"),
                        format!(
                            "hands the plugin {}, whose value is or holds (or is part of) \
                             that of {name}, which {} is made of: the plugin would read (part \
                             of) the secret the host keeps from it; leave it out of [env] \
                             inherit",
                            env[inherited].0,
                            key("value")
                        ),
                    ));
                }
                rest = &after[end + 1..];
            }
            http_secrets.push(made_of);
        }
        // A narrower list than the plugin's: each rule within one of `[http] allow`.
        let narrowed = |key: &str, rules: &[String], whose: &str| {
            let narrowed = grants(key, rules)?;
            for (index, grant) in narrowed.iter().enumerate() {
                if !http.iter().any(|wider| grant.within(wider)) {
                    return Err(invalid(
                        &format!("{key}[{index}]"),
                        format!(
                            "({grant}) is wider than the plugin's [http] allow; {whose} list \
                             may only narrow the plugin's"
                        ),
                    ));
                }
            }
            Ok(narrowed)
        };
        let mut tool_http = BTreeMap::new();
        for (tool, rules) in &file.tools {
            let key = format!("tools.{tool}.http.allow");
            tool_http.insert(tool.clone(), narrowed(&key, &rules.http.allow, "a tool's")?);
        }
        let request_http = RequestHttp {
            resources: narrowed("resources.http.allow", &file.resources.http.allow, "this")?,
            prompts: narrowed("prompts.http.allow", &file.prompts.http.allow, "this")?,
            completion: narrowed("completion.http.allow", &file.completion.http.allow, "this")?,
        };
        let client = file.client.checked(&invalid)?;
        Ok(Self {
            limits,
            env,
            dirs,
            http,
            http_secrets,
            tool_http,
            request_http,
            client,
            written_dirs,
        })
    }
}

impl ClientFile {
    /// The `[client]` table, each number within its range.
    fn checked(
        &self,
        invalid: &impl Fn(&str, String) -> PolicyError,
    ) -> Result<ClientPolicy, PolicyError> {
        let mut client = ClientPolicy::default();
        let ranged =
            |key: &str, value: Option<u64>, range: &std::ops::RangeInclusive<u64>| match value {
                Some(value) if !range.contains(&value) => Err(invalid(
                    &format!("client.{key}"),
                    format!("is {value}; {}", give(range)),
                )),
                _ => Ok(value),
            };
        client.elicitation = self.elicitation.unwrap_or(client.elicitation);
        client.sampling = self.sampling.unwrap_or(client.sampling);
        client.roots = self.roots.unwrap_or(client.roots);
        if let Some(questions) = ranged(
            "max_questions",
            self.max_questions,
            &ClientPolicy::MAX_QUESTIONS,
        )? {
            client.max_questions = u32::try_from(questions).unwrap_or(u32::MAX);
        }
        if let Some(bytes) = ranged(
            "max_question_bytes",
            self.max_question_bytes,
            &ClientPolicy::MAX_QUESTION_BYTES,
        )? {
            client.max_question_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        if let Some(ms) = ranged(
            "answer_timeout_ms",
            self.answer_timeout_ms,
            &ClientPolicy::ANSWER_TIMEOUT_MS,
        )? {
            client.answer_timeout = Duration::from_millis(ms);
        }
        Ok(client)
    }
}

/// Where a policy file fails to parse, and why, without quoting the file: the parser's own
/// message shows the line (and a value it did not expect), which may be a secret of
/// `[[http.secrets]]` or `[env]` written with a typo beside it. Quoted values in the reason
/// are left out too.
fn parse_error(text: &str, error: &toml::de::Error) -> String {
    let mut reason = String::new();
    // The closing mark of a value being left out.
    let mut leaving_out: Option<char> = None;
    for c in error.message().trim_end().chars() {
        match (leaving_out, c) {
            (Some(close), c) if c == close => {
                reason.push('…');
                reason.push(c);
                leaving_out = None;
            }
            (Some(_), _) => {}
            (None, '"') => {
                reason.push('"');
                leaving_out = Some('"');
            }
            // serde names a value it did not expect in backticks after its type (``integer
            // `123` ``), and a key in backticks too (``unknown field `x` ``): only the former
            // is left out.
            (None, '`')
                if [
                    "integer ",
                    "point ",
                    "string ",
                    "boolean ",
                    "character ",
                    "value ",
                ]
                .iter()
                .any(|kind| reason.ends_with(kind)) =>
            {
                reason.push('`');
                leaving_out = Some('`');
            }
            (None, c) => reason.push(c),
        }
    }
    match error.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            // The key of that line, which is no secret (its value may be).
            let key = text
                .lines()
                .nth(line - 1)
                .and_then(|l| l.split_once('='))
                .map(|(key, _)| key.trim())
                // A policy's keys are lower case; a line of a secret (base64 ends in `=`) is
                // not quoted.
                .filter(|key| {
                    !key.is_empty()
                        && key.len() <= 64
                        && key.bytes().all(|b| {
                            b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-. []".contains(&b)
                        })
                })
                .map(|key| format!(" (`{key} = …`)"))
                .unwrap_or_default();
            format!("at line {line}, column {column}{key}: {reason}")
        }
        None => reason,
    }
}

/// `path` made absolute and its `.` and `..` taken away without looking at the file system:
/// the path as written, whatever links on it lead to.
fn lexical(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut clean = PathBuf::new();
    for part in absolute.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                clean.pop();
            }
            other => clean.push(other),
        }
    }
    clean
}

/// Which of `inherited` (the variables handed to the plugin, with their values) holds the
/// host's variable `name` of value `value`, or part of it: the same name, a value holding it
/// (of 8 bytes or more: CI systems set one token under several names), or a value it holds
/// (of 16 bytes or more: `AUTH="Bearer $TOKEN"` holds `TOKEN`'s; shorter ones, a region or an
/// e-mail address, are too often part of a secret's text by chance).
pub(super) fn handing_over(
    inherited: &[(String, String)],
    name: &str,
    value: &str,
) -> Option<usize> {
    inherited.iter().position(|(held, held_value)| {
        held == name
            || (value.len() >= 8 && held_value.contains(value))
            || (held_value.len() >= 16 && value.contains(held_value.as_str()))
    })
}

/// `rule` as a message may quote it: whole, unless it may hold a key an operator pasted (user
/// information, which may itself hold `/`; a query or a fragment), then only its scheme and
/// host.
fn without_userinfo(rule: &str) -> String {
    if !rule.contains(['@', '?', '#']) {
        return rule.to_owned();
    }
    let (scheme, rest) = match rule.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, rule),
    };
    // The host is what follows the last `@` before the path, query or fragment that follow it.
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = &rest[..host_end];
    match scheme {
        Some(scheme) => format!("{scheme}://{host}/… (the rest not shown: it may hold a key)"),
        None => format!("{host}/… (the rest not shown: it may hold a key)"),
    }
}
