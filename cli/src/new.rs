//! `llm-worker new NAME`: a new plugin crate that builds, tests and loads as it is, from any
//! directory: it depends on the guest SDK of an llm-worker checkout by path (the SDK is not on
//! crates.io) and names the toolchain and target it needs, for rustup to install.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use heck::ToUpperCamelCase;

/// The guest SDK's package name.
const SDK_PACKAGE: &str = "llm-worker-guest";

/// The guest SDK a new crate builds against: `llm-worker-guest` in an llm-worker checkout.
#[derive(Debug)]
pub(crate) struct Sdk {
    /// Its directory (`…/guest-sdk`), links resolved.
    pub(crate) dir: PathBuf,
    /// The checkout holding it: its workspace, where its macros and rules sit beside it.
    pub(crate) checkout: PathBuf,
}

impl Sdk {
    /// The SDK at `path`: the SDK's own directory, or a checkout holding it in `guest-sdk/`.
    fn at(path: &Path) -> Option<Sdk> {
        [path.to_owned(), path.join("guest-sdk")]
            .into_iter()
            .find_map(|dir| {
                let dir = dir.canonicalize().ok()?;
                let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
                let manifest: toml::Table = toml::from_str(&manifest).ok()?;
                let name = manifest.get("package")?.get("name")?.as_str()?;
                let checkout = dir.parent()?.to_owned();
                (name == SDK_PACKAGE).then_some(Sdk { dir, checkout })
            })
    }

    /// The SDK given with `--sdk`, else the one of the checkout at `built_from` (where this
    /// llm-worker was built), if it is still there. Never a crate that cannot build: without
    /// either, an error saying how to get one.
    pub(crate) fn find(given: Option<&Path>, built_from: &Path) -> anyhow::Result<Sdk> {
        match given {
            Some(path) => Sdk::at(path).with_context(|| {
                format!(
                    "--sdk {}: no llm-worker SDK there (a crate named {SDK_PACKAGE}); give an \
                     llm-worker checkout or its guest-sdk directory",
                    path.display()
                )
            }),
            None => {
                let sdk = Sdk::at(built_from).with_context(|| {
                    format!(
                        "this llm-worker was built from {}, which holds no SDK any more (no \
                         guest-sdk/ with the crate {SDK_PACKAGE}), and the SDK is not on \
                         crates.io; give one with --sdk PATH: a checkout of llm-worker's source \
                         (or its guest-sdk directory)",
                        built_from.display()
                    )
                })?;
                // Found by where this binary was built, not named by the user: the crate would
                // build (and run the build scripts and macros of) whatever is there now, so it
                // and the crates of the checkout it depends on (the macros, the rules) must be
                // files no other user could have put there or changed.
                // The contract's WIT files too, which the SDK's bindings are generated from.
                let siblings = ["guest-macros", "rules", "wit"]
                    .map(|crate_dir| sdk.checkout.join(crate_dir))
                    .into_iter()
                    .filter(|crate_dir| crate_dir.is_dir());
                // The workspace's manifest decides where the crates' shared dependencies come
                // from; the toolchain file and the lock file are read too.
                let files = ["Cargo.toml", "rust-toolchain.toml", "plugins/Cargo.lock"]
                    .map(|file| sdk.checkout.join(file))
                    .into_iter()
                    .filter(|file| file.exists());
                let problem = std::iter::once(sdk.dir.clone())
                    .chain(siblings)
                    .find_map(|crate_dir| llm_worker::lock::LockFile::unsafe_tree(&crate_dir))
                    .or_else(|| {
                        files
                            .into_iter()
                            .find_map(|file| llm_worker::lock::LockFile::unsafe_file(&file))
                    });
                if let Some(problem) = problem {
                    anyhow::bail!(
                        "the SDK this llm-worker was built with, {}, could have been replaced \
                         by another user ({problem}); give the SDK of a checkout you trust with \
                         --sdk PATH",
                        sdk.dir.display()
                    );
                }
                Ok(sdk)
            }
        }
    }

