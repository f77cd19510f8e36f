//! Our sandboxed re-implementations of the MCP reference servers against the originals: the
//! latency of one typical `tools/call` per plugin, sent by rmcp's client over stdio to a child
//! process, which is either `llm-worker serve` running our plugin (a wasm component, under its
//! policy) or the original (a Python or Node process, pinned and installed as the side-by-side
//! tests install it: `llm_worker_tests::reference`).
//!
//! What is compared is the whole request path a client sees, not the tool alone: the JSON-RPC
//! framing on both ends, the server's MCP layer, and for ours the host's checks of the
//! arguments and the policy, a call into the component and the WASI calls it makes (the
//! clock, the memory file, HTTP through `wasi:http`), against the same work done by the
//! original's interpreter and its libraries. Each server is warmed up first; then each gets
//! the same number of sequential calls, the two taking turns in rounds (which goes first
//! alternates), so the noise of the shared machine falls on both. The ratio is between the
//! medians measured in this one run.
//!
//! ```sh
//! cargo bench -p llm-worker-cli --bench reference [-- PLUGIN…]   # time, fetch, memory
//! ```
//!
//! The fetch row points both servers at a web server the benchmark runs on 127.0.0.1 (the
//! side-by-side tests' site: a small HTML page and a robots.txt that allows it); our policy
//! grants exactly its `http://127.0.0.1:PORT`, and the original runs with
//! `--allow-private-ips`, as in its test. A plugin whose `.wasm` is not built is skipped, and
//! so is an original that cannot be installed here; the benchmark says which.
// The server's futures (wasmtime's concurrent calls inside rmcp's handlers) nest deeper
// than the default limit of 128 lets the compiler lay them out.
#![recursion_limit = "256"]

use std::any::Any;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant};

use llm_worker_tests::bench::{percentile, ratio, show};
use llm_worker_tests::plugin_path;
use llm_worker_tests::reference::site::Site;
use llm_worker_tests::reference::{
    FETCH, FILESYSTEM, MEMORY, Original, Session, TIME, TIME_POLICY, fetch_original, fetch_policy,
    memory_dir, memory_original, original, ours, plugin_dir, time_original,
};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

/// Warm-up calls to each server before any is timed.
const WARM_UP: usize = 10;
/// Rounds of timed calls; in each, every server gets [`PER_ROUND`] calls in a row.
const ROUNDS: usize = 10;
/// Timed calls to each server per round.
const PER_ROUND: usize = 20;

/// Both servers of a row, started and ready for the row's call.
struct Pair {
    ours: Session,
    theirs: Session,
    call: CallToolRequestParams,
    /// What the servers use while they run (scratch directories, the web server): dropped
    /// after them.
    _keep: Vec<Box<dyn Any>>,
}

type Setup = Pin<Box<dyn Future<Output = Pair>>>;

/// One row of the table: our plugin, the original it re-implements, its typical call as the
/// table shows it, and how both servers are started for it (given the original's program).
struct Row {
    plugin: &'static str,
    original: Original,
    shown: &'static str,
    setup: fn(PathBuf) -> Setup,
}

/// The table. Another plugin is another row here, with its setup function beside those
/// below: until its `.wasm` is built, its row says it is skipped.
const ROWS: [Row; 4] = [
    Row {
        plugin: "filesystem",
        original: FILESYSTEM,
        shown: r#"`read_text_file {"path":"DIR/a.txt"}` (a file of 6 bytes; the directory granted read-only, at its own path)"#,
        setup: filesystem,
    },
    Row {
        plugin: "time",
        original: TIME,
        shown: r#"`convert_time {"source_timezone":"America/New_York","time":"16:30","target_timezone":"Asia/Tokyo"}`"#,
        setup: time,
    },
    Row {
        plugin: "fetch",
        original: FETCH,
        shown: r#"`fetch {"url":"http://127.0.0.1:PORT/page"}` (the side-by-side tests' small HTML page; their robots.txt allows it)"#,
        setup: fetch,
    },
    Row {
        plugin: "memory",
        original: MEMORY,
        shown: r#"`search_nodes {"query":"engine"}` (a graph of 4 entities and 3 relations)"#,
        setup: memory,
    },
];

