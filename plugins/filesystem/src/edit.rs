//! `edit_file`'s work: applying the edits as the original does (an exact match first, then a
//! match line by line ignoring indentation), and the git-style diff it answers with (the `diff`
//! package's `createTwoFilesPatch`: four lines of context, `\ No newline at end of file`).

use similar::{Algorithm, DiffOp, capture_diff_slices_deadline};

/// One edit: `old_text` replaced by `new_text`.
#[derive(Debug, Clone)]
pub struct Edit {
    pub old_text: String,
    pub new_text: String,
}

/// `\r\n` as `\n`.
#[must_use]
pub fn normalize_line_endings(text: &str) -> String {
    text.replace("\r\n", "\n")
}

/// The leading whitespace of `line`.
fn indent(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// `content` (line endings normalised) with the edits applied in order, at most `limit`
/// bytes.
///
/// # Errors
/// An edit whose text is found neither exactly nor line by line; an edited text over `limit`
/// (a line-by-line match gives each replaced line the matched first line's indentation: a
/// deep one times thousands of lines would pass the plugin's memory).
pub fn apply(content: &str, edits: &[Edit], limit: usize) -> Result<String, String> {
    let too_long = |bytes: usize| {
        format!(
            "The edited file would be {bytes} bytes, over the {limit} this server reads and \
             writes (FILESYSTEM_MAX_BYTES)"
        )
    };
    let mut modified = content.to_owned();
    for edit in edits {
        let old = normalize_line_endings(&edit.old_text);
        let new = normalize_line_endings(&edit.new_text);
        if modified.contains(&old) {
            let bytes = (modified.len() - old.len()).saturating_add(new.len());
            if bytes > limit {
                return Err(too_long(bytes));
            }
            modified = modified.replacen(&old, &new, 1);
            continue;
        }
        let old_lines: Vec<&str> = old.split('\n').collect();
        let mut lines: Vec<String> = modified.split('\n').map(str::to_owned).collect();
        let found = (0..=lines.len().saturating_sub(old_lines.len()))
            .filter(|_| lines.len() >= old_lines.len())
            .find(|&at| {
                old_lines
                    .iter()
                    .zip(&lines[at..])
                    .all(|(old, line)| old.trim() == line.trim())
            });
        let Some(at) = found else {
            return Err(format!(
                "Could not find exact match for edit:\n{}",
                edit.old_text
            ));
        };
        let original_indent = indent(&lines[at]).to_owned();
        // Each new line as (its added indentation, its text), measured before it is built.
        let shaped: Vec<(Option<usize>, &str)> = new
            .split('\n')
            .enumerate()
            .map(|(j, line)| {
                if j == 0 {
                    return (Some(0), line.trim_start());
                }
                let old_indent = old_lines.get(j).map_or("", |old| indent(old));
                let new_indent = indent(line);
                if !old_indent.is_empty() && !new_indent.is_empty() {
                    let relative = new_indent.len().saturating_sub(old_indent.len());
                    (Some(relative), line.trim_start())
                } else {
                    (None, line)
                }
            })
            .collect();
        let removed: usize = lines[at..at + old_lines.len()]
            .iter()
            .map(|l| l.len() + 1)
            .sum();
        let added = shaped.iter().fold(0usize, |total, (relative, text)| {
            let indent = relative.map_or(0, |relative| original_indent.len() + relative);
            total.saturating_add(indent + text.len() + 1)
        });
        let bytes = (modified.len() + 1)
            .saturating_sub(removed)
            .saturating_add(added);
        if bytes > limit.saturating_add(1) {
            return Err(too_long(bytes.saturating_sub(1)));
        }
        let replacement: Vec<String> = shaped
            .into_iter()
            .map(|(relative, text)| match relative {
                Some(relative) => format!("{original_indent}{}{text}", " ".repeat(relative)),
                None => text.to_owned(),
            })
            .collect();
        lines.splice(at..at + old_lines.len(), replacement);
        modified = lines.join("\n");
    }
    Ok(modified)
}

/// How long the diff of an edit may search for the shortest one.
const DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// Lines with their line feeds, as the `diff` package splits them.
fn split_lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// One run of the line diff: lines kept, removed or added.
enum Run<'a> {
    Same(&'a [&'a str]),
    Removed(&'a [&'a str]),
    Added(&'a [&'a str]),
}

/// The unified diff of `old` and `new` for `path`, as `createTwoFilesPatch(path, path, old,
/// new, "original", "modified")` writes it.
#[must_use]
pub fn unified_diff(old: &str, new: &str, path: &str) -> String {
    // Myers' search costs the lines times the differences: a line replaced by 300,000 ran for
    // minutes (past the call's limit, so the edit was lost). Past the deadline the search
    // stops and the rest is one removal and one addition: a correct diff, longer than the
    // shortest.
    unified_diff_until(old, new, path, similar::Instant::now() + DIFF_DEADLINE)
}