    /// The Rust toolchain the checkout pins (its `rust-toolchain.toml`), else `stable`.
    fn channel(&self) -> String {
        std::fs::read_to_string(self.checkout.join("rust-toolchain.toml"))
            .ok()
            .and_then(|text| toml::from_str::<toml::Table>(&text).ok())
            .and_then(|file| {
                let channel = file.get("toolchain")?.get("channel")?.as_str()?;
                Some(channel.to_owned())
            })
            .unwrap_or_else(|| "stable".to_owned())
    }

    /// The lock file the checkout builds its example plugins with: the versions of the SDK's
    /// dependencies it was tested with (cargo drops the entries a new crate does not use).
    fn lock_file(&self) -> Option<String> {
        std::fs::read_to_string(self.checkout.join("plugins/Cargo.lock")).ok()
    }
}

/// The checkout this llm-worker was built from (the parent of `cli/`).
pub(crate) fn built_from() -> &'static Path {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR"));
    cli.parent().unwrap_or(cli)
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

/// A string as TOML writes it, quoted and escaped.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// The `llm-worker-guest` dependency of the crate at `crate_dir` (absolute, links resolved):
/// a path relative to the crate when it is inside the SDK's checkout (the two move together),
/// else the SDK's absolute path (the crate moves on its own).
fn dependency(crate_dir: &Path, sdk: &Sdk) -> anyhow::Result<String> {
    let path = if crate_dir.starts_with(&sdk.checkout) {
        relative(&sdk.dir, crate_dir)
    } else {
        sdk.dir.clone()
    };
    let path = path.to_str().with_context(|| {
        format!(
            "the SDK's path {} is not UTF-8, which Cargo.toml cannot hold; give another with \
             --sdk",
            sdk.dir.display()
        )
    })?;
    Ok(format!("{{ path = {} }}", toml_string(path)))
}

/// What `new` made: the crate's directory, the SDK it builds against, the toolchain it names.
#[derive(Debug)]
pub(crate) struct Created {
    pub(crate) dir: PathBuf,
    pub(crate) sdk: Sdk,
    pub(crate) channel: String,
}

/// The commands that test, build, call and serve the new crate `name`, from its directory.
pub(crate) fn next_steps(name: &str) -> String {
    let file = name.replace('-', "_");
    format!(
        "cargo test                                      # the tools, natively\n\
         cargo build --release --target wasm32-wasip2    # target/wasm32-wasip2/release/{file}.wasm\n\
         llm-worker call target/wasm32-wasip2/release hello '{{\"name\":\"Ada\"}}'\n\
         llm-worker serve target/wasm32-wasip2/release   # its tools for an MCP client, on stdio\n"
    )
}