/// The `llm-worker` command this benchmark's package builds.
fn cli() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_llm-worker"))
}

fn call(tool: &'static str, arguments: Value) -> CallToolRequestParams {
    let arguments = arguments.as_object().cloned().unwrap_or_default();
    CallToolRequestParams::new(tool).with_arguments(arguments)
}

/// Sends `call` to `session` and checks that it succeeded.
async fn succeed(session: &Session, call: CallToolRequestParams, what: &str) {
    let tool = call.name.clone();
    let result = session
        .call_tool(call)
        .await
        .unwrap_or_else(|e| panic!("{what}: {tool}: {e}"));
    if result.is_error == Some(true) {
        let text: Vec<_> = result
            .content
            .iter()
            .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
            .collect();
        panic!("{what}: {tool} failed: {}", text.join(""));
    }
}

fn filesystem(program: PathBuf) -> Setup {
    Box::pin(async move {
        let files = llm_worker_tests::scratch_dir("bench-filesystem");
        std::fs::create_dir(files.join("data")).expect("mkdir");
        let data = files
            .join("data")
            .canonicalize()
            .expect("the served directory");
        std::fs::write(data.join("a.txt"), "hello\n").expect("write");
        let theirs = original(&program, &[data.as_os_str()], &[], &data).await;
        let policy = format!("[[dirs]]\nhost = {data:?}\nguest = {data:?}\nmode = \"ro\"\n");
        let (dir, scratch) = plugin_dir("filesystem", &[("filesystem.policy.toml", &policy)]);
        let ours = ours(cli(), &dir).await;
        let arguments = json!({ "path": data.join("a.txt") });
        Pair {
            ours,
            theirs,
            call: call("read_text_file", arguments),
            _keep: vec![Box::new(scratch), Box::new(files)],
        }
    })
}

fn time(program: PathBuf) -> Setup {
    Box::pin(async move {
        let (dir, scratch) = plugin_dir("time", &[("time.policy.toml", TIME_POLICY)]);
        let theirs = time_original(&program, &scratch).await;
        let ours = ours(cli(), &dir).await;
        let arguments = json!({
            "source_timezone": "America/New_York",
            "time": "16:30",
            "target_timezone": "Asia/Tokyo",
        });
        Pair {
            ours,
            theirs,
            call: call("convert_time", arguments),
            _keep: vec![Box::new(scratch)],
        }
    })
}

fn fetch(program: PathBuf) -> Setup {
    Box::pin(async move {
        let site = Site::start(None).await;
        let (theirs, their_dir) = fetch_original(&program, true).await;
        let policy = fetch_policy(&[site.url("")], "");
        let (dir, scratch) = plugin_dir("fetch", &[("fetch.policy.toml", &policy)]);
        let ours = ours(cli(), &dir).await;
        let arguments = json!({ "url": site.url("/page") });
        Pair {
            ours,
            theirs,
            call: call("fetch", arguments),
            _keep: vec![Box::new(their_dir), Box::new(scratch), Box::new(site)],
        }
    })
}

fn memory(program: PathBuf) -> Setup {
    Box::pin(async move {
        let (dir, data, scratch) = memory_dir("");
        let theirs = memory_original(&program, &data.join("theirs.jsonl")).await;
        let ours = ours(cli(), &dir).await;
        let entities = json!({ "entities": [
            {"name": "Analytical Engine", "entityType": "machine",
             "observations": ["designed by Babbage in 1837", "never finished"]},
            {"name": "Ada Lovelace", "entityType": "person",
             "observations": ["wrote the first program for the engine", "mathematician"]},
            {"name": "Charles Babbage", "entityType": "person",
             "observations": ["designed the difference engine"]},
            {"name": "Jacquard loom", "entityType": "machine",
             "observations": ["read punched cards"]},
        ]});
        let relations = json!({ "relations": [
            {"from": "Ada Lovelace", "to": "Analytical Engine", "relationType": "programmed"},
            {"from": "Charles Babbage", "to": "Analytical Engine", "relationType": "designed"},
            {"from": "Analytical Engine", "to": "Jacquard loom", "relationType": "borrowed cards from"},
        ]});
        for (session, what) in [(&ours, "ours"), (&theirs, "the original")] {
            succeed(session, call("create_entities", entities.clone()), what).await;
            succeed(session, call("create_relations", relations.clone()), what).await;
        }
        Pair {
            ours,
            theirs,
            call: call("search_nodes", json!({ "query": "engine" })),
            _keep: vec![Box::new(scratch)],
        }
    })
}