/// [`unified_diff`], looking for the shortest diff until `deadline`.
fn unified_diff_until(old: &str, new: &str, path: &str, deadline: similar::Instant) -> String {
    const CONTEXT: usize = 4;
    let old = normalize_line_endings(old);
    let new = normalize_line_endings(new);
    let old_lines = split_lines(&old);
    let new_lines = split_lines(&new);
    let ops =
        capture_diff_slices_deadline(Algorithm::Myers, &old_lines, &new_lines, Some(deadline));
    // The runs in the `diff` package's order: removals before additions.
    let mut runs: Vec<Run<'_>> = Vec::new();
    for op in &ops {
        match *op {
            DiffOp::Equal { old_index, len, .. } => {
                runs.push(Run::Same(&old_lines[old_index..old_index + len]));
            }
            DiffOp::Delete {
                old_index, old_len, ..
            } => runs.push(Run::Removed(&old_lines[old_index..old_index + old_len])),
            DiffOp::Insert {
                new_index, new_len, ..
            } => runs.push(Run::Added(&new_lines[new_index..new_index + new_len])),
            DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => {
                runs.push(Run::Removed(&old_lines[old_index..old_index + old_len]));
                runs.push(Run::Added(&new_lines[new_index..new_index + new_len]));
            }
        }
    }
    let runs = merge(runs);
    let mut hunks: Vec<(usize, usize, usize, usize, Vec<String>)> = Vec::new();
    let (mut old_start, mut new_start) = (0usize, 0usize);
    let mut current: Vec<String> = Vec::new();
    let (mut old_line, mut new_line) = (1usize, 1usize);
    let count = runs.len();
    for (i, run) in runs.iter().enumerate() {
        match run {
            Run::Removed(lines) | Run::Added(lines) => {
                if old_start == 0 {
                    old_start = old_line;
                    new_start = new_line;
                    if let Some(Run::Same(previous)) = i.checked_sub(1).map(|p| &runs[p]) {
                        let from = previous.len().saturating_sub(CONTEXT);
                        current = previous[from..].iter().map(|l| format!(" {l}")).collect();
                        old_start -= current.len();
                        new_start -= current.len();
                    }
                }
                let sign = if matches!(run, Run::Added(_)) {
                    '+'
                } else {
                    '-'
                };
                current.extend(lines.iter().map(|l| format!("{sign}{l}")));
                if matches!(run, Run::Added(_)) {
                    new_line += lines.len();
                } else {
                    old_line += lines.len();
                }
            }
            Run::Same(lines) => {
                if old_start != 0 {
                    // The package appends an empty run: the last real one counts as before it.
                    if lines.len() <= CONTEXT * 2 && i + 1 < count {
                        current.extend(lines.iter().map(|l| format!(" {l}")));
                    } else {
                        let size = lines.len().min(CONTEXT);
                        current.extend(lines[..size].iter().map(|l| format!(" {l}")));
                        hunks.push((
                            old_start,
                            old_line - old_start + size,
                            new_start,
                            new_line - new_start + size,
                            std::mem::take(&mut current),
                        ));
                        old_start = 0;
                        new_start = 0;
                    }
                }
                old_line += lines.len();
                new_line += lines.len();
            }
        }
    }
    if old_start != 0 {
        hunks.push((
            old_start,
            old_line - old_start,
            new_start,
            new_line - new_start,
            current,
        ));
    }
    let mut out = format!(
        "Index: {path}\n===================================================================\n--- \
         {path}\toriginal\n+++ {path}\tmodified\n"
    );
    for (mut old_start, old_count, mut new_start, new_count, lines) in hunks {
        if old_count == 0 {
            old_start = old_start.saturating_sub(1);
        }
        if new_count == 0 {
            new_start = new_start.saturating_sub(1);
        }
        out.push_str(&format!(
            "@@ -{old_start},{old_count} +{new_start},{new_count} @@\n"
        ));
        for line in lines {
            match line.strip_suffix('\n') {
                Some(line) => {
                    out.push_str(line);
                    out.push('\n');
                }
                None => {
                    out.push_str(&line);
                    out.push_str("\n\\ No newline at end of file\n");
                }
            }
        }
    }
    out
}

