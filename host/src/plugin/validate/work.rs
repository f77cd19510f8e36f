//! The work one schema check may take, bounded before the schema is compiled.
//!
//! jsonschema compiles each subschema once, but checks a value by applying subschemas anew
//! wherever they are named: it remembers no verdict. A schema of a few hundred bytes whose
//! `$defs` each name the next one twice (`{"allOf": [{"$ref": "#/$defs/b"}, {"$ref":
//! "#/$defs/b"}]}`, 40 deep) applies 2⁴⁰ subschemas to one value; a recursive one doubles at
//! every level of the value; a chain of thousands of references nests as many calls. Any of
//! them would hold a host thread for hours or overflow its stack, on a value the plugin (its
//! result) or the model (its input) chooses.
//!
//! [`check_work`] reads the schema as a graph — each subschema a node, its applicators edges
//! that apply a subschema to the same value (`allOf`, `$ref`, `not`, …) or to a member or an
//! item of it (`properties`, `items`, …) — and counts, level by level of a value as deep as
//! a JSON text may nest, how many subschemas can apply to one value at that level (for every
//! member name at once: an upper bound) and how deeply those applications nest. A schema
//! over [`MAX_APPLICATIONS`] or [`MAX_NESTING`], or whose subschemas apply themselves to the
//! same value without end, is refused. References are followed as jsonschema can, and where
//! it could follow one several ways every way is counted: a JSON pointer from any resource
//! the schema declares (`$id`), an anchor of that name anywhere, a base URI naming any declared
//! resource (jsonschema normalises URIs, so their text is not compared); a reference to a
//! meta-schema, or to nothing in the schema, is refused.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

/// Most subschemas that may apply to one value (of any level) of an input or a result. A
/// large generated schema — a `oneOf` of a hundred object variants — stays in the hundreds.
pub(crate) const MAX_APPLICATIONS: u64 = 10_000;

/// Most subschema applications nested in one another while a value is checked (each a few
/// hundred bytes of a host thread's stack).
pub(crate) const MAX_NESTING: u32 = 1_000;

/// How deep a value can nest: serde_json's recursion limit, which the host's parser keeps.
const MAX_VALUE_DEPTH: usize = 128;

/// Which values an edge applies its subschema to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Step<'a> {
    /// The member of this name (`properties`).
    Member(&'a str),
    /// Any member (`additionalProperties`, `patternProperties`, `propertyNames`, …).
    AnyMember,
    /// The item at this index (`prefixItems`, an array of `items`).
    Item(usize),
    /// Any item (`items`, `contains`, `additionalItems`, `unevaluatedItems`).
    AnyItem,
    /// A value derived from this one (`contentSchema`): counted with members and items alike.
    Any,
}

/// Where a subschema is, for messages: rendered only when one is written.
#[derive(Clone, Copy)]
enum Where<'a> {
    Root,
    /// Under another node: its keyword, then a name or index under it if any.
    Under {
        parent: usize,
        keyword: &'a str,
        key: Option<Key<'a>>,
    },
    /// Reached by this reference.
    Reference(&'a str),
}

#[derive(Clone, Copy)]
enum Key<'a> {
    Name(&'a str),
    Index(usize),
}

struct Node<'a> {
    location: Where<'a>,
    /// Subschemas applied to the same value, once per naming.
    same: Vec<usize>,
    /// Subschemas applied to members or items.
    inner: Vec<(Step<'a>, usize)>,
    /// How many of `unevaluatedProperties` and `unevaluatedItems` it has: each finds what the
    /// others evaluated by checking every subschema it applies to the same value once more.
    marks: usize,
    /// Whether a keyword of it reads the whole value ([`Work::reading_per_level`]).
    reads: bool,
    /// Subschemas it brings in through `allOf` and references: what the schema compiler reads
    /// again for each `oneOf` or `anyOf` above it ([`Graph::check_alternatives`]).
    brought: Vec<usize>,
    /// The names of its `required` list and of its `properties`.
    names: u64,
    /// Whether it has `properties`.
    properties: bool,
    /// The branches of its `oneOf` and `anyOf`.
    alternatives: Vec<usize>,
}

