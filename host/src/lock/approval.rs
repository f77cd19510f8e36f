//! Approval: what loading a plugin of a locked directory checks against its entry. The files
//! are checked before anything of them is parsed or compiled; the directory grants once they
//! are resolved, because the policy's text may be unchanged while a path in it was made to lead
//! elsewhere.

use std::path::{Path, PathBuf};

use super::{LockFile, LockedPlugin, grant_paths, relative_name};

impl LockFile {
    /// The entry approving the plugin at `path` of `dir`, or why there is none.
    pub(crate) fn approval(&self, dir: &Path, path: &Path) -> Result<&LockedPlugin, String> {
        let name = relative_name(dir, path);
        self.plugins
            .iter()
            .find(|entry| entry.file == name)
            .ok_or_else(|| "it is not in the lock (a plugin added since it was written)".into())
    }

    /// The plugins this lock approves in `dir` that are not among `present` (the directory is
    /// not what was approved).
    pub(crate) fn gone(&self, dir: &Path, present: &[PathBuf]) -> Vec<PathBuf> {
        let present: std::collections::BTreeSet<String> = present
            .iter()
            .map(|path| relative_name(dir, path))
            .collect();
        self.plugins
            .iter()
            .filter(|entry| !present.contains(&entry.file))
            .map(|entry| dir.join(&entry.file))
            .collect()
    }
}

impl LockedPlugin {
    /// Whether the plugin's bytes and policy text (their SHA-256 in hex; no policy file is
    /// `None`) are the approved ones; if not, why.
    pub(crate) fn approves_files(
        &self,
        sha256: &str,
        policy_sha256: Option<&str>,
        policy_path: &Path,
    ) -> Result<(), String> {
        let policy = policy_sha256.unwrap_or("none");
        if sha256 != self.sha256 {
            Err(format!(
                "it changed since it was locked (sha256 {} in the lock, {sha256} now)",
                self.sha256
            ))
        } else if policy != self.policy_sha256 {
            Err(format!(
                "its policy {} changed since it was locked (sha256 {} in the lock, {policy} now)",
                policy_path.display(),
                self.policy_sha256
            ))
        } else {
            Ok(())
        }
    }

    /// Whether the directory grants of `policy`, resolved, lead where they were approved to;
    /// if not, where they lead now.
    pub(crate) fn approves_grants(&self, policy: &crate::SandboxPolicy) -> Result<(), String> {
        let now = grant_paths(policy);
        if now == self.dirs {
            return Ok(());
        }
        Err(grants_moved(&self.dirs, &now))
    }
}

impl LockedPlugin {
    /// Whether the plugin, loaded, offers the tools approved (names, in any order), and the
    /// resources, templates and prompts; if not, which differ.
    pub(crate) fn approves_listing(&self, plugin: &crate::LoadedPlugin) -> Result<(), String> {
        if let Some(moved) = names_moved(&self.tools, &plugin.tool_names()) {
            return Err(format!(
                "it offers other tools than the lock approved ({moved}); review them and run \
                 `llm-worker lock` again if they are expected"
            ));
        }
        if let Some(moved) = names_moved(&self.offers, &plugin.offers()) {
            return Err(format!(
                "it offers other resources, templates or prompts than the lock approved \
                 ({moved}); review them and run `llm-worker lock` again if they are expected"
            ));
        }
        Ok(())
    }
}

impl LockedPlugin {
    /// Whether `now` (a new version's entry) offers other tools, resources, templates or
    /// prompts than this entry approved: which, if so.
    #[cfg_attr(not(feature = "registry"), allow(dead_code))]
    pub(crate) fn listing_moved(&self, now: &LockedPlugin) -> Option<String> {
        let tools = names_moved(&self.tools, &now.tools).map(|moved| format!("tools: {moved}"));
        let offers = names_moved(&self.offers, &now.offers)
            .map(|moved| format!("resources, templates and prompts: {moved}"));
        match (tools, offers) {
            (None, None) => None,
            (Some(one), None) | (None, Some(one)) => Some(one),
            (Some(tools), Some(offers)) => Some(format!("{tools}; {offers}")),
        }
    }
}

/// Which tools (or other offerings) a plugin offers now that the lock did not approve, and
/// which it approved that are gone (in any order): `None` when they are the same.
pub(super) fn names_moved<A: AsRef<str>, B: AsRef<str>>(locked: &[A], now: &[B]) -> Option<String> {
    let locked: std::collections::BTreeSet<&str> = locked.iter().map(AsRef::as_ref).collect();
    let now: std::collections::BTreeSet<&str> = now.iter().map(AsRef::as_ref).collect();
    if locked == now {
        return None;
    }
    let list = |names: Vec<&&str>| {
        if names.is_empty() {
            "none".to_owned()
        } else {
            names
                .iter()
                .map(|name| format!("'{}'", llm_worker_rules::tool::OneLine(name)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    Some(format!(
        "new: {}; gone: {}",
        list(now.difference(&locked).collect()),
        list(locked.difference(&now).collect()),
    ))
}

/// Says where a plugin's directory grants lead now, against where the lock approved.
pub(super) fn grants_moved(locked: &[String], now: &[String]) -> String {
    let list = |dirs: &[String]| {
        if dirs.is_empty() {
            "none".to_owned()
        } else {
            dirs.join(", ")
        }
    };
    format!(
        "its directory grants lead to {} now, and the lock approved {}",
        list(now),
        list(locked)
    )
}
