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

use llm_worker_tests::{ScratchDir, compiled_cache};
use serde_json::{Value, json};

use llm_worker_tests::reference::original;

use super::{Original, Session, call_text, ours, plugin_dir, program, shapes};

const ORIGINAL: Original = llm_worker_tests::reference::FILESYSTEM;

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
    _in_memory: Option<InMemory>,
}

/// A directory in memory (`/dev/shm`), removed when dropped: where making 100,000 entries
/// takes a fraction of a second rather than many on a busy disk.
struct InMemory(PathBuf);

impl InMemory {
    fn new() -> Option<Self> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = shm.join(format!(
            "llm-worker-tests-filesystem-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).ok()?;
        Some(Self(std::fs::canonicalize(&dir).ok()?))
    }
}

impl Drop for InMemory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Layout {
    fn new(mode: &str) -> Self {
        Self::with_data_in(mode, None)
    }

    /// The layout with `data/`, `data_evil/` and `outside/` in memory where the system has a
    /// memory file system (the plugin directory stays in the scratch directory).
    fn in_memory(mode: &str) -> Self {
        Self::with_data_in(mode, InMemory::new())
    }

    fn with_data_in(mode: &str, in_memory: Option<InMemory>) -> Self {
        let (plugins, root) = plugin_dir("filesystem", &[]);
        let base = std::fs::canonicalize(root.path()).expect("canonicalize the scratch dir");
        let data_base = in_memory
            .as_ref()
            .map_or_else(|| base.clone(), |dir| dir.0.clone());
        let layout = Self {
            plugins: base.join("plugins"),
            data: data_base.join("data"),
            outside: data_base.join("outside"),
            evil: data_base.join("data_evil"),
            _root: root,
            _in_memory: in_memory,
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
    let program = program(ORIGINAL)?;
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
    let (listed, is_error) = call_text(&ours, "list_allowed_directories", json!({}))
        .await
        .expect("tools/call");
    assert_eq!(
        (listed, is_error),
        (format!("Allowed directories:\n{}", layout.at("")), false)
    );
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

/// Both servers' answers to `calls`: the original's (on a freshly filled `data/`, with
/// `prepare` run after filling), then ours (the same), each followed by a check that nothing
/// outside the grant changed. `None` when the original cannot be installed.
async fn both(
    layout: &Layout,
    calls: &[(&'static str, Value)],
    prepare: &dyn Fn(&Layout),
) -> Option<Vec<(Answer, Answer)>> {
    layout.fill();
    prepare(layout);
    let original = the_original(layout).await?;
    let mut theirs = Vec::new();
    for (tool, arguments) in calls {
        theirs.push(normalised(
            tool,
            ask(&original, tool, arguments.clone()).await,
        ));
    }
    let _ = original.cancel().await;
    layout.assert_outside_untouched();
    layout.fill();
    prepare(layout);
    let session = ours(&layout.plugins).await;
    let mut mine = Vec::new();
    for (tool, arguments) in calls {
        mine.push(normalised(
            tool,
            ask(&session, tool, arguments.clone()).await,
        ));
    }
    let _ = session.cancel().await;
    layout.assert_outside_untouched();
    Some(theirs.into_iter().zip(mine).collect())
}

/// Prints the answers as a table: call, the original's, ours.
fn print_table(calls: &[(&'static str, Value)], answers: &[(Answer, Answer)], layout: &Layout) {
    let base = layout.data.parent().expect("the scratch dir");
    let short = |text: &str| {
        let text = text.replace(base.to_str().expect("UTF-8"), "…");
        let text: String = text.chars().take(140).collect();
        text.replace('\n', "⏎")
    };
    for ((tool, arguments), (theirs, mine)) in calls.iter().zip(answers) {
        eprintln!(
            "| {tool} {} | {:?} | {:?} |",
            short(&arguments.to_string()),
            short(&format!("{theirs:?}")),
            short(&format!("{mine:?}"))
        );
    }
}

/// Every path argument with `..` out of the grant, a sibling sharing its prefix
/// (`data_evil`), and links inside it leading out: both servers refuse each with the same
/// "Access denied" text, and nothing outside is read or changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dots_siblings_and_links_out_are_refused_by_both() {
    let layout = Layout::new("rw");
    let up = |rest: &str| layout.at(&format!("../outside/{rest}"));
    let evil = |rest: &str| format!("{}/{rest}", layout.evil.to_str().expect("UTF-8"));
    let calls: Vec<(&'static str, Value)> = vec![
        ("read_text_file", json!({"path": up("secret.txt")})),
        ("read_text_file", json!({"path": "../outside/secret.txt"})),
        ("read_file", json!({"path": up("secret.txt")})),
        ("read_media_file", json!({"path": up("secret.txt")})),
        ("read_multiple_files", json!({"paths": [up("secret.txt")]})),
        ("write_file", json!({"path": up("new.txt"), "content": "x"})),
        (
            "edit_file",
            json!({"path": up("secret.txt"), "edits": [{"oldText": "secret", "newText": "x"}]}),
        ),
        ("create_directory", json!({"path": up("made")})),
        ("list_directory", json!({"path": up("")})),
        ("list_directory_with_sizes", json!({"path": up("")})),
        ("directory_tree", json!({"path": up("")})),
        (
            "move_file",
            json!({"source": up("secret.txt"), "destination": layout.at("got.txt")}),
        ),
        (
            "move_file",
            json!({"source": layout.at("a.txt"), "destination": up("moved.txt")}),
        ),
        ("search_files", json!({"path": up(""), "pattern": "**"})),
        ("get_file_info", json!({"path": up("secret.txt")})),
        ("read_text_file", json!({"path": evil("secret.txt")})),
        ("list_directory", json!({"path": evil("")})),
        (
            "write_file",
            json!({"path": evil("new.txt"), "content": "x"}),
        ),
        ("read_text_file", json!({"path": layout.at("link-out")})),
        (
            "read_text_file",
            json!({"path": layout.at("link-relative")}),
        ),
        (
            "read_text_file",
            json!({"path": layout.at("dir-out/secret.txt")}),
        ),
        ("list_directory", json!({"path": layout.at("dir-out")})),
        (
            "write_file",
            json!({"path": layout.at("link-out"), "content": "pwned"}),
        ),
        (
            "write_file",
            json!({"path": layout.at("dir-out/new.txt"), "content": "pwned"}),
        ),
        (
            "edit_file",
            json!({"path": layout.at("link-out"), "edits": [{"oldText": "secret", "newText": "x"}]}),
        ),
        ("get_file_info", json!({"path": layout.at("link-out")})),
        (
            "search_files",
            json!({"path": layout.at("dir-out"), "pattern": "**"}),
        ),
    ];
    let links = |layout: &Layout| {
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, layout.data.join(name)).expect("symlink");
        };
        link(&layout.outside.join("secret.txt"), "link-out");
        link(Path::new("../outside/secret.txt"), "link-relative");
        link(&layout.outside, "dir-out");
    };
    let Some(answers) = both(&layout, &calls, &links).await else {
        return;
    };
    print_table(&calls, &answers, &layout);
    for ((tool, arguments), (theirs, mine)) in calls.iter().zip(&answers) {
        let refused = match mine {
            Answer::Error(text) => text.starts_with("Access denied - "),
            // Each file's failure is told in the answer.
            Answer::Ok(_) => {
                *tool == "read_multiple_files" && mine.text().contains(": Error - Access denied - ")
            }
        };
        assert!(refused, "ours let {tool} {arguments} through: {mine:?}");
        assert!(!mine.text().contains(SECRET.trim()), "{mine:?}");
        if mine != theirs {
            // A link to an absolute path outside: the sandbox does not even show the plugin
            // its target, so ours cannot name it as the original does.
            let link = "Access denied - symlink target outside allowed directories: ";
            let sandbox = "Access denied - the sandbox refuses to look at ";
            assert!(
                theirs.text().starts_with(link) && mine.text().starts_with(sandbox),
                "{tool} {arguments}:\n  ours:     {mine:?}\n  original: {theirs:?}"
            );
        }
    }
}

/// What the two servers show of links out in a listing with sizes: the original `stat`s
/// through a link, so it shows the size of the file outside; ours cannot reach it (the
/// sandbox does not follow a link out of the grant) and shows 0, as the original does for
/// any entry it cannot `stat`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_with_sizes_does_not_show_the_size_of_a_file_outside() {
    let layout = Layout::new("rw");
    let calls: Vec<(&'static str, Value)> = vec![(
        "list_directory_with_sizes",
        json!({"path": layout.at("sub")}),
    )];
    let link = |layout: &Layout| {
        std::os::unix::fs::symlink(
            layout.outside.join("secret.txt"),
            layout.data.join("sub/link-out"),
        )
        .expect("symlink");
    };
    let Some(answers) = both(&layout, &calls, &link).await else {
        return;
    };
    print_table(&calls, &answers, &layout);
    let (theirs, mine) = &answers[0];
    let secret_size = format!("{} B", SECRET.len());
    let line = |answer: &Answer| {
        answer
            .text()
            .lines()
            .find(|line| line.contains("link-out"))
            .map(str::to_owned)
            .expect("the link is listed")
    };
    assert!(line(theirs).ends_with(&secret_size), "{theirs:?}");
    assert!(line(mine).ends_with(" 0 B"), "{mine:?}");
}

/// A hard link the operator made inside the grant to a file outside is that file (the same
/// inode): the sandbox cannot tell it from any other file of the grant, so both servers read
/// it. Writing and editing replace the link with a new file (a temporary renamed over it), so
/// the file outside keeps its contents in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_link_out_is_read_but_writes_replace_it() {
    let layout = Layout::new("rw");
    let target = layout.outside.join("hard-target.txt");
    let calls: Vec<(&'static str, Value)> = vec![
        ("read_text_file", json!({"path": layout.at("hard.txt")})),
        (
            "write_file",
            json!({"path": layout.at("hard.txt"), "content": "replaced\n"}),
        ),
        ("read_text_file", json!({"path": layout.at("hard.txt")})),
        ("read_text_file", json!({"path": layout.at("hard2.txt")})),
        (
            "edit_file",
            json!({"path": layout.at("hard2.txt"),
                   "edits": [{"oldText": "outside", "newText": "edited"}]}),
        ),
    ];
    let hard_target = target.clone();
    let hard = move |layout: &Layout| {
        std::fs::write(&hard_target, "hard-linked from outside\n").expect("write");
        let _ = std::fs::remove_file(layout.outside.join("hard-target2.txt"));
        std::fs::write(
            layout.outside.join("hard-target2.txt"),
            "hard-linked from outside\n",
        )
        .expect("write");
        std::fs::hard_link(&hard_target, layout.data.join("hard.txt")).expect("hard link");
        std::fs::hard_link(
            layout.outside.join("hard-target2.txt"),
            layout.data.join("hard2.txt"),
        )
        .expect("hard link");
    };
    let Some(answers) = both(&layout, &calls, &hard).await else {
        return;
    };
    print_table(&calls, &answers, &layout);
    for (theirs, mine) in &answers {
        assert_eq!(mine, theirs);
    }
    assert_eq!(answers[0].1.text(), "hard-linked from outside\n");
    assert_eq!(answers[2].1.text(), "replaced\n");
    assert!(answers[4].1.text().contains("+hard-linked from edited"));
    // Ours ran last: the files outside kept their contents.
    for name in ["hard-target.txt", "hard-target2.txt"] {
        assert_eq!(
            std::fs::read_to_string(layout.outside.join(name)).expect("read"),
            "hard-linked from outside\n"
        );
    }
}

/// The second wall: a tool that uses a path with no check at all (the trapper fixture's
/// `read_file`, `write_file`, `list_dir`, plain `std::fs`), granted the same directory, is
/// what a check lost to a race amounts to. The sandbox refuses every way out: `..`, a link to
/// an absolute path outside, a relative link climbing out, a directory link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_holds_even_without_the_check() {
    let layout = Layout::new("rw");
    layout.fill();
    std::os::unix::fs::symlink(
        layout.outside.join("secret.txt"),
        layout.data.join("link-out"),
    )
    .expect("symlink");
    std::os::unix::fs::symlink("../outside/secret.txt", layout.data.join("link-relative"))
        .expect("symlink");
    std::os::unix::fs::symlink(&layout.outside, layout.data.join("dir-out")).expect("symlink");
    let data = layout.at("");
    let (plugins, _root) = plugin_dir(
        "trapper",
        &[(
            "trapper.policy.toml",
            &format!("[[dirs]]\nhost = {data:?}\nguest = {data:?}\nmode = \"rw\"\n"),
        )],
    );
    let session = ours(&plugins).await;
    let inside = ask(&session, "read_file", json!({"path": layout.at("a.txt")})).await;
    assert_eq!(
        inside,
        Answer::Ok(vec!["alpha\nbeta\ngamma\ndelta\n".into()])
    );
    for (tool, arguments) in [
        (
            "read_file",
            json!({"path": layout.at("../outside/secret.txt")}),
        ),
        ("read_file", json!({"path": layout.at("link-out")})),
        ("read_file", json!({"path": layout.at("link-relative")})),
        (
            "read_file",
            json!({"path": layout.at("dir-out/secret.txt")}),
        ),
        ("list_dir", json!({"path": layout.at("dir-out")})),
        (
            "write_file",
            json!({"path": layout.at("link-out"), "text": "pwned"}),
        ),
        (
            "write_file",
            json!({"path": layout.at("dir-out/new.txt"), "text": "pwned"}),
        ),
        (
            "write_file",
            json!({"path": layout.at("../outside/new.txt"), "text": "pwned"}),
        ),
    ] {
        let answer = ask(&session, tool, arguments.clone()).await;
        eprintln!("unchecked {tool} {arguments}: {answer:?}");
        assert!(
            matches!(answer, Answer::Error(_)),
            "{tool} {arguments}: {answer:?}"
        );
        assert!(!answer.text().contains(SECRET.trim()), "{answer:?}");
    }
    let _ = session.cancel().await;
    layout.assert_outside_untouched();
}

/// A path swapped between a file inside and a link out while calls run: the original checks
/// the path and then opens it by path again, so it may read through a link that came in
/// between (counted and printed); ours opens through the sandbox, so no outcome leaves the
/// grant, however the race falls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_swapped_in_during_calls_never_leads_ours_out() {
    const CALLS: usize = 200;
    let layout = Layout::new("rw");
    layout.fill();
    let swapper = |layout: &Layout, stop: Arc<AtomicBool>| {
        let data = layout.data.clone();
        let secret = layout.outside.join("secret.txt");
        std::thread::spawn(move || {
            let swap = data.join("swap");
            let (file, link) = (data.join(".swap-file"), data.join(".swap-link"));
            while !stop.load(Ordering::Relaxed) {
                std::fs::write(&file, "inside\n").expect("write");
                std::fs::rename(&file, &swap).expect("rename the file in");
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(&secret, &link).expect("symlink");
                std::fs::rename(&link, &swap).expect("rename the link in");
            }
        })
    };
    let tally = |answers: &[Answer]| {
        let leaked = answers
            .iter()
            .filter(|a| a.text().contains(SECRET.trim()))
            .count();
        let inside = answers.iter().filter(|a| a.text() == "inside\n").count();
        (leaked, inside, answers.len() - leaked - inside)
    };
    let path = json!({"path": layout.at("swap")});