/// The schema's subschemas and their edges, built from its root.
struct Graph<'a> {
    ids: HashMap<*const Value, usize>,
    nodes: Vec<Node<'a>>,
    values: Vec<&'a Value>,
    /// The resources references resolve against: the root and every object declaring an
    /// `$id` (or draft 4's `id`).
    resources: Vec<&'a Value>,
    /// Every object declaring an anchor (`$anchor`, `$dynamicAnchor`, a `#name` `$id`), by name.
    anchors: HashMap<&'a str, Vec<&'a Value>>,
    /// Objects declaring `"$recursiveAnchor": true`.
    recursive_anchors: Vec<&'a Value>,
    /// The most names one subschema's `required`, `dependentRequired` or `dependencies` lists.
    most_names: usize,
}

/// What checking a value against a schema may take: at most `per_level[d]` subschema
/// applications to each value nested `d` deep (none deeper than the list).
#[derive(Debug, Clone)]
pub(crate) struct Work {
    per_level: Vec<u64>,
    /// Of those, the applications of subschemas whose keywords read the whole value (its
    /// items' subtrees for `uniqueItems`, its text for `pattern`, `format` and lengths, the
    /// value for `enum` and `const`): each costs the value's size, not one step.
    reading_per_level: Vec<u64>,
    /// Most problems one application may report: one per name of its longest `required`
    /// (or `dependentRequired`, `dependencies`) list, and at least one.
    problems_per_application: u64,
}

impl Work {
    /// The most subschema applications checking `value` against the schema may take, an
    /// application that reads the whole value counted as many times as the value has nodes
    /// (and sixteen bytes of text).
    pub(crate) fn of(&self, value: &crate::plugin::input::InputNode<'_>) -> u64 {
        self.at_level(value, 0).0
    }

    /// The work at `level` and below for `value`, and `value`'s size.
    fn at_level(&self, value: &crate::plugin::input::InputNode<'_>, level: usize) -> (u64, u64) {
        use crate::plugin::input::InputNode;
        let here = self.per_level.get(level).copied().unwrap_or(0);
        let reading = self.reading_per_level.get(level).copied().unwrap_or(0);
        // No deeper than serde_json's nesting limit, so the recursion is bounded.
        let children = |(work, size): (u64, u64), child| {
            let (child_work, child_size) = self.at_level(child, level + 1);
            (
                work.saturating_add(child_work),
                size.saturating_add(child_size),
            )
        };
        let (below, size) = match value {
            InputNode::Array(items) => items.iter().fold((0, 1), children),
            // A member's name is checked too (`propertyNames` applies a subschema to it,
            // `patternProperties` matches every pattern against it): counted as a string one
            // level down, beside its value.
            InputNode::Object(members) => members.iter().fold((0, 1), |sum, (name, member)| {
                let (work, size) = children(sum, member);
                let name_size = text_size(name);
                let next = level + 1;
                let name_work = self
                    .per_level
                    .get(next)
                    .copied()
                    .unwrap_or(0)
                    .saturating_add(
                        self.reading_per_level
                            .get(next)
                            .copied()
                            .unwrap_or(0)
                            .saturating_mul(name_size),
                    );
                (
                    work.saturating_add(name_work),
                    size.saturating_add(name_size),
                )
            }),
            InputNode::String(text) => (0, text_size(text)),
            _ => (0, 1),
        };
        let work = here
            .saturating_add(reading.saturating_mul(size))
            .saturating_add(below);
        (work, size)
    }

    /// Most problems a check whose work is `work` ([`of`](Self::of)) may report.
    pub(crate) fn problems(&self, work: u64) -> u64 {
        work.saturating_mul(self.problems_per_application)
    }
}

/// The size of a text in the units of [`Work`]: one, and one per sixteen bytes.
fn text_size(text: &str) -> u64 {
    1 + text.len() as u64 / 16
}

