//! The tools natively, on a scratch directory granted read-write (and one read-only).

use llm_worker_guest::block_on;

use super::*;

struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> (Scratch, String) {
    let dir = std::env::temp_dir().join(format!("filesystem-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let real = std::fs::canonicalize(&dir).expect("canonicalize");
    let text = real.to_str().expect("utf-8").to_owned();
    (Scratch(real), text)
}

/// A tool's answer as a result: its text, or its error's.
trait Text {
    fn t(self) -> Result<String, String>;
}

/// The tools are `async` (they may ask the client for its roots): run one to its end.
impl<F: std::future::Future<Output = ToolOutput>> Text for F {
    fn t(self) -> Result<String, String> {
        let output = llm_worker_guest::block_on(self);
        if output.is_error {
            Err(output.into_text())
        } else {
            Ok(output.into_text())
        }
    }
}

fn server(dir: &str, writable: bool, limits: Limits) -> Filesystem {
    Filesystem::new(
        vec![Allowed {
            path: dir.to_owned(),
            writable,
        }],
        limits,
    )
}

#[test]
fn reads_writes_and_edits_as_the_original_answers() {
    let (_scratch, dir) = scratch("rw");
    let fs = server(&dir, true, Limits::default());
    let file = format!("{dir}/a.txt");
    assert_eq!(
        fs.write_file(file.clone(), "one\ntwo\nthree\n".into()).t(),
        Ok(format!("Successfully wrote to {file}"))
    );
    assert_eq!(
        fs.read_text_file(file.clone(), None, None).t().as_deref(),
        Ok("one\ntwo\nthree\n")
    );
    assert_eq!(
        fs.read_text_file(file.clone(), None, Some(2.0))
            .t()
            .as_deref(),
        Ok("one\ntwo")
    );
    assert_eq!(
        fs.read_text_file(file.clone(), Some(2.0), None)
            .t()
            .as_deref(),
        Ok("three\n")
    );
    assert!(
        fs.read_text_file(file.clone(), Some(1.0), Some(1.0))
            .t()
            .is_err()
    );
    let edits = vec![EditOperation {
        old_text: "two".into(),
        new_text: "2".into(),
    }];
    let diff = fs.edit_file(file.clone(), edits, false).t().expect("edit");
    assert!(diff.starts_with("```diff\nIndex: "), "{diff}");
    assert!(diff.contains("-two\n+2\n"), "{diff}");
    assert_eq!(
        fs.read_file(file.clone(), None, None).t().as_deref(),
        Ok("one\n2\nthree\n")
    );
    assert_eq!(
        fs.create_directory(format!("{dir}/x/y")).t(),
        Ok(format!("Successfully created directory {dir}/x/y"))
    );
    let listing = fs.list_directory(dir.clone()).t().expect("list");
    let mut lines: Vec<&str> = listing.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["[DIR] x", "[FILE] a.txt"]);
    let sized = fs
        .list_directory_with_sizes(dir.clone(), SortBy::Size)
        .t()
        .expect("sizes");
    assert!(
        sized.ends_with("\nTotal: 1 files, 1 directories\nCombined size: 12 B"),
        "{sized}"
    );
    assert_eq!(
        fs.search_files(dir.clone(), "**/*.txt".into(), vec![])
            .t()
            .as_deref(),
        Ok(file.as_str())
    );
    let tree = fs
        .directory_tree(dir.clone(), vec!["y".into()])
        .t()
        .expect("tree");
    assert!(
        tree.contains("\"children\": []") && !tree.contains("\"y\""),
        "{tree}"
    );
    assert_eq!(
        fs.move_file(file.clone(), format!("{dir}/x/b.txt")).t(),
        Ok(format!("Successfully moved {file} to {dir}/x/b.txt"))
    );
    let info = fs
        .get_file_info(format!("{dir}/x/b.txt"))
        .t()
        .expect("info");
    assert!(info.starts_with("size: 12\ncreated: "), "{info}");
    assert!(
        info.contains("\nisDirectory: false\nisFile: true\n"),
        "{info}"
    );
    assert_eq!(
        fs.list_allowed_directories().t(),
        Ok(format!("Allowed directories:\n{dir}"))
    );
    let missing = fs
        .read_text_file(format!("{dir}/nope"), None, None)
        .t()
        .unwrap_err();
    assert_eq!(
        missing,
        format!("ENOENT: no such file or directory, open '{dir}/nope'")
    );
}

#[test]
fn read_only_grants_refuse_changes_and_limits_stop_big_work() {
    let (_scratch, dir) = scratch("ro");
    std::fs::write(format!("{dir}/big"), vec![b'x'; 2000]).expect("write");
    for n in 0..30 {
        std::fs::write(format!("{dir}/f{n}"), "").expect("write");
    }
    let limits = Limits {
        max_bytes: 1000,
        max_entries: 10,
        max_depth: 2,
    };
    let fs = server(&dir, false, limits);
    let refused = fs
        .write_file(format!("{dir}/new"), "x".into())
        .t()
        .unwrap_err();
    assert!(refused.contains("granted read-only"), "{refused}");
    assert!(!std::path::Path::new(&format!("{dir}/new")).exists());
    let big = fs
        .read_text_file(format!("{dir}/big"), None, None)
        .t()
        .unwrap_err();
    assert!(big.contains("2000 bytes, over the 1000 bytes"), "{big}");
    let head = fs
        .read_text_file(format!("{dir}/big"), Some(1.0), None)
        .t()
        .unwrap_err();
    assert!(head.contains("ask for fewer lines"), "{head}");
    let listing = fs.list_directory(dir.clone()).t().expect("list");
    assert_eq!(listing.lines().count(), 11, "{listing}");
    assert!(listing.ends_with("use search_files with a pattern to find the others"));
    let walk = fs
        .search_files(dir.clone(), "*".into(), vec![])
        .t()
        .unwrap_err();
    assert!(
        walk.starts_with("search_files stopped after looking at 10 entries"),
        "{walk}"
    );
    let tree = fs.directory_tree(dir.clone(), vec![]).t().unwrap_err();
    assert!(
        tree.starts_with("directory_tree stopped after 10 entries"),
        "{tree}"
    );
    assert!(
        block_on(async { fs.list_allowed_directories().t() })
            .is_ok_and(|t| t.ends_with("(read-only)"))
    );
}

#[test]
fn limits_come_from_the_policys_environment_or_say_what_is_wrong() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    };
    assert_eq!(Limits::from_vars(vars(&[])), Ok(Limits::default()));
    assert_eq!(
        Limits::from_vars(vars(&[("FILESYSTEM_MAX_BYTES", " 42 ")])).map(|l| l.max_bytes),
        Ok(42)
    );
    let wrong = Limits::from_vars(vars(&[("FILESYSTEM_MAX_ENTRIES", "lots")])).unwrap_err();
    assert!(
        wrong.contains("FILESYSTEM_MAX_ENTRIES to \"lots\""),
        "{wrong}"
    );
    assert!(Limits::from_vars(vars(&[("FILESYSTEM_MAX_DEPTH", "0")])).is_err());
}

#[test]
fn listings_stop_at_the_byte_limit_too() {
    let (_scratch, dir) = scratch("bytes");
    for n in 0..40 {
        std::fs::write(format!("{dir}/{}{n:03}", "n".repeat(200)), "").expect("write");
    }
    let limits = Limits {
        max_bytes: 4096 + 1000,
        ..Limits::default()
    };
    let fs = server(&dir, true, limits);
    let listing = fs.list_directory(dir.clone()).t().expect("list");
    let lines: Vec<&str> = listing.lines().collect();
    assert!(lines.len() > 10 && lines.len() < 40, "{listing}");
    assert!(listing.len() <= 5096, "{}", listing.len());
    let last = lines.last().expect("a line");
    assert!(
        last.starts_with(&format!(
            "[STOPPED] the listing of {dir} is longer than 5096 bytes"
        )),
        "{last}"
    );
    let sized = fs
        .list_directory_with_sizes(dir.clone(), SortBy::Name)
        .t()
        .expect("sizes");
    assert!(sized.contains("[STOPPED] the listing of"), "{sized}");
    assert!(
        sized.ends_with("Total: 40 files, 0 directories\nCombined size: 0 B"),
        "{sized}"
    );
}