    if let Some(original) = the_original(&layout).await {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = swapper(&layout, stop.clone());
        let mut answers = Vec::new();
        for _ in 0..CALLS {
            answers.push(ask(&original, "read_text_file", path.clone()).await);
        }
        stop.store(true, Ordering::Relaxed);
        thread.join().expect("the swapper");
        let (leaked, inside, refused) = tally(&answers);
        eprintln!(
            "original, {CALLS} reads of a path swapped with a link out: {leaked} read the \
             secret, {inside} read the file inside, {refused} refused or failed"
        );
        let _ = original.cancel().await;
    }

    let session = ours(&layout.plugins).await;
    let stop = Arc::new(AtomicBool::new(false));
    let thread = swapper(&layout, stop.clone());
    let mut answers = Vec::new();
    for _ in 0..CALLS {
        answers.push(ask(&session, "read_text_file", path.clone()).await);
    }
    stop.store(true, Ordering::Relaxed);
    thread.join().expect("the swapper");
    let (leaked, inside, refused) = tally(&answers);
    eprintln!(
        "ours, {CALLS} reads of a path swapped with a link out: {leaked} read the secret, \
         {inside} read the file inside, {refused} refused or failed"
    );
    assert_eq!(leaked, 0, "{answers:?}");
    for answer in &answers {
        assert!(
            answer.text() == "inside\n" || matches!(answer, Answer::Error(_)),
            "{answer:?}"
        );
    }
    let _ = session.cancel().await;
    layout.assert_outside_untouched();
}