/// Refuses `schema` (with the reason, to follow "its input schema …") when checking a value
/// against it could take more than the bounds of this module allow; otherwise what checking a
/// value may take.
pub(crate) fn check_work(schema: &Value) -> Result<Work, String> {
    let mut steps = Steps::default();
    let graph = Graph::build(schema, &mut steps)?;
    let order = graph.same_value_order()?;
    graph.check_alternatives(&order)?;
    graph.count(&order, &mut steps)
}

/// Most steps the schema compiler may take reading the branches of a schema's `oneOf` and
/// `anyOf` lists (a fraction of a second).
pub(crate) const MAX_ALTERNATIVES_WORK: u64 = 10_000_000;

impl<'a> Graph<'a> {
    fn build(root: &'a Value, steps: &mut Steps) -> Result<Self, String> {
        let mut graph = Graph {
            ids: HashMap::new(),
            nodes: Vec::new(),
            values: Vec::new(),
            resources: vec![root],
            anchors: HashMap::new(),
            recursive_anchors: Vec::new(),
            most_names: 0,
        };
        graph.index(root);
        graph.node(root, Where::Root);
        let mut next = 0;
        while next < graph.nodes.len() {
            graph.edges(next, steps)?;
            next += 1;
        }
        Ok(graph)
    }