/// Adjacent runs of one kind as one, removals before additions within a change.
fn merge(runs: Vec<Run<'_>>) -> Vec<Run<'_>> {
    // `capture_diff_slices` gives maximal runs already; only an empty run needs dropping.
    runs.into_iter()
        .filter(|run| match run {
            Run::Same(lines) | Run::Removed(lines) | Run::Added(lines) => !lines.is_empty(),
        })
        .collect()
}

/// The diff in a fence of backticks longer than any run of them in it, as the original answers.
#[must_use]
pub fn fenced(diff: &str) -> String {
    let mut ticks = 3;
    while diff.contains(&"`".repeat(ticks)) {
        ticks += 1;
    }
    let fence = "`".repeat(ticks);
    format!("{fence}diff\n{diff}{fence}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(old: &str, new: &str) -> Edit {
        Edit {
            old_text: old.into(),
            new_text: new.into(),
        }
    }

    #[test]
    fn exact_then_line_by_line() {
        let all = usize::MAX;
        assert_eq!(
            apply("a\nb\nc\n", &[edit("b", "B")], all).unwrap(),
            "a\nB\nc\n"
        );
        assert_eq!(
            apply(
                "x\n    foo\n    bar\n",
                &[edit("foo\nbar", "baz\n  qux")],
                all
            )
            .unwrap(),
            "x\n    baz\n  qux\n"
        );
        assert_eq!(
            apply("a\n", &[edit("zzz", "y")], all).unwrap_err(),
            "Could not find exact match for edit:\nzzz"
        );
    }

    /// A line-by-line match gives each replaced line the matched first line's indentation:
    /// 64 KB of it times 2,000 lines was 131 MB, past the plugin's memory (a trap). The edited
    /// text is measured before it is built, and held to the limit, exactly.
    #[test]
    fn an_edit_is_measured_before_it_is_made() {
        let content = format!("{}x\n{}", " ".repeat(65_536), "  y\n".repeat(2_000));
        let old = format!("x\n{} y", " y\n".repeat(1_999));
        let new = format!("z\n{} w", " w\n".repeat(1_999));
        let refused = apply(&content, &[edit(&old, &new)], 1_000_000).unwrap_err();
        assert!(refused.contains("over the 1000000"), "{refused}");
        let content = "x\n    foo\n    bar\n";
        let edits = [edit("foo\nbar", "baz\n  qux")];
        let edited = "x\n    baz\n  qux\n";
        assert_eq!(apply(content, &edits, edited.len()).unwrap(), edited);
        assert!(apply(content, &edits, edited.len() - 1).is_err());
        assert_eq!(apply("a\nb\n", &[edit("b", "B")], 4).unwrap(), "a\nB\n");
        assert!(apply("a\nb\n", &[edit("b", "BB")], 4).is_err());
    }

    /// A line replaced by 300,000 ran the shortest diff's search (lines times differences)
    /// for minutes, past the call's limit, and the edit was lost. Past its deadline the search
    /// stops: what is left is one removal and one addition, a correct diff, longer.
    #[test]
    fn a_diff_stops_looking_for_the_shortest_at_its_deadline() {
        let (old, new) = ("a\nb\nc\n", "a\nx\nb\ny\nc\n");
        let changes = |diff: &str| -> Vec<String> {
            diff.lines()
                .filter(|line| {
                    (line.starts_with('-') || line.starts_with('+'))
                        && !line.starts_with("---")
                        && !line.starts_with("+++")
                })
                .map(str::to_owned)
                .collect()
        };
        let shortest = unified_diff(old, new, "/d/f.txt");
        assert_eq!(changes(&shortest), ["+x", "+y"], "{shortest}");
        let past = similar::Instant::now()
            .checked_sub(std::time::Duration::from_secs(1))
            .expect("a second after the clock's start");
        let stopped = unified_diff_until(old, new, "/d/f.txt", past);
        assert_eq!(changes(&stopped), ["-b", "+x", "+b", "+y"], "{stopped}");
    }

    #[test]
    fn diffs_read_as_the_diff_packages() {
        assert_eq!(
            unified_diff("a\nb\nc\n", "a\nB\nc\n", "/d/f.txt"),
            "Index: /d/f.txt\n\
             ===================================================================\n\
             --- /d/f.txt\toriginal\n\
             +++ /d/f.txt\tmodified\n\
             @@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
        assert_eq!(
            unified_diff("a", "b", "/f"),
            "Index: /f\n\
             ===================================================================\n\
             --- /f\toriginal\n\
             +++ /f\tmodified\n\
             @@ -1,1 +1,1 @@\n-a\n\\ No newline at end of file\n+b\n\\ No newline at end of file\n"
        );
        assert!(unified_diff("same\n", "same\n", "/f").ends_with("modified\n"));
        let long: String = (0..20).map(|n| format!("{n}\n")).collect();
        let changed = long
            .replacen("2\n", "two\n", 1)
            .replacen("17\n", "seventeen\n", 1);
        let diff = unified_diff(&long, &changed, "/f");
        assert!(diff.contains("@@ -1,7 +1,7 @@"), "{diff}");
        assert!(diff.contains("@@ -14,7 +14,7 @@"), "{diff}");
        assert_eq!(fenced("x\n"), "```diff\nx\n```\n\n");
        assert_eq!(fenced("```\n"), "````diff\n```\n````\n\n");
    }
}
