//! `llm-worker lock`: write a directory's lock file, or with `--check` compare the directory
//! with it.

use std::path::Path;
use std::process::ExitCode;

use llm_worker::lock::{LOCK_FILE, LockFile};
use llm_worker_rules::tool::OneLine;

use crate::load::Loader;

pub(crate) fn lock(
    out: &mut String,
    loader: &Loader,
    dir: &Path,
    check: bool,
    replace_unreadable: bool,
) -> anyhow::Result<ExitCode> {
    // A lock another user could replace protects nothing: say so before anything else (the
    // advice `--replace-unreadable` would only write another lock they could replace).
    if let Some(reason) = LockFile::unsafe_directory(dir) {
        eprintln!(
            "error: {} cannot hold a lock: {reason}; fix that first",
            dir.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    let options = loader.options.ignore_lock(true);
    let loaded = loader.host.load_dir_with(dir, options, |_, _, _| {})?;
    let mut now = LockFile::of(dir, &loaded.plugins);
    // Pulled plugins keep their provenance; the trust policy is pinned (and must allow them).
    let previous = match LockFile::read(dir) {
        Ok(Some(previous)) => {
            for note in now.keep_sources(&previous) {
                tracing::warn!("{note}");
            }
            Some(previous)
        }
        Ok(None) => None,
        // `--check` says why below.
        Err(_) if check => None,
        // What the unreadable lock approved is unknown: approving the directory over it would
        // take whatever is there now (perhaps what made the lock untrusted) without a word.
        Err(error) if !replace_unreadable => {
            eprintln!("error: {}", OneLine(&error.to_string()));
            eprintln!(
                "error: nothing written: the current lock cannot be read, so what changed since \
                 it was written cannot be shown"
            );
            return Ok(ExitCode::FAILURE);
        }
        Err(error) => {
            let error = OneLine(&error.to_string()).to_string();
            eprintln!(
                "warning: replacing a lock that cannot be read ({error}); every plugin is \
                 approved as new, and pulled plugins lose their provenance (pull them again to \
                 record it)"
            );
            Some(LockFile::default())
        }
    };
    now.trust_sha256 = llm_worker::trust::TrustPolicy::pin(dir)?;
    now.access_sha256 = LockFile::access_pin(dir)?;
    let refusals = now.source_refusals(dir);
    if check {
        let Some(approved) = LockFile::read(dir)? else {
            eprintln!(
                "error: {} has no {LOCK_FILE}; write one with `llm-worker lock {}`",
                dir.display(),
                dir.display()
            );
            return Ok(ExitCode::FAILURE);
        };
        let mut differences = approved.differences(&now);
        differences.extend(approved.trust_difference(&now));
        differences.extend(approved.access_difference(&now));
        differences.extend(
            refusals
                .iter()
                .map(|(file, reason)| format!("refused: {file}: {reason}")),
        );
        differences.extend(
            loaded
                .failures
                .iter()
                .map(|failure| format!("refused: {failure}")),
        );
        if differences.is_empty() {
            outln!(out, "{} matches its {LOCK_FILE}", dir.display());
            return Ok(ExitCode::SUCCESS);
        }
        for difference in &differences {
            outln!(out, "{}", OneLine(difference));
        }
        eprintln!(
            "error: {} differs from its {LOCK_FILE} ({} difference(s)); review, then approve \
             with `llm-worker lock {}`",
            dir.display(),
            differences.len(),
            dir.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    if !loaded.failures.is_empty() || !refusals.is_empty() {
        // A failure quotes what the plugin declared: shown, never acted on.
        for failure in &loaded.failures {
            eprintln!("refused: {}", OneLine(&failure.to_string()));
        }
        for (file, reason) in &refusals {
            eprintln!("refused: {}", OneLine(&format!("{file}: {reason}")));
        }
        eprintln!(
            "error: nothing written: fix or remove the refused plugins first, so that the lock \
             approves the whole directory"
        );
        return Ok(ExitCode::FAILURE);
    }
    now.write(dir)?;
    // Approving changes is what `lock` is for, but never without saying so: changed plugins and
    // policies (what a plugin may reach), new and gone plugins, and a changed trust or access
    // policy (a first lock too: it pins those as they stand).
    // Without a lock before (a first lock, or one deleted), every plugin is new: named too
    // (a swapped plugin is approved only where the operator saw its name).
    let previous = match previous {
        Some(previous) => previous,
        None => {
            if !now.plugins.is_empty() && now.trust_sha256.is_some() {
                eprintln!(
                    "warning: {} had no {LOCK_FILE}: every plugin is approved as the file it is \
                     now, none with a registry's provenance (where it was pulled from, who \
                     signed it); if a lock was deleted, restore it from version control \
                     instead, or pull the plugins again",
                    dir.display()
                );
            }
            LockFile::default()
        }
    };
    let plugin_changes = previous.differences(&now);
    for change in plugin_changes.into_iter().chain(
        [
            previous.trust_difference(&now),
            previous.access_difference(&now),
        ]
        .into_iter()
        .flatten(),
    ) {
        outln!(out, "approved: {}", OneLine(&change));
    }
    outln!(
        out,
        "wrote {} ({} plugin(s)); commit it beside the plugins",
        dir.join(LOCK_FILE).display(),
        now.plugins.len()
    );
    Ok(ExitCode::SUCCESS)
}
