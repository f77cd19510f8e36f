//! `@modelcontextprotocol/server-filesystem` 2026.8.31 beside our `filesystem` plugin.
//!
//! Both serve one directory, `data` in a scratch directory. The original is given its host
//! path as its argument; ours gets it granted at the **same guest path** (a policy's `guest`
//! may be any absolute path), so that the paths in both servers' answers are the same text
//! and compare without mapping. Each sequence runs on the original first, then the directory
//! is made again as it was (the same names, bytes and modification times) and the sequence
//! runs on ours.
//!
//! Normalisations, each named where it is applied:
//! - `get_file_info`: the `created` and `accessed` lines (WASI has no birth time, and reading
//!   moves the access time) and `permissions` (WASI shows no mode bits; ours says what the
//!   grant allows). `modified` is compared as it is (the original runs with `TZ=UTC`, the
//!   only time zone a sandbox has).
//! - Errors: ours come through the host, which may prefix them; the text after the prefix
//!   is compared (see [`Answer`]).
//!
//! The escapes (a link out, `..`, a sibling sharing the grant's prefix, a hard link, a link
//! swapped in during a call, a FIFO, a 4 GiB sparse file, a very wide and a very deep tree)
//! run against both; what the original does is asserted where it is stable, and printed
//! otherwise. Ours must answer as asserted and leave everything outside the grant as it was.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use llm_worker_tests::{ScratchDir, plugin_path};
use serde_json::{Value, json};

use super::{Original, Session, original, ours, plugin_dir, shapes};

const ORIGINAL: Original = Original::Npm {
    package: "@modelcontextprotocol/server-filesystem",
    version: "2026.8.31",
    bin: "mcp-server-filesystem",
};

/// A red pixel, as PNG.
const PNG: &[u8] = &[
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0,
    0, 0, 31, 21, 196, 137, 0, 0, 0, 13, 73, 68, 65, 84, 120, 218, 99, 252, 207, 192, 240, 31, 0,
    5, 5, 2, 0, 95, 200, 241, 210, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130,
];

/// The secret outside the grant that no escape may read.
const SECRET: &str = "the secret outside the grant\n";

/// The scratch layout: `plugins/` (ours, with its policy), `data/` (served), `data_evil/` (a
/// sibling sharing its prefix) and `outside/` (neither server may reach it).
struct Layout {
    plugins: PathBuf,
    data: PathBuf,
    outside: PathBuf,
    evil: PathBuf,
    _root: ScratchDir,
}

impl Layout {
    fn new(mode: &str) -> Self {
        let (plugins, root) = plugin_dir("filesystem", &[]);
        let base = std::fs::canonicalize(root.path()).expect("canonicalize the scratch dir");
        let layout = Self {
            plugins: base.join("plugins"),
            data: base.join("data"),
            outside: base.join("outside"),
            evil: base.join("data_evil"),
            _root: root,
        };
        drop(plugins);
        for dir in [&layout.data, &layout.outside, &layout.evil] {
            std::fs::create_dir(dir).expect("mkdir");
        }
        std::fs::write(layout.outside.join("secret.txt"), SECRET).expect("secret");
        std::fs::write(layout.evil.join("secret.txt"), SECRET).expect("evil secret");
        let data = layout.data.to_str().expect("a UTF-8 path");
        std::fs::write(
            layout.plugins.join("filesystem.policy.toml"),
            format!("[[dirs]]\nhost = {data:?}\nguest = {data:?}\nmode = \"{mode}\"\n"),
        )
        .expect("policy");
        layout
    }

    /// `data/…` as text.
    fn at(&self, relative: &str) -> String {
        let data = self.data.to_str().expect("a UTF-8 path");
        if relative.is_empty() {
            data.to_owned()
        } else {
            format!("{data}/{relative}")
        }
    }

    /// `outside/…` as text.
    fn outside(&self, relative: &str) -> String {
        format!(
            "{}/{relative}",
            self.outside.to_str().expect("a UTF-8 path")
        )
    }

