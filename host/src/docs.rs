//! The guides of the repository's `docs/` that hold Rust code, included so that
//! `cargo test --doc` compiles every Rust block of them (and runs those not marked `no_run`):
//! a guide's code cannot fall behind the API. Only built for tests.

/// `docs/embedding.md`: embedding the library in an agent.
#[cfg(doctest)]
#[doc = include_str!("../../docs/embedding.md")]
pub struct EmbeddingGuide;

/// `docs/plugins.md`: writing a tool plugin.
#[cfg(doctest)]
#[doc = include_str!("../../docs/plugins.md")]
pub struct PluginsGuide;

/// `docs/hosting.md`: the tool API, plugins in process, the instance pool, MCP in code.
#[cfg(all(doctest, feature = "mcp-http"))]
#[doc = include_str!("../../docs/hosting.md")]
pub struct HostingGuide;

#[cfg(test)]
mod tests {
    const EMBEDDING: &str = include_str!("../../docs/embedding.md");

    #[test]
    fn the_embedders_guide_links_every_example() {
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let mut names: Vec<String> = std::fs::read_dir(&examples)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", examples.display()))
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|name| name.ends_with(".rs"))
            .collect();
        names.sort();
        assert!(!names.is_empty(), "no examples in {}", examples.display());
        let unlinked: Vec<&String> = names
            .iter()
            .filter(|name| !EMBEDDING.contains(&format!("](../host/examples/{name})")))
            .collect();
        assert!(
            unlinked.is_empty(),
            "docs/embedding.md links no {unlinked:?}: give each example its line under Examples"
        );
    }
}