    /// Records every resource and anchor the document declares, wherever it is (also in data
    /// such as a `const`: more places to resolve to only adds to the count).
    fn index(&mut self, root: &'a Value) {
        let mut stack = vec![root];
        while let Some(value) = stack.pop() {
            match value {
                Value::Object(members) => {
                    for key in ["$id", "id"] {
                        match members.get(key).and_then(Value::as_str) {
                            Some(id) if !id.starts_with('#') => self.resources.push(value),
                            Some(id) => self.anchor(&id[1..], value),
                            None => {}
                        }
                    }
                    for key in ["$anchor", "$dynamicAnchor"] {
                        if let Some(name) = members.get(key).and_then(Value::as_str) {
                            self.anchor(name, value);
                        }
                    }
                    if members.get("$recursiveAnchor") == Some(&Value::Bool(true)) {
                        self.recursive_anchors.push(value);
                    }
                    stack.extend(members.values());
                }
                Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
    }

    fn anchor(&mut self, name: &'a str, value: &'a Value) {
        self.anchors.entry(name).or_default().push(value);
    }

    /// The node of `value`, added (to have its edges read) if it is new.
    fn node(&mut self, value: &'a Value, location: Where<'a>) -> usize {
        let key: *const Value = value;
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.nodes.len();
        self.ids.insert(key, id);
        self.values.push(value);
        self.nodes.push(Node {
            location,
            same: Vec::new(),
            inner: Vec::new(),
            marks: 0,
            reads: false,
            brought: Vec::new(),
            names: 0,
            properties: false,
            alternatives: Vec::new(),
        });
        id
    }

    /// Reads the applicators of node `id` into its edges.
    fn edges(&mut self, id: usize, steps: &mut Steps) -> Result<(), String> {
        let Value::Object(members) = self.values[id] else {
            return Ok(()); // `true`, `false`, or what is no schema (jsonschema refuses it)
        };
        steps.take(1 + members.len())?;
        let mut same = Vec::new();
        let mut inner = Vec::new();
        let mut brought = Vec::new();
        let mut alternatives = Vec::new();
        // `unevaluatedItems` finds what `contains` evaluated by applying it to every item again,
        // and both `unevaluated…` keywords may check their own subschema twice per member.
        let unevaluated_items = members.contains_key("unevaluatedItems");
        for (keyword, value) in members {
            let under = |key| Where::Under {
                parent: id,
                keyword,
                key,
            };
            match keyword.as_str() {
                "allOf" | "anyOf" | "oneOf" => each_item(value, |index, item| {
                    let node = self.node(item, under(Some(Key::Index(index))));
                    same.push(node);
                    if keyword == "allOf" {
                        brought.push(node);
                    } else {
                        alternatives.push(node);
                    }
                }),
                "not" | "if" | "then" | "else" => same.push(self.node(value, under(None))),
                "dependentSchemas" | "dependencies" => each_member(value, |name, member| {
                    if member.is_object() || member.is_boolean() {
                        same.push(self.node(member, under(Some(Key::Name(name)))));
                    }
                }),
                "$ref" | "$dynamicRef" | "$recursiveRef" => {
                    let Some(reference) = value.as_str() else {
                        continue;
                    };
                    steps.take(self.resources.len() + self.recursive_anchors.len())?;
                    let targets = self.resolve(keyword, reference).map_err(|why| {
                        format!(
                            "its {keyword} {reference:?} (at {}) {why}",
                            self.render(under(None))
                        )
                    })?;
                    steps.take(targets.len())?;
                    for target in targets {
                        let node = self.node(target, Where::Reference(reference));
                        same.push(node);
                        brought.push(node);
                    }
                }
                "properties" => each_member(value, |name, member| {
                    let node = self.node(member, under(Some(Key::Name(name))));
                    inner.push((Step::Member(name), node));
                }),
                "patternProperties" => each_member(value, |name, member| {
                    let node = self.node(member, under(Some(Key::Name(name))));
                    inner.push((Step::AnyMember, node));
                }),
                "additionalProperties" | "propertyNames" => {
                    inner.push((Step::AnyMember, self.node(value, under(None))));
                }
                "unevaluatedProperties" => {
                    let node = self.node(value, under(None));
                    inner.extend([(Step::AnyMember, node), (Step::AnyMember, node)]);
                }
                "prefixItems" => each_item(value, |index, item| {
                    let node = self.node(item, under(Some(Key::Index(index))));
                    inner.push((Step::Item(index), node));
                }),
                "items" if value.is_array() => each_item(value, |index, item| {
                    let node = self.node(item, under(Some(Key::Index(index))));
                    inner.push((Step::Item(index), node));
                }),
                "unevaluatedItems" => {
                    let node = self.node(value, under(None));
                    inner.extend([(Step::AnyItem, node), (Step::AnyItem, node)]);
                }
                "contains" if unevaluated_items => {
                    let node = self.node(value, under(None));
                    inner.extend([(Step::AnyItem, node), (Step::AnyItem, node)]);
                }
                "items" | "additionalItems" | "contains" => {
                    inner.push((Step::AnyItem, self.node(value, under(None))));
                }
                "contentSchema" => inner.push((Step::Any, self.node(value, under(None)))),
                _ => {}
            }
        }
        self.nodes[id].same = same;
        self.nodes[id].inner = inner;
        self.nodes[id].brought = brought;
        self.nodes[id].alternatives = alternatives;
        let count = |key: &str| match members.get(key) {
            Some(Value::Array(items)) => items.len(),
            Some(Value::Object(members)) => members.len(),
            _ => 0,
        };
        self.nodes[id].names = (count("required") + count("properties")) as u64;
        self.nodes[id].properties = members.get("properties").is_some_and(Value::is_object);
        let names: usize = ["required", "dependentRequired", "dependencies"]
            .iter()
            .filter_map(|key| members.get(*key))
            .map(|value| match value {
                Value::Array(names) => names.len(),
                Value::Object(lists) => lists
                    .values()
                    .filter_map(Value::as_array)
                    .map(Vec::len)
                    .sum(),
                _ => 0,
            })
            .sum();
        self.most_names = self.most_names.max(names);
        self.nodes[id].reads = [
            "uniqueItems",
            "pattern",
            "format",
            "minLength",
            "maxLength",
            "enum",
            "const",
            // Drafts 6 and 7 assert these: the text is decoded (base64) or parsed (JSON).
            "contentMediaType",
            "contentEncoding",
        ]
        .iter()
        .any(|key| members.contains_key(*key));
        self.nodes[id].marks = ["unevaluatedProperties", "unevaluatedItems"]
            .iter()
            .filter(|key| members.contains_key(**key))
            .count();
        Ok(())
    }

    /// `location` as a JSON pointer from the root (`#/…`), or as the reference that reached it.
    fn render(&self, location: Where<'a>) -> String {
        let mut parts = Vec::new();
        let mut at = location;
        let start = loop {
            match at {
                Where::Root => break "#".to_owned(),
                Where::Reference(reference) => break reference.to_owned(),
                Where::Under {
                    parent,
                    keyword,
                    key,
                } => {
                    if let Some(key) = key {
                        parts.push(match key {
                            // Shown, not followed: hidden characters escaped.
                            Key::Name(name) => {
                                escape(&llm_worker_rules::tool::Visible(name).to_string())
                            }
                            Key::Index(index) => index.to_string(),
                        });
                    }
                    parts.push(escape(keyword));
                    at = self.nodes[parent].location;
                }
            }
        };
        parts.reverse();
        std::iter::once(start)
            .chain(parts)
            .collect::<Vec<_>>()
            .join("/")
    }

    /// Every subschema `reference` (of keyword `key`) may name; more than one when jsonschema
    /// could resolve it to any of them (the count takes them all). A reference with a base
    /// URI may name any resource the schema declares (jsonschema normalises URIs, so their
    /// text is not compared); one naming a JSON Schema meta-schema, or nothing in the
    /// schema, is refused with the reason.
    fn resolve(&self, key: &str, reference: &str) -> Result<Vec<&'a Value>, &'static str> {
        const NOTHING: &str = "names nothing in the schema; the host follows only references \
                               within a tool's schema (`#/…` pointers, anchors and the `$id`s \
                               the schema declares)";
        let (base, fragment) = reference.split_once('#').unwrap_or((reference, ""));
        if percent_decode(base)
            .ok_or(NOTHING)?
            .to_ascii_lowercase()
            .contains("json-schema.org")
        {
            return Err(
                "names a JSON Schema meta-schema; the host follows only references within a \
                 tool's schema",
            );
        }
        let bases = &self.resources;
        let mut found: Vec<&'a Value> = Vec::new();
        if key == "$recursiveRef" {
            found.extend(bases);
            found.extend(&self.recursive_anchors);
        }
        if fragment.is_empty() {
            found.extend(bases);
        } else if fragment.starts_with('/') {
            // Decoded, as RFC 3986 reads a fragment, and as written: whichever jsonschema
            // follows, the count includes it.
            let decoded = percent_decode(fragment).ok_or(NOTHING)?;
            for pointer in [decoded.as_str(), fragment] {
                found.extend(
                    bases
                        .iter()
                        .filter_map(|base| lenient_pointer(base, pointer)),
                );
            }
        } else {
            found.extend(self.anchors.get(fragment).into_iter().flatten());
        }
        let mut seen = HashSet::new();
        found.retain(|value| seen.insert(*value as *const Value));
        if found.is_empty() {
            return Err(NOTHING);
        }
        Ok(found)
    }

    /// The nodes in an order where each comes before those it applies to the same value;
    /// refused if they apply themselves without end.
    fn same_value_order(&self) -> Result<Vec<usize>, String> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Open,
            Done,
        }
        let mut marks = vec![Mark::New; self.nodes.len()];
        let mut finished = Vec::with_capacity(self.nodes.len());
        for start in 0..self.nodes.len() {
            if marks[start] != Mark::New {
                continue;
            }
            // Depth first without recursion: a reference chain may be thousands long.
            let mut stack = vec![(start, 0)];
            marks[start] = Mark::Open;
            while let Some((node, next)) = stack.pop() {
                if let Some(&target) = self.nodes[node].same.get(next) {
                    stack.push((node, next + 1));
                    match marks[target] {
                        Mark::New => {
                            marks[target] = Mark::Open;
                            stack.push((target, 0));
                        }
                        Mark::Open => {
                            return Err(format!(
                                "its subschema at {} applies itself to the same value without \
                                 end (through {})",
                                self.render(self.nodes[target].location),
                                self.render(self.nodes[node].location)
                            ));
                        }
                        Mark::Done => {}
                    }
                } else {
                    marks[node] = Mark::Done;
                    finished.push(node);
                }
            }
        }
        finished.reverse();
        Ok(finished)
    }