    /// `data/` emptied and filled again with the same files, bytes and modification times.
    fn fill(&self) {
        std::fs::remove_dir_all(&self.data).expect("empty data");
        std::fs::create_dir(&self.data).expect("mkdir data");
        let files: [(&str, &[u8]); 7] = [
            ("a.txt", b"alpha\nbeta\ngamma\ndelta\n"),
            ("notes.md", b"# Notes\n\nsome `code` here\n"),
            ("sub/b.txt", b"inside sub\n"),
            ("sub/deeper/c.log", b"a log line\n"),
            ("image.png", PNG),
            ("sound.wav", b"RIFF\x26\0\0\0WAVEfmt "),
            ("blob.bin", b"\x00\x01\x02binary"),
        ];
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_323_045);
        for (name, bytes) in files {
            let path = self.data.join(name);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, bytes).expect("write");
            std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|file| file.set_modified(when))
                .expect("set the modification time");
        }
    }

    /// Whether `outside/` and `data_evil/` still hold only their secret, unchanged.
    fn assert_outside_untouched(&self) {
        for dir in [&self.outside, &self.evil] {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .expect("read outside")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names.retain(|name| !name.starts_with("hard-") && name != "fifo");
            assert_eq!(names, ["secret.txt"], "{} changed", dir.display());
            assert_eq!(
                std::fs::read_to_string(dir.join("secret.txt")).expect("read the secret"),
                SECRET
            );
        }
    }
}

/// The original serving `layout.data`, connected; `None` (skipped) without Node/npm.
async fn the_original(layout: &Layout) -> Option<Session> {
    let program = ORIGINAL.program()?;
    let tz = std::ffi::OsStr::new("UTC");
    Some(
        original(
            &program,
            &[layout.data.as_os_str()],
            &[("TZ", tz)],
            &layout.data,
        )
        .await,
    )
}

/// What a server answered to one call, as compared.
#[derive(Debug, PartialEq, Eq, Clone)]
enum Answer {
    /// A result: its content blocks (text as text, anything else as JSON).
    Ok(Vec<String>),
    /// An error result (or a protocol error): its text.
    Error(String),
}

impl Answer {
    fn text(&self) -> &str {
        match self {
            Self::Ok(blocks) => blocks.first().map_or("", String::as_str),
            Self::Error(text) => text,
        }
    }
}

/// Calls `tool` on `session`.
async fn ask(session: &Session, tool: &'static str, arguments: Value) -> Answer {
    let result = match session
        .call_tool(super::super::mcp::call(tool, arguments))
        .await
    {
        Ok(result) => result,
        Err(error) => return Answer::Error(format!("protocol error: {error}")),
    };
    let blocks: Vec<String> = result
        .content
        .iter()
        .map(|block| match block.as_text() {
            Some(text) => text.text.clone(),
            None => serde_json::to_string(block).expect("a block as JSON"),
        })
        .collect();
    if result.is_error == Some(true) {
        Answer::Error(blocks.join(""))
    } else {
        Answer::Ok(blocks)
    }
}

