//! The lowering every provider dialect shares: one tool's input schema walked node by node,
//! local references resolved (inlined, with cycles and size bounded), `allOf` merged, tuples
//! turned into one item schema. `gemini.rs` and `strict.rs` say what each node becomes.
//!
//! schemars' own transforms (`AddNullable`, `ReplaceConstValue`, `ReplacePrefixItems`,
//! `RecursiveTransform`, …) rewrite a schema in place, keyword by keyword, without knowing
//! where a node sits; what stays hand-written here needs that: a reference is inlined or kept
//! depending on the keywords beside it and on whether it leads back to itself, `allOf`
//! branches must be merged (with conflicts reported), every error names the tool and the JSON
//! pointer of the part, and the walk is bounded in nodes and depth against hostile schemas.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::{ProviderError, ProviderFormat};

/// Most schema nodes one tool's lowered schema may have (inlining can multiply them).
pub(super) const MAX_NODES: usize = 100_000;
/// Deepest nesting of schemas (with references inlined) one tool may have.
pub(super) const MAX_DEPTH: usize = 128;
/// Most bytes of keywords (descriptions, `enum` lists, names…) one tool's lowered schema may
/// copy: inlining copies a definition's text at each use, so a schema small enough to load
/// could otherwise lower to gigabytes. 64 times the largest schema a plugin may declare.
pub(super) const MAX_BYTES: usize = 64 * llm_worker_rules::tool::MAX_SCHEMA_BYTES;

/// What the lowered schemas of all the tools of one export may add to the schemas as given,
/// together (in nodes, and bytes of keywords): each tool within its own bounds, 256 tools of a
/// plugin (and several plugins) could otherwise lower to gigabytes between them. Twice what
/// they are, plus twice one tool's bound.
pub(super) struct Budget {
    /// Nodes and bytes the tools lowered so far took.
    used: std::cell::Cell<(usize, usize)>,
    max_nodes: usize,
    max_bytes: usize,
}

impl Budget {
    /// The budget of an export of `schemas`.
    pub(super) fn for_schemas<'s>(schemas: impl Iterator<Item = &'s Value>) -> Self {
        fn nodes(value: &Value) -> usize {
            match value {
                Value::Object(object) => 1 + object.values().map(nodes).sum::<usize>(),
                Value::Array(items) => items.iter().map(nodes).sum(),
                _ => 0,
            }
        }
        let (given_nodes, given_bytes) = schemas.fold((0usize, 0usize), |(n, b), schema| {
            (
                n.saturating_add(nodes(schema)),
                b.saturating_add(schema.to_string().len()),
            )
        });
        Self {
            used: std::cell::Cell::new((0, 0)),
            max_nodes: given_nodes.saturating_mul(2).saturating_add(2 * MAX_NODES),
            max_bytes: given_bytes.saturating_mul(2).saturating_add(2 * MAX_BYTES),
        }
    }
}

/// Keywords whose value holds schemas (or maps names to schemas): the walk visits those
/// schemas as nodes of their own, so only their names are weighed with the node holding them.
const SCHEMA_HOLDERS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "items",
    "prefixItems",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
];

/// About what `value` takes written out as JSON, or more than `left` (counting stops there).
fn weigh(value: &Value, left: usize) -> usize {
    let mut total = 0;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        total += match value {
            Value::String(text) => text.len() + 2,
            Value::Array(items) => {
                stack.extend(items);
                items.len() + 2
            }
            Value::Object(members) => {
                stack.extend(members.values());
                members.keys().map(|key| key.len() + 4).sum::<usize>() + 2
            }
            Value::Number(_) => 8,
            Value::Bool(_) | Value::Null => 4,
        };
        if total > left {
            break;
        }
    }
    total
}

/// What lowering schema `node` copies of it beside its sub-schemas (which are weighed as
/// nodes of their own), or more than `left`.
fn own_bytes(node: &Value, left: usize) -> usize {
    let Value::Object(schema) = node else {
        return 0;
    };
    let mut total = 0;
    for (key, value) in schema {
        total += key.len() + 4;
        total += match (SCHEMA_HOLDERS.contains(&key.as_str()), value) {
            (true, Value::Object(named)) => named.keys().map(|name| name.len() + 4).sum(),
            (true, _) => 0,
            (false, value) => weigh(value, left.saturating_sub(total)),
        };
        if total > left {
            break;
        }
    }
    total
}

/// Keywords that only annotate: of two merged schemas, the first keeps its own.
pub(super) const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "example",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
    "$anchor",
];