    /// Bounds what compiling the schema's `oneOf` and `anyOf` lists takes. jsonschema looks
    /// for a property that tells their branches apart: for each list, it reads every branch
    /// through its `allOf` and references (without remembering what it read), gathers the
    /// names of their `required` lists and `properties`, and looks each name up in every
    /// `properties` gathered. That is (names) × (`properties` lists) per list, which a schema
    /// of a few kilobytes can make billions: a `required` list of thousands of names reached a
    /// thousand ways under each of hundreds of lists. Counted here (an upper bound: every way
    /// through `allOf` and references, counted as often as it is), and refused over
    /// [`MAX_ALTERNATIVES_WORK`].
    fn check_alternatives(&self, order: &[usize]) -> Result<(), String> {
        // Children before the nodes that bring them in (`order` puts them after).
        let mut names = vec![0u64; self.nodes.len()];
        let mut lists = vec![0u64; self.nodes.len()];
        for &id in order.iter().rev() {
            let node = &self.nodes[id];
            let (mut these, mut those) = (node.names, u64::from(node.properties));
            for &child in &node.brought {
                these = these.saturating_add(names[child]);
                those = those.saturating_add(lists[child]);
            }
            names[id] = these;
            lists[id] = those;
        }
        let mut total: u64 = 0;
        for node in &self.nodes {
            if node.alternatives.len() < 2 {
                continue;
            }
            let (these, those) = node.alternatives.iter().fold((0u64, 0u64), |(n, l), &b| {
                (n.saturating_add(names[b]), l.saturating_add(lists[b]))
            });
            total = total.saturating_add(these.saturating_add(these.saturating_mul(those)));
            if total > MAX_ALTERNATIVES_WORK {
                return Err(format!(
                    "compiling its `oneOf` and `anyOf` lists would take over \
                     {MAX_ALTERNATIVES_WORK} steps (the one at {} alone: its branches bring \
                     {these} names of `required` lists and `properties`, to be looked up in \
                     {those} `properties` lists, through `allOf` and references); simplify them",
                    self.render(node.location)
                ));
            }
        }
        Ok(())
    }