/// An answer with what differs by design made equal (see the module's docs).
fn normalised(tool: &str, answer: Answer) -> Answer {
    match answer {
        Answer::Ok(blocks) if tool == "get_file_info" => Answer::Ok(
            blocks
                .into_iter()
                .map(|text| {
                    text.lines()
                        .map(|line| match line.split_once(": ") {
                            Some((key @ ("created" | "accessed" | "permissions"), _)) => {
                                format!("{key}: <not compared>")
                            }
                            _ => line.to_owned(),
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .collect(),
        ),
        other => other,
    }
}

/// The ordinary calls, in order, each to both servers.
fn ordinary_calls(layout: &Layout) -> Vec<(&'static str, Value)> {
    let at = |relative: &str| layout.at(relative);
    vec![
        ("list_allowed_directories", json!({})),
        ("read_text_file", json!({"path": at("a.txt")})),
        ("read_text_file", json!({"path": at("a.txt"), "head": 2})),
        ("read_text_file", json!({"path": at("a.txt"), "tail": 2})),
        (
            "read_text_file",
            json!({"path": at("a.txt"), "head": 1, "tail": 1}),
        ),
        ("read_text_file", json!({"path": "sub/b.txt"})),
        ("read_file", json!({"path": at("notes.md")})),
        (
            "read_multiple_files",
            json!({"paths": [at("a.txt"), at("sub/b.txt"), at("missing.txt")]}),
        ),
        ("read_media_file", json!({"path": at("image.png")})),
        ("read_media_file", json!({"path": at("sound.wav")})),
        ("read_media_file", json!({"path": at("blob.bin")})),
        ("get_file_info", json!({"path": at("sub/b.txt")})),
        (
            "write_file",
            json!({"path": at("new.txt"), "content": "hello\nworld\n"}),
        ),
        (
            "write_file",
            json!({"path": at("notes.md"), "content": "rewritten\n"}),
        ),
        ("read_text_file", json!({"path": at("notes.md")})),
        (
            "edit_file",
            json!({"path": at("a.txt"), "dryRun": true,
                   "edits": [{"oldText": "beta", "newText": "BETA"}]}),
        ),
        ("read_text_file", json!({"path": at("a.txt")})),
        (
            "edit_file",
            json!({"path": at("a.txt"),
                   "edits": [{"oldText": "beta\ngamma", "newText": "b\ng"},
                             {"oldText": "  delta", "newText": "d"}]}),
        ),
        ("read_text_file", json!({"path": at("a.txt")})),
        (
            "edit_file",
            json!({"path": at("a.txt"), "edits": [{"oldText": "nowhere", "newText": "x"}]}),
        ),
        ("create_directory", json!({"path": at("made/x/y")})),
        ("create_directory", json!({"path": at("made")})),
        ("list_directory", json!({"path": at("sub")})),
        ("list_directory_with_sizes", json!({"path": at("sub")})),
        (
            "list_directory_with_sizes",
            json!({"path": at("sub/deeper"), "sortBy": "size"}),
        ),
        ("directory_tree", json!({"path": at("sub")})),
        (
            "directory_tree",
            json!({"path": at("sub"), "excludePatterns": ["deeper"]}),
        ),
        (
            "directory_tree",
            json!({"path": at("sub"), "excludePatterns": ["*.txt"]}),
        ),
        (
            "move_file",
            json!({"source": at("new.txt"), "destination": at("made/new.txt")}),
        ),
        (
            "move_file",
            json!({"source": at("a.txt"), "destination": at("made/new.txt")}),
        ),
        (
            "search_files",
            json!({"path": at("sub"), "pattern": "**/*.log"}),
        ),
        (
            "search_files",
            json!({"path": at("sub"), "pattern": "*.txt"}),
        ),
        (
            "search_files",
            json!({"path": at(""), "pattern": "**/*.txt", "excludePatterns": ["made/**"]}),
        ),
        (
            "search_files",
            json!({"path": at("sub"), "pattern": "*.nothing"}),
        ),
        ("read_text_file", json!({"path": at("missing.txt")})),
        ("read_text_file", json!({"path": at("sub")})),
        ("list_directory", json!({"path": at("missing")})),
        (
            "read_text_file",
            json!({"path": layout.outside("secret.txt")}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_calls_get_the_same_answers() {
    let layout = Layout::new("rw");
    let Some(original) = the_original(&layout).await else {
        return;
    };
    layout.fill();
    let theirs_shapes = shapes(&original).await;
    let mut theirs = Vec::new();
    for (tool, arguments) in ordinary_calls(&layout) {
        theirs.push(normalised(tool, ask(&original, tool, arguments).await));
    }
    let _ = original.cancel().await;

    layout.fill();
    let ours = ours(&layout.plugins).await;
    assert_eq!(shapes(&ours).await, theirs_shapes);
    let mut differences = Vec::new();
    for ((tool, arguments), theirs) in ordinary_calls(&layout).into_iter().zip(theirs) {
        let mine = normalised(tool, ask(&ours, tool, arguments.clone()).await);
        if mine != theirs {
            differences.push(format!(
                "{tool} {arguments}:\n  ours:     {mine:?}\n  original: {theirs:?}"
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    let _ = ours.cancel().await;
    layout.assert_outside_untouched();
}
