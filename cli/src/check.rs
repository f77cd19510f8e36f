//! `llm-worker check`: per plugin file, whether it loads, the policy file it read, what it
//! imports, what its policy grants and where a pulled plugin came from; the directory's stray
//! policy files; failing where `call` would.

use std::path::Path;
use std::process::ExitCode;

use llm_worker::SandboxPolicy;
use llm_worker::lock::{LOCK_FILE, LockFile};
use llm_worker_rules::tool::OneLine;

use crate::load::{Loader, file_name, holds_no_plugins, load_with_progress, no_plugins};

pub(crate) fn check(out: &mut String, loader: &Loader, dir: &Path) -> anyhow::Result<ExitCode> {
    let loaded = load_with_progress(loader, dir)?;
    // As the load found it (a lock written since is not what the plugins were checked against).
    let locked = loaded.locked;
    // What `pull` verified, by file (the lock was read and checked by the load above).
    let lock = LockFile::read(dir).ok().flatten().filter(|_| locked);
    for plugin in &loaded.plugins {
        let policy = plugin.policy();
        outln!(
            out,
            "ok       {}  tools: {}",
            OneLine(&file_name(plugin, dir)),
            plugin.tool_names().join(", ")
        );
        // Which file says what it may do: the one read, or where one would be read.
        let policy_file = SandboxPolicy::path_for(plugin.path());
        let policy_file = policy_file.strip_prefix(dir).unwrap_or(&policy_file);
        // Named after the plugin's file: on one line, as that name is.
        let policy_file = OneLine(&policy_file.to_string_lossy()).to_string();
        if plugin.policy_sha256().is_some() {
            outln!(out, "         policy: {policy_file}");
        } else {
            outln!(
                out,
                "         no policy: the defaults (no {policy_file} beside it)"
            );
        }
        // What it asks of the sandbox: the contract's own interfaces are not asks.
        let contract = format!("{}/", llm_worker_rules::contract::PACKAGE);
        let asks: Vec<&str> = plugin
            .imports()
            .iter()
            .map(|i| i.split('@').next().unwrap_or(i))
            .filter(|i| !i.starts_with(&contract))
            .collect();
        outln!(out, "         imports: {}", asks.join(", "));
        // What the policy file says, on one line as the rest of the report (a guest path or an
        // environment name may hold a line break).
        let env: Vec<String> = policy
            .env
            .iter()
            .map(|(name, _)| OneLine(name).to_string())
            .collect();
        let dirs: Vec<String> = policy
            .dirs
            .iter()
            .map(|d| {
                format!(
                    "{} -> {} ({})",
                    OneLine(&d.host.to_string_lossy()),
                    OneLine(&d.guest),
                    if d.writable { "rw" } else { "ro" }
                )
            })
            .collect();
        let http: Vec<String> = policy.http.iter().map(shown_grant).collect();
        outln!(
            out,
            "         grants: env [{}], dirs [{}], http [{}]",
            env.join(", "),
            dirs.join(", "),
            http.join(", ")
        );
        outln!(out, "         limits: {}", shown_limits(&policy.limits));
        for (tool, grants) in &policy.tool_http {
            let grants: Vec<String> = grants.iter().map(shown_grant).collect();
            outln!(out, "         tool {tool}: http [{}]", grants.join(", "));
        }
        if !policy.http.is_empty() {
            let requests = &policy.request_http;
            for (what, grants) in [
                ("resources", &requests.resources),
                ("prompts", &requests.prompts),
                ("completion", &requests.completion),
            ] {
                let grants: Vec<String> = grants.iter().map(shown_grant).collect();
                outln!(
                    out,
                    "         {what}: http [{}]{}",
                    grants.join(", "),
                    if grants.is_empty() {
                        format!(" (none unless [{what}.http] allow grants some)")
                    } else {
                        String::new()
                    }
                );
            }
        }
        for secret in &policy.http_secrets {
            let source = match secret.variables() {
                [] => "a value written in the policy file".to_owned(),
                names => {
                    let names: Vec<String> = names.iter().map(|name| format!("${name}")).collect();
                    format!("value from the host's {}", names.join(", "))
                }
            };
            outln!(
                out,
                "         secret: header {} set by the host on requests to {} ({source})",
                secret.header,
                secret.grant
            );
        }
        outln!(
            out,
            "         contract: llm-worker:tool@{}",
            plugin.contract_version()
        );
        if plugin.contract_version() != "0.1.0" && plugin.contract_version() != "0.2.0" {
            let client = &policy.client;
            let allowed = |on: bool| if on { "allowed" } else { "denied" };
            outln!(
                out,
                "         client questions: elicitation {}, sampling {}, roots {}; at most {} \
                 per call, {} bytes each, {:?} to answer",
                allowed(client.elicitation),
                allowed(client.sampling),
                allowed(client.roots),
                client.max_questions,
                client.max_question_bytes,
                client.answer_timeout
            );
            let resources: Vec<&str> = plugin.resources().iter().map(|r| r.uri.as_str()).collect();
            let templates: Vec<&str> = plugin
                .resource_templates()
                .iter()
                .map(|t| t.uri_template.as_str())
                .collect();
            let prompts: Vec<&str> = plugin.prompts().iter().map(|p| p.name.as_str()).collect();
            outln!(
                out,
                "         resources: [{}], templates: [{}], prompts: [{}]",
                resources.join(", "),
                templates.join(", "),
                prompts.join(", ")
            );
        }
        for meta in plugin.tools() {
            let hints = hint_words(&meta.annotations);
            if !hints.is_empty() || meta.output_schema.is_some() {
                outln!(
                    out,
                    "         tool {}: {}{}",
                    meta.name,
                    if meta.output_schema.is_some() {
                        "structured result; "
                    } else {
                        ""
                    },
                    if hints.is_empty() {
                        "no hints".to_owned()
                    } else {
                        hints.join(", ")
                    }
                );
            }
        }
        for warning in plugin.warnings() {
            outln!(out, "         warning: {}", OneLine(warning));
        }
        if locked {
            outln!(out, "         lock: approved by {LOCK_FILE}");
        }
        let file = file_name(plugin, dir);
        if let Some(source) = lock
            .iter()
            .flat_map(|lock| &lock.plugins)
            .find(|entry| entry.file == file)
            .and_then(|entry| entry.source.as_ref())
        {
            outln!(
                out,
                "         source: {} (manifest {}, component sha256:{})",
                source.reference,
                source.manifest,
                file_sha256(source)
            );
            outln!(
                out,
                "         verified: {} at pull; bytes match the lock; {}",
                source.verified(),
                if source.unsigned == Some(llm_worker::lock::Unsigned::ByFlag) {
                    format!(
                        "a one-off exception, allowed while no rule of {} wants it signed",
                        llm_worker::trust::TRUST_FILE
                    )
                } else {
                    format!("still allowed by {}", llm_worker::trust::TRUST_FILE)
                }
            );
        }
    }
    for failure in &loaded.failures {
        // Its file's name and the plugin's own text (what its start code said) on one line:
        // neither may start a line that reads as the report's.
        outln!(out, "refused  {}", OneLine(&failure.to_string()));
    }
    // Policy files that belong to no plugin, as `list` warns of them.
    for warning in &loaded.warnings {
        outln!(out, "warning  {}", OneLine(warning));
    }
    if holds_no_plugins(&loaded) {
        // As `call` fails on it.
        anyhow::bail!(no_plugins(dir, loader.options));
    }
    if !locked {
        outln!(
            out,
            "(no {LOCK_FILE}: any plugin put in {} is loaded; `llm-worker lock` approves \
             these, and `--locked` then refuses to load without the lock)",
            dir.display()
        );
    }
    Ok(if loaded.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The hex SHA-256 of a pulled plugin's component, from its layer digest.
fn file_sha256(source: &llm_worker::lock::PluginSource) -> &str {
    source
        .layer
        .strip_prefix("sha256:")
        .unwrap_or(&source.layer)
}

/// The hints a client is shown, in words: `read-only`, `not open-world`, …; those the host
/// cannot check against the policy (whether a tool destroys, whether it is idempotent) marked
/// as the plugin's claim.
fn hint_words(hints: &llm_worker::ToolAnnotations) -> Vec<String> {
    [
        (hints.read_only, "read-only", ""),
        (hints.destructive, "destructive", " (claimed)"),
        (hints.idempotent, "idempotent", " (claimed)"),
        (hints.open_world, "open-world", ""),
    ]
    .into_iter()
    .filter_map(|(value, word, claimed)| match value {
        Some(true) => Some(format!("{word}{claimed}")),
        Some(false) => Some(format!("not {word}{claimed}")),
        None => None,
    })
    .collect()
}

/// An HTTP grant as `check` shows it: one that may reach addresses that are not public (the
/// policy's `allow_private`) says so, for a reviewer to see what a plain grant keeps out.
fn shown_grant(grant: &llm_worker::HttpGrant) -> String {
    if grant.allows_private_addresses() {
        format!("{grant} (may reach private addresses)")
    } else {
        grant.to_string()
    }
}

/// Every limit a policy may set, as `check` shows it.
fn shown_limits(limits: &llm_worker::Limits) -> String {
    let mut shown = format!(
        "memory {} MiB, time {:?}, input {} B, output {} B, {} call(s) at once, schemas {} MiB, \
         disabled after {} failures in a row",
        limits.memory_bytes >> 20,
        limits.call_timeout,
        limits.max_input_bytes,
        limits.max_output_bytes,
        limits.max_concurrent_calls,
        limits.schema_memory_bytes >> 20,
        limits.max_consecutive_failures
    );
    if let Some(task_timeout) = limits.task_timeout {
        shown.push_str(&format!(", tasks {task_timeout:?}"));
    }
    if let Some(fuel) = limits.fuel {
        shown.push_str(&format!(", fuel {fuel}"));
    }
    shown
}
