//! The contract's versions are written as literals where a constant cannot go (the paths
//! `wit-bindgen` and `wasmtime::component::bindgen!` read): check those against
//! [`llm_worker_rules::contract`].

use std::path::{Path, PathBuf};

use llm_worker_rules::contract::{CURRENT, PACKAGE, VERSIONS, WORLD};

/// The repository, from where cargo runs the test (read at run time: a test binary reused
/// from a build elsewhere, as a shared target directory allows, must not look there).
fn repo() -> PathBuf {
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).to_owned());
    crate_dir.join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn every_version_has_its_wit_package() {
    for version in VERSIONS {
        let wit = read(&format!("wit/{version}/tool.wit"));
        assert!(
            wit.contains(&format!("package {PACKAGE}@{version};")),
            "wit/{version}/tool.wit is not the package {PACKAGE}@{version}"
        );
        assert!(
            wit.contains(&format!("world {WORLD} ")),
            "wit/{version}: no world {WORLD}"
        );
    }
}

#[test]
fn the_host_binds_every_version_and_the_guest_the_current_one() {
    let host = read("host/src/plugin/bindings.rs");
    for version in VERSIONS {
        assert!(
            host.contains(&format!("path: \"../wit/{version}\"")),
            "host/src/plugin/bindings.rs does not bind wit/{version}"
        );
    }
    let guest = read("guest-sdk/src/export/bindings.rs");
    assert!(
        guest.contains(&format!("path: \"../wit/{CURRENT}\"")),
        "guest-sdk/src/export/bindings.rs does not build against wit/{CURRENT}"
    );
}