/// A FIFO in the grant: the original opens it and waits for a writer (its answer comes only
/// once the test writes to it); ours refuses it at once, before opening it, as it is not a
/// regular file, and still describes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_does_not_hold_our_call() {
    let layout = Layout::new("rw");
    layout.fill();
    let fifo = layout.data.join("fifo");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .expect("mkfifo");
    let path = json!({"path": layout.at("fifo")});

    if let Some(original) = the_original(&layout).await {
        let waiting = ask(&original, "read_text_file", path.clone());
        let writer = async {
            // Opening for writing without blocking succeeds only once a reader has it open.
            let opened =
                llm_worker_tests::wait::eventually("the original to open the FIFO", || {
                    use std::os::unix::fs::OpenOptionsExt;
                    let file = std::fs::OpenOptions::new()
                        .write(true)
                        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                        .open(&fifo)
                        .ok();
                    std::future::ready(file)
                })
                .await;
            use std::io::Write;
            (&opened)
                .write_all(b"from the writer\n")
                .expect("write the FIFO");
            drop(opened);
        };
        let (answer, ()) = tokio::join!(waiting, writer);
        eprintln!("original, read_text_file of a FIFO: {answer:?} (once a writer came)");
        assert_eq!(answer, Answer::Ok(vec!["from the writer\n".into()]));
        let _ = original.cancel().await;
    }

    let session = ours(&layout.plugins).await;
    for tool in ["read_text_file", "read_media_file", "read_file"] {
        let answer = ask(&session, tool, path.clone()).await;
        eprintln!("ours, {tool} of a FIFO: {answer:?}");
        assert_eq!(
            answer,
            Answer::Error(format!(
                "{} is not a regular file (a FIFO, socket or device): reading it could wait \
                 forever, so this server reads regular files only",
                layout.at("fifo")
            ))
        );
    }
    let edit = ask(
        &session,
        "edit_file",
        json!({"path": layout.at("fifo"), "edits": [], "dryRun": true}),
    )
    .await;
    assert!(matches!(edit, Answer::Error(text) if text.contains("not a regular file")));
    let info = ask(&session, "get_file_info", path.clone()).await;
    assert!(info.text().contains("isFile: false"), "{info:?}");
    let _ = session.cancel().await;
}

