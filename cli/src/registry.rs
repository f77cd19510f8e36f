//! `llm-worker pull` and `llm-worker push`: plugins to and from OCI registries (the library's
//! `registry` module does the work).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use llm_worker::PluginHost;
use llm_worker::lock::LOCK_FILE;
use llm_worker::registry::{
    ClientOptions, PullOptions, Reference, RegistryClient, SigningKey, pull_into, push,
};

use crate::load::Loader;

/// What `pull` was asked.
pub(crate) struct PullArgs<'a> {
    pub(crate) reference: &'a str,
    pub(crate) dir: &'a Path,
    pub(crate) name: Option<String>,
    pub(crate) update: bool,
    pub(crate) allow_unsigned: bool,
    pub(crate) plain_http: bool,
    pub(crate) timeout_secs: u64,
}

fn client_options(plain_http: bool, timeout_secs: u64) -> ClientOptions {
    ClientOptions::default()
        .plain_http(plain_http)
        .request_timeout(Duration::from_secs(timeout_secs))
}

pub(crate) async fn pull(
    out: &mut String,
    loader: &Loader,
    args: PullArgs<'_>,
) -> anyhow::Result<ExitCode> {
    let reference = Reference::parse(args.reference)?;
    let options = PullOptions::default()
        .name(args.name)
        .update(args.update)
        .allow_unsigned(args.allow_unsigned)
        .client(client_options(args.plain_http, args.timeout_secs));
    let pulled = pull_into(&loader.host, args.dir, &reference, &options).await?;
    let entry = &pulled.entry;
    let Some(source) = &entry.source else {
        anyhow::bail!("the lock entry has no source");
    };
    if !pulled.changed {
        outln!(
            out,
            "{} is up to date with {reference} (manifest {}); nothing changed",
            pulled.path.display(),
            source.manifest
        );
        return Ok(ExitCode::SUCCESS);
    }
    match &pulled.previous_manifest {
        Some(previous) => outln!(
            out,
            "updated {} to {reference}: manifest {previous} -> {}",
            pulled.path.display(),
            source.manifest
        ),
        None => outln!(out, "pulled {reference} into {}", pulled.path.display()),
    }
    outln!(out, "  manifest:  {}", source.manifest);
    outln!(
        out,
        "  component: {} ({})",
        source.layer,
        entry.tools.join(", ")
    );
    outln!(out, "  verified:  {}", pulled.verified);
    if let Some(sha256) = &pulled.trust_pinned {
        outln!(
            out,
            "approved: {}: pinned as it stands (sha256 {sha256}) by this first pull; review \
             it: `llm-worker lock --check {}` shows any later change",
            llm_worker::trust::TRUST_FILE,
            args.dir.display()
        );
    }
    if let Some((policy, sha256)) = &pulled.policy_pinned {
        // It was in the directory before the plugin: whoever put it there chose what the
        // plugin may reach, and this pull approved it without anyone reading it.
        outln!(
            out,
            "approved: {policy}: pinned as it stands (sha256 {sha256}) by this first pull; \
             review it, it grants what {} may reach: `llm-worker lock --check {}` shows any \
             later change",
            entry.file,
            args.dir.display()
        );
    }
    outln!(
        out,
        "recorded in {}; commit it beside the plugins",
        args.dir.join(LOCK_FILE).display()
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn push_file(
    out: &mut String,
    file: &Path,
    reference: &str,
    key: Option<&Path>,
    plain_http: bool,
    timeout_secs: u64,
) -> anyhow::Result<ExitCode> {
    let reference = Reference::parse(reference)?;
    let key =
        match key {
            Some(path) => {
                let pem = std::fs::read_to_string(path).map_err(|error| {
                    anyhow::anyhow!("cannot read the signing key {}: {error}", path.display())
                })?;
                Some(SigningKey::from_pem(&pem).map_err(|error| {
                    anyhow::anyhow!("the signing key {}: {error}", path.display())
                })?)
            }
            None => None,
        };
    // Only a plugin this host loads is pushed (no cache: nothing is kept of it).
    let host = PluginHost::builder().build()?;
    let plugin = host.load(file)?;
    let bytes = std::fs::read(file)
        .map_err(|error| anyhow::anyhow!("cannot read {}: {error}", file.display()))?;
    let client = RegistryClient::new(&reference, &client_options(plain_http, timeout_secs))?;
    let pushed = push(&client, &reference, &bytes, plugin.imports(), key.as_ref()).await?;
    outln!(
        out,
        "pushed {} to {reference} (manifest {})",
        file.display(),
        pushed.manifest_digest
    );
    if let (Some(tag), Some(key)) = (&pushed.signature_tag, &key) {
        outln!(out, "signed with {} under {tag}", key.fingerprint());
    }
    Ok(ExitCode::SUCCESS)
}