/// `name` as one token of a JSON pointer.
pub(super) fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// The inverse of [`escape`].
pub(super) fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// A URI fragment with its `%XX` escapes decoded (as `$ref` fragments are written).
pub(super) fn percent_decode(fragment: &str) -> String {
    let bytes = fragment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(high), Some(low)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.extend(u8::try_from(high * 16 + low).ok());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| fragment.to_owned())
}

/// The names in a `type` keyword (a string or a list of strings).
pub(super) fn type_names(kind: &Value) -> Vec<String> {
    match kind {
        Value::String(name) => vec![name.clone()],
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// A `type` keyword for `names`: a string for one.
pub(super) fn type_value(mut names: Vec<String>) -> Value {
    if names.len() == 1 {
        Value::String(names.remove(0))
    } else {
        names.into_iter().map(Value::String).collect()
    }
}

/// The JSON type of every value, if they share one.
pub(super) fn type_of_values(values: &[Value]) -> Option<&'static str> {
    let kind = |value: &Value| match value {
        Value::String(_) => Some("string"),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some("integer"),
        Value::Number(_) => Some("number"),
        Value::Bool(_) => Some("boolean"),
        _ => None,
    };
    let first = kind(values.first()?)?;
    values
        .iter()
        .all(|value| match (kind(value), first) {
            (Some("integer" | "number"), "integer" | "number") => true,
            (other, first) => other == Some(first),
        })
        .then(|| {
            if first == "integer" && values.iter().any(|v| kind(v) == Some("number")) {
                "number"
            } else {
                first
            }
        })
}

/// Merges schema `from` into `into` (both must hold, as in `allOf`): annotations of `into`
/// win, properties and `required` are joined, types intersected. `Err(key)` on a conflict.
pub(super) fn merge_schemas(
    into: &mut Map<String, Value>,
    from: &Map<String, Value>,
) -> Result<(), String> {
    for (key, value) in from {
        // Definitions are read from the root only: whatever is merged in with them here is
        // never read, and copying them at each use would multiply them.
        if matches!(key.as_str(), "$defs" | "definitions") {
            continue;
        }
        let Some(existing) = into.get_mut(key) else {
            into.insert(key.clone(), value.clone());
            continue;
        };
        if *existing == *value || ANNOTATIONS.contains(&key.as_str()) {
            continue;
        }
        match key.as_str() {
            "properties" => {
                let (Some(mine), Some(theirs)) = (existing.as_object_mut(), value.as_object())
                else {
                    return Err(key.clone());
                };
                for (name, schema) in theirs {
                    match mine.get_mut(name) {
                        None => {
                            mine.insert(name.clone(), schema.clone());
                        }
                        Some(same) if *same == *schema => {}
                        // One `allOf` for all of them, not one inside another for each: a
                        // thousand branches constraining one property made a value as deep,
                        // which cloning and dropping walk recursively.
                        Some(other) => match other
                            .as_object_mut()
                            .filter(|only| only.len() == 1)
                            .and_then(|only| only.get_mut("allOf"))
                            .and_then(Value::as_array_mut)
                        {
                            Some(all) => all.push(schema.clone()),
                            None => *other = json!({"allOf": [other.take(), schema.clone()]}),
                        },
                    }
                }
            }
            "required" | "allOf" => {
                let (Some(mine), Some(theirs)) = (existing.as_array_mut(), value.as_array()) else {
                    return Err(key.clone());
                };
                for item in theirs {
                    if key == "allOf" || !mine.contains(item) {
                        mine.push(item.clone());
                    }
                }
            }
            "type" => {
                let theirs = type_names(value);
                let mut both = Vec::new();
                for name in type_names(existing) {
                    let kept = if theirs.contains(&name) {
                        Some(name)
                    } else if (name == "integer" && theirs.iter().any(|t| t == "number"))
                        || (name == "number" && theirs.iter().any(|t| t == "integer"))
                    {
                        Some("integer".to_owned())
                    } else {
                        None
                    };
                    if let Some(kept) = kept
                        && !both.contains(&kept)
                    {
                        both.push(kept);
                    }
                }
                if both.is_empty() {
                    return Err(key.clone());
                }
                *existing = type_value(both);
            }
            _ => return Err(key.clone()),
        }
    }
    Ok(())
}

/// Whether strict mode may keep `reference` as a reference: to the root, or to an entry of the
/// root's `$defs` or `definitions` (emitted there).
pub(super) fn keepable(reference: &str) -> bool {
    let Some(fragment) = reference.strip_prefix('#') else {
        return false;
    };
    let pointer = percent_decode(fragment);
    pointer.is_empty()
        || ["/$defs/", "/definitions/"].iter().any(|container| {
            pointer
                .strip_prefix(container)
                .is_some_and(|name| !name.is_empty() && !name.contains('/'))
        })
}

/// One tool's input schema, rewritten for Gemini or for OpenAI's strict mode.
pub(super) struct Lowering<'a> {
    pub(super) tool: &'a str,
    pub(super) format: ProviderFormat,
    pub(super) strict: bool,
    pub(super) root: &'a Value,
    /// The references being inlined, outermost first: meeting one again is a cycle.
    pub(super) expanding: Vec<String>,
    /// Strict mode: the references kept as references, whose targets go to `$defs`.
    pub(super) kept: BTreeSet<String>,
    pub(super) nodes: usize,
    /// About what the nodes lowered so far copy (see [`MAX_BYTES`]).
    pub(super) bytes: usize,
    pub(super) depth: usize,
    /// How many of the subschemas being lowered declare an `$id` of their own (below the
    /// root): a `$ref` inside one resolves against it, not against the root.
    pub(super) under_id: usize,
    /// What the export's tools take together.
    pub(super) budget: &'a Budget,
}