/// A 4 GiB sparse file: ours refuses every read of it past its read limit (a whole read, the
/// first line, the last line, as media, among several), saying how big it is and what to do,
/// and goes on serving. The original refuses a whole read (Node reads no file over 2 GiB into
/// a string); its `head`, `tail` and media reads are not run: they would gather the 4 GiB
/// looking for a line feed, or into one buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4_gib_sparse_file_is_refused_clearly() {
    let layout = Layout::new("rw");
    layout.fill();
    let huge = layout.data.join("huge.bin");
    std::fs::File::create(&huge)
        .and_then(|file| file.set_len(4 << 30))
        .expect("a sparse file");
    let path = json!({"path": layout.at("huge.bin")});

    if let Some(original) = the_original(&layout).await {
        let answer = ask(&original, "read_text_file", path.clone()).await;
        eprintln!("original, read_text_file of a 4 GiB file: {answer:?}");
        assert!(
            matches!(&answer, Answer::Error(text) if text.contains("4294967296")),
            "{answer:?}"
        );
        let _ = original.cancel().await;
    }

    let session = ours(&layout.plugins).await;
    let too_big = format!(
        "{} is 4294967296 bytes, over the 1000000 bytes this server reads at once \
         (FILESYSTEM_MAX_BYTES): read part of it with head or tail",
        layout.at("huge.bin")
    );
    assert_eq!(
        ask(&session, "read_text_file", path.clone()).await,
        Answer::Error(too_big.clone())
    );
    assert_eq!(
        ask(&session, "read_media_file", path.clone()).await,
        Answer::Error(too_big.clone())
    );
    let several = ask(
        &session,
        "read_multiple_files",
        json!({"paths": [layout.at("huge.bin")]}),
    )
    .await;
    assert_eq!(
        several,
        Answer::Ok(vec![format!(
            "{}: Error - {too_big}",
            layout.at("huge.bin")
        )])
    );
    for (end, words) in [("head", "first"), ("tail", "last")] {
        let answer = ask(
            &session,
            "read_text_file",
            json!({"path": layout.at("huge.bin"), end: 1}),
        )
        .await;
        assert_eq!(
            answer,
            Answer::Error(format!(
                "{}: its {words} lines are longer than the 1000000 bytes this server reads at \
                 once (FILESYSTEM_MAX_BYTES); ask for fewer lines",
                layout.at("huge.bin")
            ))
        );
    }
    let info = ask(&session, "get_file_info", path.clone()).await;
    assert!(info.text().starts_with("size: 4294967296\n"), "{info:?}");
    let still = ask(
        &session,
        "read_text_file",
        json!({"path": layout.at("a.txt")}),
    )
    .await;
    assert_eq!(
        still,
        Answer::Ok(vec!["alpha\nbeta\ngamma\ndelta\n".into()])
    );
    let _ = session.cancel().await;
}