    /// Counts, level by level, the subschemas applied to one value and how deeply their
    /// applications nest; refuses the schema at the first level over a bound.
    fn count(&self, order: &[usize], steps: &mut Steps) -> Result<Work, String> {
        let size = self.nodes.len();
        let mut position = vec![0; size];
        for (at, &node) in order.iter().enumerate() {
            position[node] = at;
        }
        let mut per_level = Vec::new();
        let mut reading_per_level = Vec::new();
        let mut applied = vec![0u64; size];
        for (node, count) in self.closure(HashMap::from([(0, 1)]), &position, steps, true)? {
            applied[node] = count;
        }
        let mut nesting = vec![0u32; size];
        nesting[0] = 1;
        self.deepen(&mut nesting, order);
        // Once the counts of one level are those of the one before, so are all the next ones.
        let mut steady = false;
        for level in 0..=MAX_VALUE_DEPTH {
            let total = applied.iter().fold(0u64, |sum, n| sum.saturating_add(*n));
            let deepest = nesting.iter().copied().max().unwrap_or(0);
            let at = if level == 0 {
                "the value itself".to_owned()
            } else {
                format!("a value nested {level} deep")
            };
            if total > MAX_APPLICATIONS {
                return Err(format!(
                    "checking a value against it could apply {} subschemas to {at} (its \
                     references and `allOf`/`anyOf`/`oneOf` name the same subschemas over and \
                     over); the host allows {MAX_APPLICATIONS}: name each subschema once per \
                     level",
                    if total == u64::MAX {
                        "more than 2⁶⁴".to_owned()
                    } else {
                        total.to_string()
                    }
                ));
            }
            if deepest > MAX_NESTING {
                return Err(format!(
                    "checking a value against it could nest {deepest} subschema applications \
                     by {at} (a chain of references that long); the host allows {MAX_NESTING}"
                ));
            }
            if total == 0 {
                break;
            }
            per_level.push(total);
            reading_per_level.push(
                applied
                    .iter()
                    .zip(&self.nodes)
                    .filter(|(_, node)| node.reads)
                    .fold(0u64, |sum, (n, _)| sum.saturating_add(*n)),
            );
            steps.take(size)?;
            let next_nesting = self.inner_nesting(&applied, &nesting, order);
            if !steady {
                let next = self.inner_counts(&applied, &position, steps)?;
                steady = next == applied;
                applied = next;
            }
            nesting = next_nesting;
        }
        Ok(Work {
            per_level,
            reading_per_level,
            problems_per_application: self.most_names.max(1) as u64,
        })
    }