impl<'a> Lowering<'a> {
    pub(super) fn new(
        tool: &'a str,
        root: &'a Value,
        format: ProviderFormat,
        strict: bool,
        budget: &'a Budget,
    ) -> Self {
        Self {
            tool,
            format,
            strict,
            root,
            expanding: vec!["#".to_owned()],
            kept: BTreeSet::new(),
            nodes: 0,
            bytes: 0,
            depth: 0,
            under_id: 0,
            budget,
        }
    }

    pub(super) fn unsupported(&self, pointer: &str, reason: impl Into<String>) -> ProviderError {
        ProviderError::Unsupported {
            tool: self.tool.to_owned(),
            format: self.format,
            strict: self.strict,
            pointer: pointer.to_owned(),
            reason: reason.into(),
        }
    }

    pub(super) fn recursive(&self, pointer: &str, reference: &str) -> ProviderError {
        ProviderError::Recursive {
            tool: self.tool.to_owned(),
            format: self.format,
            strict: self.strict,
            pointer: pointer.to_owned(),
            reference: reference.to_owned(),
        }
    }

    /// What to do, at the end of a strict-mode error.
    pub(super) const LEAVE_STRICT: &'static str = "or leave strict mode off";

    /// The target of local reference `reference` (met at `at`), and its JSON pointer.
    pub(super) fn resolve(
        &self,
        reference: &str,
        at: &str,
    ) -> Result<(&'a Value, String), ProviderError> {
        let pointer = reference
            .strip_prefix('#')
            .map(percent_decode)
            .filter(|p| p.is_empty() || p.starts_with('/'))
            .ok_or_else(|| {
                self.unsupported(
                    at,
                    format!(
                        "`$ref` {reference:?} is not a local JSON pointer (#/…), so it cannot be \
                         inlined; refer to `$defs` of the same schema"
                    ),
                )
            })?;
        // A reference resolves against the nearest `$id` around it, and its target's own
        // references against the nearest around the target: only the root's is followed here.
        // (An `$id` that is only a fragment names an anchor: the base stays.)
        let nested_id = |value: &Value| {
            value
                .get("$id")
                .and_then(Value::as_str)
                .is_some_and(|id| !id.starts_with('#'))
        };
        let mut ancestor = self.root;
        let mut under_nested_id = self.under_id > 0;
        for token in pointer.split('/').skip(1) {
            let token = unescape(token);
            let next = match ancestor {
                Value::Object(object) => object.get(&token),
                Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            };
            let Some(next) = next else { break };
            // The target itself may name its own `$id` (it is then that resource's root).
            under_nested_id |= !std::ptr::eq(ancestor, self.root) && nested_id(ancestor);
            ancestor = next;
        }
        if under_nested_id {
            return Err(self.unsupported(
                at,
                format!(
                    "`$ref` {reference:?} is inside (or leads into) a part of the schema with an \
                     `$id` of its own, against which references resolve (not the schema's root, \
                     as inlining here would read them); write the definitions without nested \
                     `$id`s"
                ),
            ));
        }
        let target = self.root.pointer(&pointer).ok_or_else(|| {
            self.unsupported(
                at,
                format!("`$ref` {reference:?} points to nothing in the schema; fix the reference"),
            )
        })?;
        Ok((target, pointer))
    }