/// A directory of 100,000 entries and a chain of directories as deep as the kernel lets a
/// path name go: ours lists the first 10,000 entries and says it stopped, and its walks stop
/// at the entry or depth limit with a message; the original lists everything (its size is
/// printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn very_wide_and_very_deep_trees_stop_with_a_message() {
    const WIDE: usize = 100_000;
    let layout = Layout::in_memory("rw");
    layout.fill();
    let wide = layout.data.join("wide");
    std::fs::create_dir(&wide).expect("mkdir");
    // One `mknodat` a file beneath the directory's descriptor (no descriptor to open and
    // close per file).
    let dir = std::fs::File::open(&wide).expect("open the wide directory");
    for n in 0..WIDE {
        rustix::fs::mknodat(
            &dir,
            format!("f{n:06}"),
            rustix::fs::FileType::RegularFile,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mknod");
    }
    // As deep as a path may be (PATH_MAX): one-letter directories down to the limit.
    let mut deep = layout.data.join("deep");
    let mut levels = 0usize;
    loop {
        match std::fs::create_dir(&deep) {
            Ok(()) => levels += 1,
            Err(error) if error.raw_os_error() == Some(36) => break, // ENAMETOOLONG
            Err(error) => panic!("mkdir at depth {levels}: {error}"),
        }
        deep.push("d");
    }
    eprintln!("{WIDE} entries wide, {levels} levels deep");
    assert!(levels > 1000, "{levels}");

    if let Some(original) = the_original(&layout).await {
        let answer = ask(
            &original,
            "list_directory",
            json!({"path": layout.at("wide")}),
        )
        .await;
        eprintln!(
            "original, list_directory of {WIDE} entries: {} lines, {} bytes",
            answer.text().lines().count(),
            answer.text().len()
        );
        assert_eq!(answer.text().lines().count(), WIDE);
        // Its walks of these trees are not run: `search_files` of the wide one takes seconds,
        // and `directory_tree` of the deep one did not answer in minutes.
        let tree = ask(
            &original,
            "directory_tree",
            json!({"path": layout.at("wide")}),
        )
        .await;
        eprintln!(
            "original, directory_tree of {WIDE} entries: {} bytes of JSON",
            tree.text().len()
        );
        assert!(
            matches!(tree, Answer::Ok(_)),
            "{:?}",
            tree.text().get(..200)
        );
        let _ = original.cancel().await;
    }

    let session = ours(&layout.plugins).await;
    let wide_path = layout.at("wide");
    let listing = ask(&session, "list_directory", json!({"path": wide_path})).await;
    let lines: Vec<&str> = listing.text().lines().collect();
    assert_eq!(lines.len(), 10_001);
    // The first entries read, in Node's order among themselves.
    assert!(
        lines[..10_000]
            .iter()
            .all(|line| line.starts_with("[FILE] f"))
    );
    assert!(lines[..10_000].is_sorted(), "{:?}", &lines[..3]);
    assert_eq!(
        lines[10_000],
        format!(
            "[STOPPED] {wide_path} has more than 10000 entries, the most this server lists at \
             once (FILESYSTEM_MAX_ENTRIES); use search_files with a pattern to find the others"
        )
    );
    let tree = ask(&session, "directory_tree", json!({"path": wide_path})).await;
    assert_eq!(
        tree,
        Answer::Error(format!(
            "directory_tree stopped after 10000 entries under {wide_path} \
             (FILESYSTEM_MAX_ENTRIES); give a deeper path or excludePatterns"
        ))
    );
    let search = ask(
        &session,
        "search_files",
        json!({"path": wide_path, "pattern": "*9"}),
    )
    .await;
    assert!(
        matches!(&search, Answer::Error(text)
            if text.starts_with("search_files stopped after looking at 10000 entries")),
        "{search:?}"
    );
    let deep_path = layout.at("deep");
    let tree = ask(&session, "directory_tree", json!({"path": deep_path})).await;
    assert_eq!(
        tree,
        Answer::Error(format!(
            "directory_tree stopped: {deep_path} is deeper than 64 levels \
             (FILESYSTEM_MAX_DEPTH); give a deeper path"
        ))
    );
    let search = ask(
        &session,
        "search_files",
        json!({"path": deep_path, "pattern": "**/x"}),
    )
    .await;
    assert!(
        matches!(&search, Answer::Error(text) if text.contains("is deeper than 64 levels")),
        "{search:?}"
    );
    let still = ask(&session, "list_allowed_directories", json!({})).await;
    assert_eq!(
        still.text(),
        format!("Allowed directories:\n{}", layout.at(""))
    );
    let _ = session.cancel().await;
}

