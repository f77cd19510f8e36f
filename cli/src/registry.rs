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
    pub(crate) approve_names: bool,
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
        .approve_names(args.approve_names)
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
        Some(previous) if *previous == source.manifest => outln!(
            out,
            "restored {} from {reference}: the file was not the bytes the lock approved",
            pulled.path.display()
        ),
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
    if let Some(sha256) = &pulled.access_pinned {
        outln!(
            out,
            "approved: {}: pinned as it stands (sha256 {sha256}) by this first pull; review \
             it, it decides who may call which tool over HTTP: `llm-worker lock --check {}` \
             shows any later change",
            llm_worker::lock::ACCESS_FILE,
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
    host: &PluginHost,
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
                let pem = SigningKey::read_pem_file(path).map_err(|error| {
                    anyhow::anyhow!("cannot read the signing key {}: {error}", path.display())
                })?;
                let key = if SigningKey::is_encrypted(&pem) {
                    let password = key_password(path, false)?;
                    SigningKey::from_cosign_pem(&pem, password.as_bytes())
                } else {
                    SigningKey::from_pem(&pem)
                };
                Some(key.map_err(|error| {
                    anyhow::anyhow!("the signing key {}: {error}", path.display())
                })?)
            }
            None => None,
        };
    // Only a plugin this host loads is pushed (compiled into the cache as any command that
    // loads it: a push usually comes after a `check` or a `serve` of the same file).
    let plugin = host.load(file)?;
    let bytes = std::fs::read(file)
        .map_err(|error| anyhow::anyhow!("cannot read {}: {error}", file.display()))?;
    // What is pushed (and signed) is what was loaded: the file read again may have been
    // replaced meanwhile (a build still writing it, a writer holding it open).
    if <sha2::Sha256 as sha2::Digest>::digest(&bytes).as_slice() != plugin.sha256().as_slice() {
        anyhow::bail!(
            "{} changed while it was being pushed (it is not the file that was checked); push \
             it again once nothing writes it",
            file.display()
        );
    }
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

/// The password of cosign's encrypted key `path`: `COSIGN_PASSWORD` if it is set (even empty,
/// as cosign takes it), else asked on the terminal (twice when `new`).
fn key_password(path: &Path, new: bool) -> anyhow::Result<zeroize::Zeroizing<String>> {
    use std::io::IsTerminal;
    let variable = llm_worker::registry::COSIGN_PASSWORD_VARIABLE;
    if let Some(password) = std::env::var_os(variable) {
        return password
            .into_string()
            .map(zeroize::Zeroizing::new)
            .map_err(|_| anyhow::anyhow!("{variable} is not UTF-8"));
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "{} needs a password: set {variable} (no terminal to ask on)",
            path.display()
        );
    }
    let ask = |prompt: &str| {
        rpassword::prompt_password(prompt)
            .map(zeroize::Zeroizing::new)
            .map_err(|error| anyhow::anyhow!("cannot read the password: {error}"))
    };
    let password = ask(&format!("Password for {}: ", path.display()))?;
    if new && *ask("Again: ")? != *password {
        anyhow::bail!("the passwords differ; nothing was written");
    }
    Ok(password)
}

/// `keygen`: PREFIX.key (cosign's encrypted format, readable by its owner alone)
/// and PREFIX.pub; neither may exist already.
pub(crate) fn generate_key_pair(prefix: &Path) -> anyhow::Result<String> {
    let with = |extension: &str| {
        let mut name = prefix.as_os_str().to_owned();
        name.push(extension);
        std::path::PathBuf::from(name)
    };
    let (private, public) = (with(".key"), with(".pub"));
    for path in [&private, &public] {
        if path.exists() {
            anyhow::bail!(
                "{} exists; move it away, or pick another --output-key-prefix (nothing is \
                 overwritten)",
                path.display()
            );
        }
    }
    let password = key_password(&private, true)?;
    if password.is_empty() {
        eprintln!(
            "warning: the password is empty: {} is sealed under nothing but its file mode",
            private.display()
        );
    }
    let key = SigningKey::generate().map_err(anyhow::Error::msg)?;
    let sealed = key
        .to_cosign_pem(password.as_bytes())
        .map_err(anyhow::Error::msg)?;
    let write = |path: &Path, text: &str, mode: u32| -> anyhow::Result<()> {
        use std::io::Write;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
        #[cfg(not(unix))]
        let _ = mode;
        let mut file = options
            .open(path)
            .map_err(|error| anyhow::anyhow!("cannot create {}: {error}", path.display()))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", path.display()))
    };
    write(&private, &sealed, 0o600)?;
    write(&public, &key.public_key_pem(), 0o644)?;
    Ok(format!(
        "Private key written to {}\nPublic key written to {}\n  fingerprint {}: sign with \
         `llm-worker push --sign {}`, trust it in llm-worker.trust.toml's [keys]\n",
        private.display(),
        public.display(),
        key.fingerprint(),
        private.display()
    ))
}