    /// `node` (at `at` in the input schema), rewritten.
    pub(super) fn lower(&mut self, node: &Value, at: &str) -> Result<Value, ProviderError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(self.unsupported(
                at,
                format!(
                    "inlining its references makes the schema larger than {MAX_NODES} parts; \
                     simplify the argument types"
                ),
            ));
        }
        let (nodes, bytes) = self.budget.used.get();
        self.budget.used.set((nodes + 1, bytes));
        if nodes + 1 > self.budget.max_nodes {
            return Err(self.unsupported(
                at,
                format!(
                    "with references inlined, the tools exported together have more than {} \
                     schema parts; export fewer tools at once, or simplify their argument \
                     types",
                    self.budget.max_nodes
                ),
            ));
        }
        let own = own_bytes(node, MAX_BYTES - self.bytes);
        self.charge(own, at)?;
        if self.depth >= MAX_DEPTH {
            return Err(self.unsupported(
                at,
                format!(
                    "the schema (references inlined) nests deeper than {MAX_DEPTH} levels; \
                     simplify the argument types"
                ),
            ));
        }
        let own_id = !at.is_empty() && node.get("$id").is_some();
        self.depth += 1;
        self.under_id += usize::from(own_id);
        let lowered = self.lower_node(node, at);
        self.under_id -= usize::from(own_id);
        self.depth -= 1;
        lowered
    }

    /// Counts `bytes` more against [`MAX_BYTES`]: an error past it.
    fn charge(&mut self, bytes: usize, at: &str) -> Result<(), ProviderError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > MAX_BYTES {
            return Err(self.unsupported(
                at,
                format!(
                    "inlining its references makes the schema's text larger than {} MiB \
                     (each use of a definition copies its descriptions and values); simplify \
                     the argument types or shorten what the definitions repeat",
                    MAX_BYTES >> 20
                ),
            ));
        }
        let (nodes, total) = self.budget.used.get();
        let total = total.saturating_add(bytes);
        self.budget.used.set((nodes, total));
        if total > self.budget.max_bytes {
            return Err(self.unsupported(
                at,
                format!(
                    "with references inlined, the schemas of the tools exported together take \
                     more than {} MiB of text; export fewer tools at once, or simplify their \
                     argument types",
                    self.budget.max_bytes >> 20
                ),
            ));
        }
        Ok(())
    }

    /// Counts a schema merging copied (see [`charge`](Self::charge)).
    fn charge_copy(&mut self, copied: &Map<String, Value>, at: &str) -> Result<(), ProviderError> {
        let left = MAX_BYTES.saturating_sub(self.bytes);
        let bytes = copied
            .iter()
            .map(|(key, value)| key.len() + weigh(value, left))
            .try_fold(0usize, |total, bytes| {
                let total = total.saturating_add(bytes);
                (total <= left).then_some(total)
            })
            .unwrap_or(usize::MAX);
        self.charge(bytes, at)
    }

    pub(super) fn lower_node(&mut self, node: &Value, at: &str) -> Result<Value, ProviderError> {
        let schema = match node {
            Value::Object(schema) => schema,
            Value::Bool(true) if self.strict => {
                return Err(self.unsupported(
                    at,
                    format!(
                        "the schema `true` accepts any JSON value; strict mode needs a type for \
                         every value: give this part a concrete type, {}",
                        Self::LEAVE_STRICT
                    ),
                ));
            }
            Value::Bool(true) => return Ok(json!({})),
            Value::Bool(false) => {
                return Err(self.unsupported(
                    at,
                    "the schema `false` accepts no value; remove this part from the schema",
                ));
            }
            _ => {
                return Err(self.unsupported(
                    at,
                    "this is not a schema (neither an object nor a boolean); fix the schema",
                ));
            }
        };
        if let Some(reference) = schema.get("$ref") {
            return self.inline_reference(schema, reference, at);
        }
        if let Some(branches) = schema.get("allOf") {
            return self.merge_all_of(schema, branches, at);
        }
        if self.strict {
            self.strict_node(schema, at)
        } else {
            self.gemini_node(schema, at)
        }
    }

    /// A schema with `$ref`: kept as it is (strict mode, nothing beside it), or its target
    /// merged with the keywords beside it and rewritten.
    pub(super) fn inline_reference(
        &mut self,
        schema: &Map<String, Value>,
        reference: &Value,
        at: &str,
    ) -> Result<Value, ProviderError> {
        let here = format!("{at}/$ref");
        let reference = reference
            .as_str()
            .ok_or_else(|| self.unsupported(&here, "`$ref` is not a string; fix the schema"))?;
        let keep = self.strict && keepable(reference);
        if keep && schema.len() == 1 {
            self.resolve(reference, &here)?;
            self.kept.insert(reference.to_owned());
            return Ok(json!({"$ref": reference}));
        }
        if self.expanding.iter().any(|r| r == reference) {
            if keep {
                // Recursion is fine in strict mode; what is beside the reference is lost.
                self.kept.insert(reference.to_owned());
                return Ok(json!({"$ref": reference}));
            }
            return Err(self.recursive(&here, reference));
        }
        let (target, target_at) = self.resolve(reference, &here)?;
        let mut merged = schema.clone();
        merged.remove("$ref");
        match target {
            Value::Object(target) => merge_schemas(&mut merged, target).map_err(|key| {
                self.unsupported(
                    at,
                    format!(
                        "`$ref` {reference:?} and the keywords beside it disagree on `{key}`, so \
                         they cannot be written as one schema; simplify the type"
                    ),
                )
            })?,
            Value::Bool(true) => {}
            other => return self.lower(other, &target_at),
        }
        self.charge_copy(&merged, at)?;
        self.expanding.push(reference.to_owned());
        let lowered = self.lower(&Value::Object(merged), &target_at);
        self.expanding.pop();
        lowered
    }

    /// A schema with `allOf`: its branches (references resolved) merged into it, rewritten.
    pub(super) fn merge_all_of(
        &mut self,
        schema: &Map<String, Value>,
        branches: &Value,
        at: &str,
    ) -> Result<Value, ProviderError> {
        let here = format!("{at}/allOf");
        let branches = branches.as_array().ok_or_else(|| {
            self.unsupported(&here, "`allOf` is not a list of schemas; fix the schema")
        })?;
        let mut merged = schema.clone();
        merged.remove("allOf");
        let mut pushed = 0;
        let mut result = Ok(());
        for (i, branch) in branches.iter().enumerate() {
            let branch_at = format!("{here}/{i}");
            result = self.merge_branch(&mut merged, branch, &branch_at, &mut pushed);
            if result.is_err() {
                break;
            }
        }
        let lowered = result
            .and_then(|()| self.charge_copy(&merged, at))
            .and_then(|()| self.lower(&Value::Object(merged), at));
        self.expanding.truncate(self.expanding.len() - pushed);
        lowered
    }

    pub(super) fn merge_branch(
        &mut self,
        merged: &mut Map<String, Value>,
        branch: &Value,
        at: &str,
        pushed: &mut usize,
    ) -> Result<(), ProviderError> {
        let mut branch = match branch {
            Value::Object(branch) => branch.clone(),
            Value::Bool(true) => return Ok(()),
            _ => {
                return Err(self.unsupported(
                    at,
                    "this `allOf` branch accepts no value; remove it from the schema",
                ));
            }
        };
        if let Some(reference) = branch.remove("$ref") {
            let here = format!("{at}/$ref");
            let reference = reference
                .as_str()
                .ok_or_else(|| self.unsupported(&here, "`$ref` is not a string; fix the schema"))?;
            if self.expanding.iter().any(|r| r == reference) {
                return Err(self.recursive(&here, reference));
            }
            let (target, _) = self.resolve(reference, &here)?;
            if let Value::Object(target) = target {
                merge_schemas(&mut branch, target).map_err(|key| self.conflict(at, &key))?;
            }
            self.expanding.push(reference.to_owned());
            *pushed += 1;
        }
        self.charge_copy(&branch, at)?;
        merge_schemas(merged, &branch).map_err(|key| self.conflict(at, &key))
    }

    pub(super) fn conflict(&self, at: &str, key: &str) -> ProviderError {
        self.unsupported(
            at,
            format!(
                "the schemas of `allOf` disagree on `{key}`, so they cannot be merged into one; \
                 simplify the type"
            ),
        )
    }

    /// The items of a tuple (`prefixItems`, or `items` as a list) as one schema: any of the
    /// item schemas (and of `items` beside `prefixItems`).
    pub(super) fn tuple_items(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
    ) -> Result<Value, ProviderError> {
        let mut parts = Vec::new();
        for key in ["prefixItems", "items"] {
            match schema.get(key) {
                Some(Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        parts.push((item, format!("{at}/{key}/{i}")));
                    }
                }
                Some(rest @ Value::Object(_)) => parts.push((rest, format!("{at}/{key}"))),
                _ => {}
            }
        }
        let mut branches: Vec<Value> = Vec::new();
        for (item, item_at) in parts {
            let lowered = self.lower(item, &item_at)?;
            if !branches.contains(&lowered) {
                branches.push(lowered);
            }
        }
        match branches.len() {
            0 => Err(self.unsupported(
                at,
                "the array is an empty tuple; take no argument here instead",
            )),
            1 => Ok(branches.remove(0)),
            _ => Ok(json!({"anyOf": branches})),
        }
    }
}