/// A read-only grant: the write tools refuse, naming the grant and what the operator can
/// change; reads, listings and a dry run work; nothing is changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_grant_refuses_changes_clearly() {
    let layout = Layout::new("ro");
    layout.fill();
    let session = ours(&layout.plugins).await;
    let data = layout.at("");
    let refused = |path: &str| {
        Answer::Error(format!(
            "Access denied - {data} is granted read-only by this plugin's policy, so {path} \
             cannot be changed; the operator can grant it with mode = \"rw\" in \
             filesystem.policy.toml"
        ))
    };
    let edits = json!([{"oldText": "beta", "newText": "B"}]);
    for (tool, arguments, path) in [
        (
            "write_file",
            json!({"path": layout.at("new.txt"), "content": "x"}),
            layout.at("new.txt"),
        ),
        (
            "write_file",
            json!({"path": layout.at("a.txt"), "content": "x"}),
            layout.at("a.txt"),
        ),
        (
            "edit_file",
            json!({"path": layout.at("a.txt"), "edits": edits}),
            layout.at("a.txt"),
        ),
        (
            "create_directory",
            json!({"path": layout.at("made")}),
            layout.at("made"),
        ),
        (
            "move_file",
            json!({"source": layout.at("a.txt"), "destination": layout.at("b.txt")}),
            layout.at("a.txt"),
        ),
    ] {
        assert_eq!(
            ask(&session, tool, arguments).await,
            refused(&path),
            "{tool}"
        );
    }
    let dry = ask(
        &session,
        "edit_file",
        json!({"path": layout.at("a.txt"), "edits": edits, "dryRun": true}),
    )
    .await;
    assert!(dry.text().contains("-beta\n+B\n"), "{dry:?}");
    assert_eq!(
        ask(&session, "list_allowed_directories", json!({}))
            .await
            .text(),
        format!("Allowed directories:\n{data} (read-only)")
    );
    assert_eq!(
        std::fs::read_to_string(layout.data.join("a.txt")).expect("read"),
        "alpha\nbeta\ngamma\ndelta\n"
    );
    assert!(!layout.data.join("new.txt").exists() && !layout.data.join("made").exists());
    let _ = session.cancel().await;
}