/// The latencies of `rounds × per_round` sequential calls to each server of `pair` (ours
/// first), the two taking turns every `per_round` calls, the first of a round alternating.
async fn latencies(pair: &Pair, rounds: usize, per_round: usize) -> [Vec<Duration>; 2] {
    let mut times = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for index in [round % 2, 1 - round % 2] {
            let (session, what) = match index {
                0 => (&pair.ours, "ours"),
                _ => (&pair.theirs, "the original"),
            };
            for _ in 0..per_round {
                let start = Instant::now();
                let result = session.call_tool(pair.call.clone()).await;
                times[index].push(start.elapsed());
                let result = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_ne!(result.is_error, Some(true), "{what}: {result:?}");
            }
        }
    }
    times
}

/// What runs the original: its interpreter's version.
fn runtime_of(original: Original, program: &Path) -> String {
    let (command, label) = match original {
        Original::PyPi { .. } => (program.with_file_name("python3"), ""),
        Original::Npm { .. } => (PathBuf::from("node"), "Node "),
    };
    let version = std::process::Command::new(&command)
        .arg("--version")
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|version| !version.is_empty());
    format!("{label}{}", version.as_deref().unwrap_or("?"))
}

/// A size in the unit that suits it.
fn size(bytes: u64) -> String {
    let kib = bytes as f64 / 1024.0;
    if kib < 1024.0 {
        format!("{kib:.0} KiB")
    } else {
        format!("{:.2} MiB", kib / 1024.0)
    }
}

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let wanted =
        |plugin: &str| filters.is_empty() || filters.iter().any(|f| plugin.contains(f.as_str()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let target_tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let mut lines = Vec::new();
    let mut skipped = Vec::new();
    for row in ROWS.iter().filter(|row| wanted(row.plugin)) {
        let wasm = plugin_path(row.plugin);
        let Ok(built) = std::fs::metadata(&wasm) else {
            skipped.push(format!(
                "{}: skipped, {} is not built (no plugin crate of that name in plugins/)",
                row.plugin,
                wasm.display()
            ));
            continue;
        };
        let (package, version) = row.original.pin();
        let Some(program) = row.original.program(target_tmp) else {
            skipped.push(format!(
                "{}: skipped, {package} {version} could not be installed",
                row.plugin
            ));
            continue;
        };
        let runs_on = runtime_of(row.original, &program);
        eprintln!(
            "reference bench: {} against {package} {version}",
            row.plugin
        );
        let [mut ours, mut theirs] = runtime.block_on(async {
            let pair = (row.setup)(program).await;
            let _ = latencies(&pair, 1, WARM_UP).await;
            let times = latencies(&pair, ROUNDS, PER_ROUND).await;
            let Pair {
                ours,
                theirs,
                _keep,
                ..
            } = pair;
            let _ = ours.cancel().await;
            let _ = theirs.cancel().await;
            times
        });
        let (ours50, ours90) = (percentile(&mut ours, 0.5), percentile(&mut ours, 0.9));
        let (theirs50, theirs90) = (percentile(&mut theirs, 0.5), percentile(&mut theirs, 0.9));
        lines.push(format!(
            "| `{}` vs {package} {version} ({runs_on}) | {} | {} | {} | {} | {} | {} | {} |",
            row.plugin,
            row.shown,
            show(ours50),
            show(ours90),
            show(theirs50),
            show(theirs90),
            ratio(ours50, theirs50),
            size(built.len()),
        ));
    }
    println!(
        "\nThe MCP reference servers and our plugins, {} sequential tools/call each over stdio \
         (rmcp client, child processes, taking turns every {PER_ROUND}; ratios from this run)\n",
        ROUNDS * PER_ROUND
    );
    println!(
        "| plugin vs original | typical call | ours p50 | ours p90 | original p50 | original p90 | ours / original (p50) | .wasm (release) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for line in &lines {
        println!("{line}");
    }
    for note in &skipped {
        println!("\n{note}");
    }
    println!();
}