    /// The subschemas applied (with how many times each) once `seeds` apply, following the
    /// applicators to the same value, in the nodes' order; with `marking`, also what
    /// `unevaluatedProperties` and `unevaluatedItems` check again: jsonschema finds what was
    /// evaluated by checking each subschema below them once more per path to it (and those
    /// checks run the `unevaluated…` keywords below, and so on).
    fn closure(
        &self,
        seeds: HashMap<usize, u64>,
        position: &[usize],
        steps: &mut Steps,
        marking: bool,
    ) -> Result<HashMap<usize, u64>, String> {
        let mut reached: Vec<usize> = seeds.keys().copied().collect();
        let mut seen: HashSet<usize> = reached.iter().copied().collect();
        let mut next = 0;
        while let Some(&node) = reached.get(next) {
            next += 1;
            steps.take(1 + self.nodes[node].same.len())?;
            for &target in &self.nodes[node].same {
                if seen.insert(target) {
                    reached.push(target);
                }
            }
        }
        reached.sort_unstable_by_key(|&node| position[node]);
        let mut counts = seeds;
        for node in reached {
            let count = counts.get(&node).copied().unwrap_or(0);
            if count == 0 {
                continue;
            }
            for &target in &self.nodes[node].same {
                let slot = counts.entry(target).or_default();
                *slot = slot.saturating_add(count);
            }
            let marks = if marking { self.nodes[node].marks } else { 0 };
            for _ in 0..marks {
                for &(below, paths) in self.paths_below(node, position, steps)?.iter() {
                    let slot = counts.entry(below).or_default();
                    *slot = slot.saturating_add(count.saturating_mul(paths));
                }
            }
        }
        Ok(counts)
    }

    /// Every subschema `node` applies to the same value, directly or not, with the number of
    /// paths to it (remembered in `steps`).
    fn paths_below(
        &self,
        node: usize,
        position: &[usize],
        steps: &mut Steps,
    ) -> Result<std::rc::Rc<[(usize, u64)]>, String> {
        if let Some(known) = steps.below.get(&node) {
            return Ok(std::rc::Rc::clone(known));
        }
        let paths: std::rc::Rc<[(usize, u64)]> = self
            .closure(HashMap::from([(node, 1)]), position, steps, false)?
            .into_iter()
            .filter(|&(below, _)| below != node)
            .collect();
        steps.below.insert(node, std::rc::Rc::clone(&paths));
        Ok(paths)
    }

    /// What applies to one member or item of a value that `applied` applies to: for each
    /// subschema, the most over every member name and every item index (each name's own
    /// applications followed to the end before the most is taken, so that one value is never
    /// counted less than it gets).
    fn inner_counts(
        &self,
        applied: &[u64],
        position: &[usize],
        steps: &mut Steps,
    ) -> Result<Vec<u64>, String> {
        let mut any_member = HashMap::new();
        let mut any_item = HashMap::new();
        let mut named: HashMap<Step<'a>, HashMap<usize, u64>> = HashMap::new();
        for (node, &count) in applied.iter().enumerate() {
            if count == 0 {
                continue;
            }
            for &(step, target) in &self.nodes[node].inner {
                let add = |seeds: &mut HashMap<usize, u64>| {
                    let slot = seeds.entry(target).or_default();
                    *slot = slot.saturating_add(count);
                };
                match step {
                    Step::AnyMember => add(&mut any_member),
                    Step::AnyItem => add(&mut any_item),
                    Step::Any => {
                        add(&mut any_member);
                        add(&mut any_item);
                    }
                    Step::Member(_) | Step::Item(_) => add(named.entry(step).or_default()),
                }
            }
        }
        // What every member (item) gets, and the most any one name (index) adds to it: the
        // closure adds up, so these add up too.
        let size = self.nodes.len();
        let mut member = vec![0u64; size];
        let mut item = vec![0u64; size];
        for (step, seeds) in named {
            let most = match step {
                Step::Member(_) => &mut member,
                _ => &mut item,
            };
            for (node, count) in self.closure(seeds, position, steps, true)? {
                most[node] = most[node].max(count);
            }
        }
        for (seeds, every) in [(any_member, &mut member), (any_item, &mut item)] {
            for (node, count) in self.closure(seeds, position, steps, true)? {
                every[node] = every[node].saturating_add(count);
            }
        }
        Ok(member
            .into_iter()
            .zip(item)
            .map(|(member, item)| member.max(item))
            .collect())
    }

