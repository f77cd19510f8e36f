//! Where a process's resident memory is, by kind of mapping (shared by the benches that
//! measure memory: `host` for idle instances, `serve` for open sessions).

use std::collections::BTreeMap;

/// What kind of mapping resident memory is in, as `/proc/<pid>/smaps` shows it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mapping {
    /// The allocator's heap: `[heap]`, and glibc's arenas of other threads (anonymous runs of
    /// 64 MiB, aligned to 64 MiB).
    Heap,
    /// A run of 2 MiB and a guard page or a few: a fiber stack (wasmtime's
    /// `async_stack_size`), which a store keeps for its next call.
    FiberStack,
    /// A run of a gibibyte or more: a linear memory's reservation, with the pages of its
    /// copy-on-write image mapped into it.
    LinearMemory,
    /// Any other memory not backed by a file (tables, large blocks, thread stacks).
    OtherAnonymous,
    /// A file's pages (code, the compiled plugin if mapped from a file).
    File,
}

/// The kinds, in the order of a table's columns, and their column titles.
pub const MAPPINGS: [(Mapping, &str); 5] = [
    (Mapping::Heap, "heap"),
    (Mapping::FiberStack, "fiber stacks"),
    (Mapping::LinearMemory, "linear memories"),
    (Mapping::OtherAnonymous, "other anonymous"),
    (Mapping::File, "files"),
];

/// Resident bytes of process `pid` (`self` for this one) by kind of mapping, from its
/// `/proc/<pid>/smaps`. Anonymous memory is told apart by the inaccessible mapping around it:
/// a linear memory's accessible pages (and its copy-on-write image, mapped in pieces) are
/// followed by the rest of its reservation, a gibibyte or more; a fiber stack of 2 MiB is
/// preceded by its guard page; an allocator arena's pages and the rest of it make 64 MiB.
pub fn resident_by_mapping(pid: &str) -> Option<BTreeMap<Mapping, u64>> {
    const GIB: u64 = 1 << 30;
    const ARENA: u64 = 64 << 20;
    const STACK: u64 = 2 << 20;
    struct Area {
        start: u64,
        end: u64,
        anonymous: bool,
        inaccessible: bool,
        heap: bool,
        resident: u64,
    }
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let mut areas: Vec<Area> = Vec::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if let Some(kib) = line.strip_prefix("Rss:") {
            let kib: u64 = kib.trim().trim_end_matches("kB").trim().parse().ok()?;
            areas.last_mut()?.resident += kib * 1024;
        } else if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) =
                (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        {
            let permissions = fields.next().unwrap_or_default();
            let inode = fields.nth(2).unwrap_or("0");
            let path = fields.next().unwrap_or("");
            areas.push(Area {
                start,
                end,
                anonymous: (inode == "0" && !path.starts_with('[')) || path.starts_with("/memfd:"),
                inaccessible: permissions.starts_with("---"),
                heap: path == "[heap]",
                resident: 0,
            });
        }
    }
    let mut totals = BTreeMap::new();
    let mut i = 0;
    while i < areas.len() {
        let area = &areas[i];
        if !area.anonymous || area.inaccessible {
            let kind = match (area.heap, area.anonymous) {
                (true, _) => Mapping::Heap,
                (false, true) => Mapping::OtherAnonymous,
                (false, false) => Mapping::File,
            };
            *totals.entry(kind).or_insert(0) += area.resident;
            i += 1;
            continue;
        }
        // A run of accessible anonymous mappings, and the inaccessible ones around it.
        let first = i;
        while i + 1 < areas.len()
            && areas[i + 1].anonymous
            && !areas[i + 1].inaccessible
            && areas[i + 1].start == areas[i].end
        {
            i += 1;
        }
        let (start, end) = (areas[first].start, areas[i].end);
        let guard = |area: Option<&Area>, adjacent: u64| {
            area.filter(|a| {
                a.anonymous && a.inaccessible && (a.start == adjacent || a.end == adjacent)
            })
            .map_or(0, |a| a.end - a.start)
        };
        let after = guard(areas.get(i + 1), end);
        let before = guard(first.checked_sub(1).and_then(|b| areas.get(b)), start);
        let kind = if after >= GIB {
            Mapping::LinearMemory
        } else if start % ARENA == 0 && end - start + after == ARENA {
            Mapping::Heap
        } else if (STACK..=STACK + (64 << 10)).contains(&(end - start)) && before > 0 {
            Mapping::FiberStack
        } else {
            Mapping::OtherAnonymous
        };
        let resident: u64 = areas[first..=i].iter().map(|area| area.resident).sum();
        *totals.entry(kind).or_insert(0) += resident;
        i += 1;
    }
    Some(totals)
}

/// What was added from `before` to `after`, divided by `count`, for each kind (in `MAPPINGS`'
/// order).
pub fn added_per(
    before: &BTreeMap<Mapping, u64>,
    after: &BTreeMap<Mapping, u64>,
    count: f64,
) -> Vec<f64> {
    MAPPINGS
        .iter()
        .map(|(kind, _)| {
            let at =
                |totals: &BTreeMap<Mapping, u64>| totals.get(kind).copied().unwrap_or(0) as f64;
            (at(after) - at(before)) / count
        })
        .collect()
}

/// The header cells of a table's kind columns.
pub fn header() -> String {
    MAPPINGS
        .iter()
        .map(|(_, label)| format!(" {label} |"))
        .collect()
}

/// The cells of one row's kind columns, in KiB.
pub fn cells(per: &[f64]) -> String {
    per.iter()
        .map(|bytes| format!(" {:.1} KiB |", bytes / 1024.0))
        .collect()
}