/// A client that offers these roots (and nothing else).
#[derive(Clone)]
struct RootsClient(Vec<String>);

// Roots are deprecated in a later MCP revision, and still what the original reads.
#[allow(deprecated)]
impl rmcp::ClientHandler for RootsClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"roots": {}},
            "clientInfo": {"name": "llm-worker-tests", "version": "1"}
        }))
        .expect("client info")
    }

    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        let roots: Vec<Value> = self
            .0
            .iter()
            .map(|path| json!({"uri": format!("file://{path}"), "name": "root"}))
            .collect();
        Ok(serde_json::from_value(json!({ "roots": roots })).expect("roots"))
    }
}

/// `command` connected with a client offering `roots`.
async fn with_roots(
    command: tokio::process::Command,
    roots: Vec<String>,
) -> rmcp::service::RunningService<rmcp::RoleClient, RootsClient> {
    use rmcp::ServiceExt;
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("start the server");
    RootsClient(roots)
        .serve(transport)
        .await
        .expect("initialize")
}

/// The client's roots: the original replaces its allowed directories with them, even with a
/// root outside the directories it was started with (it then reads outside them); ours takes
/// a root only inside a grant (narrowing it), refuses to run with roots none of which meets a
/// grant, and refuses to run when the client's roots cannot be read (here, an answer the host
/// refuses): in neither case does it fall back to the whole grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_narrow_our_grants_and_never_widen_them() {
    let layout = Layout::new("rw");
    layout.fill();
    let data = layout.at("");
    let policy = format!(
        "[[dirs]]\nhost = {data:?}\nguest = {data:?}\nmode = \"rw\"\n[client]\nroots = true\n"
    );
    std::fs::write(layout.plugins.join("filesystem.policy.toml"), policy).expect("policy");
    let outside = layout.outside.to_str().expect("UTF-8").to_owned();
    let secret = json!({"path": layout.outside("secret.txt")});
    let allowed = |session: &rmcp::service::RunningService<rmcp::RoleClient, RootsClient>| {
        let session = session.peer().clone();
        async move {
            let result = session
                .call_tool(super::super::mcp::call(
                    "list_allowed_directories",
                    json!({}),
                ))
                .await
                .expect("tools/call");
            super::super::mcp::text(&result)
        }
    };
    let read = |session: &rmcp::service::RunningService<rmcp::RoleClient, RootsClient>,
                arguments: Value| {
        let session = session.peer().clone();
        async move {
            let result = session
                .call_tool(super::super::mcp::call("read_text_file", arguments))
                .await
                .expect("tools/call");
            (
                super::super::mcp::text(&result),
                result.is_error == Some(true),
            )
        }
    };

    if let Some(program) = program(ORIGINAL) {
        let mut command = tokio::process::Command::new(program);
        command.arg(&layout.data).env("TZ", "UTC");
        let original = with_roots(command, vec![outside.clone()]).await;
        // It asks for the roots once initialised: wait until it has taken them.
        let peer = original.peer().clone();
        llm_worker_tests::wait::eventually("the original to take the roots", || {
            let peer = peer.clone();
            let want = format!("Allowed directories:\n{outside}");
            async move {
                let result = peer
                    .call_tool(super::super::mcp::call(
                        "list_allowed_directories",
                        json!({}),
                    ))
                    .await
                    .ok()?;
                (super::super::mcp::text(&result) == want).then_some(())
            }
        })
        .await;
        let (text, _) = read(&original, secret.clone()).await;
        eprintln!("original, a root outside its directories, read_text_file outside: {text:?}");
        assert_eq!(text, SECRET);
        let _ = original.cancel().await;
    }

    // Our server, a client offering `roots` connected to it.
    let ours = |roots: Vec<String>| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_llm-worker"));
        command
            .arg("serve")
            .arg("--cache-dir")
            .arg(compiled_cache())
            .arg(&layout.plugins);
        with_roots(command, roots)
    };
    let wider = ours(vec![outside.clone()]).await;
    assert!(allowed(&wider).await.contains("none of the client's roots"));
    let (text, is_error) = read(&wider, secret.clone()).await;
    assert!(
        is_error && text.contains("none of the client's roots"),
        "{text}"
    );
    let _ = wider.cancel().await;

    // A root URI with an unencoded space: the host refuses the client's answer.
    let unreadable = ours(vec![format!("{data}/a b")]).await;
    let (text, is_error) = read(&unreadable, json!({"path": layout.at("a.txt")})).await;
    assert!(
        is_error && text.contains("Could not read the client's roots"),
        "{text}"
    );
    let _ = unreadable.cancel().await;

    let narrower = ours(vec![layout.at("sub")]).await;
    assert_eq!(
        allowed(&narrower).await,
        format!("Allowed directories:\n{}", layout.at("sub"))
    );
    let (text, is_error) = read(&narrower, json!({"path": layout.at("a.txt")})).await;
    assert!(
        is_error && text.starts_with("Access denied - path outside"),
        "{text}"
    );
    let (text, is_error) = read(&narrower, json!({"path": layout.at("sub/b.txt")})).await;
    assert_eq!((text.as_str(), is_error), ("inside sub\n", false));
    let _ = narrower.cancel().await;
    layout.assert_outside_untouched();
}