    /// How deeply applications nest at the members and items of a value whose applications
    /// nest as `nesting` says (the deepest over every name and index: the most of sums is the
    /// sum of the mosts here).
    fn inner_nesting(&self, applied: &[u64], nesting: &[u32], order: &[usize]) -> Vec<u32> {
        let mut next = vec![0u32; self.nodes.len()];
        for (node, &count) in applied.iter().enumerate() {
            if count == 0 {
                continue;
            }
            for &(_, target) in &self.nodes[node].inner {
                next[target] = next[target].max(nesting[node].saturating_add(1));
            }
        }
        self.deepen(&mut next, order);
        next
    }

    /// Follows the applicators to the same value in `nesting`, each one level deeper.
    fn deepen(&self, nesting: &mut [u32], order: &[usize]) {
        for &node in order {
            if nesting[node] == 0 {
                continue;
            }
            for &target in &self.nodes[node].same {
                nesting[target] = nesting[target].max(nesting[node].saturating_add(1));
            }
        }
    }
}

/// The steps the count may take: a schema so tangled that counting would take longer is
/// refused rather than counted. Also what [`Graph::paths_below`] found.
#[derive(Default)]
struct Steps {
    taken: u64,
    below: HashMap<usize, std::rc::Rc<[(usize, u64)]>>,
}

impl Steps {
    /// Most steps one schema's count may take (a fraction of a second).
    const MAX: u64 = 20_000_000;

    fn take(&mut self, steps: usize) -> Result<(), String> {
        self.taken = self.taken.saturating_add(steps as u64);
        if self.taken > Self::MAX {
            return Err(format!(
                "the host could not bound the work of checking a value against it within {} \
                 steps (its subschemas name one another too many ways); simplify it",
                Self::MAX
            ));
        }
        Ok(())
    }
}

/// The value at a JSON pointer, reading array indices as `referencing` does
/// (`str::parse::<usize>`, which also takes `01` and `+1`, where RFC 6901 and serde_json do
/// not): a pointer jsonschema follows is followed here too.
fn lenient_pointer<'v>(value: &'v Value, pointer: &str) -> Option<&'v Value> {
    if pointer.is_empty() {
        return Some(value);
    }
    let tokens = pointer.strip_prefix('/')?;
    tokens.split('/').try_fold(value, |value, token| {
        let token = token.replace("~1", "/").replace("~0", "~");
        match value {
            Value::Object(members) => members.get(&token),
            Value::Array(items) => items.get(token.parse::<usize>().ok()?),
            _ => None,
        }
    })
}

/// A URI fragment's JSON pointer with its percent escapes decoded; `None` if they are not
/// UTF-8.
fn percent_decode(fragment: &str) -> Option<String> {
    let bytes = fragment.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = bytes
            .get(index + 1..index + 3)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[index], hex) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                index += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8(decoded).ok()
}

/// A key as a JSON pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn each_item<'a>(value: &'a Value, mut each: impl FnMut(usize, &'a Value)) {
    if let Value::Array(items) = value {
        for (index, item) in items.iter().enumerate() {
            each(index, item);
        }
    }
}

fn each_member<'a>(value: &'a Value, mut each: impl FnMut(&'a str, &'a Value)) {
    if let Value::Object(members) = value {
        let members: &'a Map<String, Value> = members;
        for (name, member) in members {
            each(name, member);
        }
    }
}
