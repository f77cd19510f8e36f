//! `llm-worker new NAME`: a new plugin crate that builds and loads as it is.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use heck::ToUpperCamelCase;

/// Where this build of llm-worker found the guest SDK, if it still exists.
fn local_sdk() -> Option<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../guest-sdk")
        .canonicalize()
        .ok()
}

/// Rust's keywords and the names of the standard crates: not usable as a crate's name.
const RESERVED: &[&str] = &[
    "as",
    "async",
    "await",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "try",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "typeof",
    "unsized",
    "virtual",
    "yield",
    "alloc",
    "core",
    "proc_macro",
    "std",
    "test",
];

/// `path` relative to `from` (both absolute, links resolved).
fn relative(path: &Path, from: &Path) -> PathBuf {
    let shared = path
        .components()
        .zip(from.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut relative = PathBuf::new();
    for _ in from.components().skip(shared) {
        relative.push("..");
    }
    relative.extend(path.components().skip(shared));
    relative
}

/// The `llm-worker-guest` dependency of a crate at `dir`, never an absolute path (the crate
/// is to be shared): the SDK given with `--sdk`, as a path relative to the crate; else this
/// llm-worker's own SDK, relative, when the crate is inside its checkout; else the published
/// version.
fn dependency(dir: &Path, sdk: Option<&Path>) -> anyhow::Result<String> {
    let crate_dir = dir
        .parent()
        .and_then(|parent| parent.canonicalize().ok())
        .map(|parent| parent.join(dir.file_name().unwrap_or_default()))
        .with_context(|| format!("cannot resolve {}", dir.display()))?;
    let path = |sdk: &Path| {
        format!(
            "{{ path = {:?} }}",
            relative(sdk, &crate_dir).display().to_string()
        )
    };
    if let Some(sdk) = sdk {
        let found = sdk
            .canonicalize()
            .ok()
            .filter(|sdk| sdk.join("Cargo.toml").is_file())
            .with_context(|| {
                format!(
                    "--sdk {}: there is no crate there (no Cargo.toml); give the guest-sdk \
                     directory of an llm-worker checkout",
                    sdk.display()
                )
            })?;
        return Ok(path(&found));
    }
    match local_sdk() {
        Some(sdk)
            if sdk
                .parent()
                .is_some_and(|checkout| crate_dir.starts_with(checkout)) =>
        {
            Ok(path(&sdk))
        }
        _ => Ok(format!(
            "\"{}\"  # from crates.io; or {{ path = \"…/guest-sdk\" }} of a checkout",
            env!("CARGO_PKG_VERSION")
        )),
    }
}

/// Creates the crate `name` in `parent`. `sdk` overrides where `llm-worker-guest` comes from.
pub(crate) fn scaffold(parent: &Path, name: &str, sdk: Option<&Path>) -> anyhow::Result<PathBuf> {
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !valid {
        bail!(
            "{name:?} is not a good crate name; use lower-case letters, digits, '-' and '_', \
             starting with a letter"
        );
    }
    if RESERVED.contains(&name.replace('-', "_").as_str()) {
        bail!(
            "{name:?} is a Rust keyword or the name of a standard crate; choose another name, \
             e.g. \"{name}-tool\""
        );
    }
    let dir = parent.join(name);
    if dir.exists() {
        bail!("{} exists already; choose another name", dir.display());
    }
    let dependency = dependency(&dir, sdk)?;
    // `weather-now` → `WeatherNow`.
    let type_name = name.to_upper_camel_case();

    let cargo_toml = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
llm-worker-guest = {dependency}

# Plugins ship as one file: small and fast.
[profile.release]
opt-level = "s"
lto = true
strip = true
codegen-units = 1
panic = "abort"

# A crate of its own, even inside another workspace.
[workspace]
"#
    );
    let lib_rs = format!(
        r##"//! The `{name}` tool plugin.

use llm_worker_guest::{{tool, tool_registry}};

/// The tools of this plugin. Fields hold state kept between calls of one session (use
/// `Arc<Mutex<…>>` or atomics: every tool holds a clone).
#[derive(Clone, Default)]
pub struct {type_name};

#[tool_registry]
impl {type_name} {{
    /// Says hello. Describe here what the tool does and returns: the model reads it.
    #[tool]
    fn hello(&self, #[description = "Who to greet"] name: String) -> Result<String, String> {{
        if name.trim().is_empty() {{
            return Err("give a name".into());
        }}
        Ok(format!("Hello, {{name}}!"))
    }}
}}

llm_worker_guest::export_plugin!({type_name});

#[cfg(test)]
mod tests {{
    use super::*;
    use llm_worker_guest::block_on;

    #[test]
    fn says_hello() {{
        let (meta, tool) = {type_name}.hello_definition()();
        assert_eq!(meta.name, "hello");
        let out = block_on(tool.execute(r#"{{"name":"Ada"}}"#));
        assert_eq!(out.as_deref(), Ok("Hello, Ada!"));
    }}
}}
"##
    );
    let file = name.replace('-', "_");
    let readme = format!(
        "# {name}\n\nAn llm-worker tool plugin.\n\n```sh\ncargo test                                      # the tools, natively\n\
         cargo build --release --target wasm32-wasip2    # target/wasm32-wasip2/release/{file}.wasm\n\
         llm-worker call target/wasm32-wasip2/release hello '{{\"name\":\"Ada\"}}'\n```\n"
    );
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    std::fs::create_dir_all(dir.join("src"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    write(dir.join("Cargo.toml"), &cargo_toml)?;
    write(dir.join("src/lib.rs"), &lib_rs)?;
    write(dir.join("README.md"), &readme)?;
    Ok(dir)
}