/// Creates the crate `name` in `parent`, on the SDK `sdk` (see [`Sdk::find`]).
pub(crate) fn scaffold(parent: &Path, name: &str, sdk: Sdk) -> anyhow::Result<Created> {
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
    let parent = parent
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", parent.display()))?;
    let dir = parent.join(name);
    if dir.exists() {
        bail!("{} exists already; choose another name", dir.display());
    }
    // Cargo builds the crate with what is around it: a directory others may write lets them
    // swap the crate's directory for a link before its mode is set, or put files beside its
    // own; a `.cargo/config.toml` above it is read by every build (a `rustc-wrapper`, a
    // runner: their code, run as the author).
    if let Some(problem) = llm_worker::lock::LockFile::unsafe_directory(&parent) {
        bail!(
            "not making the crate in {}: {problem}; make it in a directory of your own",
            parent.display()
        );
    }
    for above in dir.ancestors().skip(1) {
        for config in [".cargo/config.toml", ".cargo/config"] {
            let config = above.join(config);
            if std::fs::symlink_metadata(&config).is_err() {
                continue;
            }
            if let Some(problem) = llm_worker::lock::LockFile::unsafe_file(&config) {
                bail!(
                    "not making the crate in {}: cargo would read {} when it builds the crate, \
                     and {problem}; make the crate elsewhere, or remove that file",
                    parent.display(),
                    config.display()
                );
            }
        }
    }
    let dependency = dependency(&dir, &sdk)?;
    let channel = sdk.channel();
    // `weather-now` → `WeatherNow`.
    let type_name = name.to_upper_camel_case();
    // The crate's type takes its name: one that is a keyword or a name the generated code uses
    // from the prelude (`string` makes `String`) would not build.
    // So would the types the macros make for the template's tool `hello`.
    const TAKEN: [&str; 14] = [
        "Self",
        "String",
        "Result",
        "Ok",
        "Err",
        "Option",
        "Some",
        "None",
        "Vec",
        "Box",
        "Clone",
        "Default",
        "ToolHello",
        "HelloArgs",
    ];
    if TAKEN.contains(&type_name.as_str()) {
        bail!(
            "{name:?} would name the crate's type `{type_name}`, which the generated code uses \
             for Rust's own or for its tool's; choose another name, e.g. \"{name}-tool\""
        );
    }

    let cargo_toml = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
# The llm-worker SDK (not on crates.io), from the checkout {checkout}.
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
"#,
        // A comment is one line: a checkout's path with a line break in it would end it.
        checkout = llm_worker_rules::tool::OneLine(&sdk.checkout.display().to_string())
    );
    let toolchain = format!(
        "# The Rust this plugin is built with and the WebAssembly target it is built for: rustup\n\
         # installs them on first use in this directory.\n\
         [toolchain]\n\
         channel = {}\n\
         components = [\"rustfmt\", \"clippy\"]\n\
         targets = [\"wasm32-wasip2\"]\n\
         profile = \"minimal\"\n",
        toml_string(&channel)
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
    let readme = format!(
        "# {name}\n\nAn llm-worker tool plugin.\n\n```sh\n{}```\n",
        next_steps(name)
    );
    let files = [
        ("Cargo.toml", cargo_toml),
        ("rust-toolchain.toml", toolchain),
        (".gitignore", "/target\n".to_owned()),
        ("src/lib.rs", lib_rs),
        ("README.md", readme),
    ]
    .into_iter()
    .chain(sdk.lock_file().map(|lock| ("Cargo.lock", lock)));
    // Created anew (never into a directory made meanwhile), and removed again if a file
    // cannot be written: no half a crate.
    // Others may not write them whatever the umask (cargo runs a `build.rs` or a
    // `.cargo/config.toml` runner someone could drop in), and a file is made, never written
    // through a link put at its name.
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o755);
    // Its mode set through the directory made, opened without following a link: never
    // through a link put at its name meanwhile.
    let make_dir = |path: &Path| {
        builder.create(path).and_then(|()| {
            #[cfg(unix)]
            {
                use rustix::fs::{Mode, OFlags};
                let made = rustix::fs::open(
                    path,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                rustix::fs::fchmod(&made, Mode::from_raw_mode(0o755))?;
            }
            Ok(())
        })
    };
    make_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let written = make_dir(&dir.join("src"))
        .with_context(|| format!("cannot create {}", dir.join("src").display()))
        .and_then(|()| {
            files.into_iter().try_for_each(|(file, text)| {
                let path = dir.join(file);
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
                options
                    .open(&path)
                    .and_then(|mut opened| {
                        use std::io::Write as _;
                        opened.write_all(text.as_bytes())?;
                        #[cfg(unix)]
                        opened
                            .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
                        Ok(())
                    })
                    .with_context(|| format!("cannot write {}", path.display()))
            })
        });
    if let Err(error) = written {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(error);
    }
    Ok(Created { dir, sdk, channel })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_sdk_new_says_how_to_get_one() {
        let gone = Path::new("/no/such/checkout");
        let message = format!("{:#}", Sdk::find(None, gone).expect_err("no SDK there"));
        assert!(
            message.contains("built from /no/such/checkout")
                && message.contains("--sdk PATH")
                && message.contains("not on crates.io"),
            "{message}"
        );
        let message = format!("{:#}", Sdk::find(Some(gone), gone).expect_err("none"));
        assert!(message.contains("--sdk /no/such/checkout"), "{message}");
    }

    #[test]
    fn the_sdk_is_a_checkout_or_its_guest_sdk_directory() {
        let checkout = built_from();
        let nowhere = Path::new("/no/such/checkout");
        let given = Sdk::find(Some(checkout), nowhere).expect("a checkout");
        let inside = Sdk::find(Some(&checkout.join("guest-sdk")), nowhere).expect("its SDK");
        let built_in = Sdk::find(None, checkout).expect("this build's checkout");
        assert_eq!(given.dir, inside.dir);
        assert_eq!(given.dir, built_in.dir);
        assert!(given.dir.ends_with("guest-sdk"), "{given:?}");
        // Another crate of the checkout is not the SDK.
        assert!(Sdk::find(Some(&checkout.join("host")), nowhere).is_err());
        // The toolchain the checkout pins.
        let pinned = std::fs::read_to_string(checkout.join("rust-toolchain.toml"))
            .expect("rust-toolchain.toml");
        assert!(
            pinned.contains(&format!("channel = \"{}\"", given.channel())),
            "{pinned}"
        );
    }

    /// The SDK found by where this binary was built is built by the new crate, macros and
    /// rules included (their procedural macros and build scripts run at the user's build): a
    /// file of any of them another user may write is refused, not only the SDK's directory.
    #[cfg(unix)]
    #[test]
    fn the_sdk_found_by_the_build_and_its_sibling_crates_must_be_the_users_alone() {
        use std::os::unix::fs::PermissionsExt;
        let checkout = llm_worker_tests::scratch_dir("new-sdk-checkout");
        for (file, text) in [
            (
                "guest-sdk/Cargo.toml",
                "[package]\nname = \"llm-worker-guest\"\n",
            ),
            ("guest-sdk/src/lib.rs", ""),
            ("guest-macros/src/lib.rs", ""),
            ("rules/src/lib.rs", ""),
        ] {
            let path = checkout.join(file);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, text).expect("write");
        }
        assert!(Sdk::find(None, &checkout).is_ok());
        let macros = checkout.join("guest-macros/src/lib.rs");
        std::fs::set_permissions(&macros, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let message = format!("{:#}", Sdk::find(None, &checkout).expect_err("refused"));
        assert!(
            message.contains("could have been replaced")
                && message.contains("guest-macros/src/lib.rs")
                && message.contains("--sdk PATH"),
            "{message}"
        );
        std::fs::set_permissions(&macros, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        // The workspace's manifest, which says where the crates' dependencies come from.
        let manifest = checkout.join("Cargo.toml");
        std::fs::write(&manifest, "[workspace]\n").expect("write");
        assert!(Sdk::find(None, &checkout).is_ok());
        std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let message = format!("{:#}", Sdk::find(None, &checkout).expect_err("refused"));
        assert!(message.contains("Cargo.toml"), "{message}");
        // Named by the user with --sdk, it is theirs to judge.
        assert!(Sdk::find(Some(&checkout), Path::new("/nowhere")).is_ok());
    }

    #[test]
    fn the_dependency_is_relative_inside_the_checkout_only() {
        let sdk = Sdk {
            dir: PathBuf::from("/src/llm-worker/guest-sdk"),
            checkout: PathBuf::from("/src/llm-worker"),
        };
        let inside = dependency(Path::new("/src/llm-worker/plugins/mine"), &sdk);
        assert_eq!(
            inside.ok().as_deref(),
            Some(r#"{ path = "../../guest-sdk" }"#)
        );
        let outside = dependency(Path::new("/home/ada/mine"), &sdk);
        assert_eq!(
            outside.ok().as_deref(),
            Some(r#"{ path = "/src/llm-worker/guest-sdk" }"#)
        );
    }
}
