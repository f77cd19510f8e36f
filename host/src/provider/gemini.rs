//! Gemini's dialect (`functionDeclarations[].parameters`): a subset of OpenAPI 3.0's schema
//! object, with references inlined, `null` as `nullable`, string-valued enums, and every
//! keyword Gemini does not take removed (see [`provider_json_with`](super::provider_json_with)).

use serde_json::{Map, Number, Value};

use super::ProviderError;
use super::lower::{Lowering, escape, merge_schemas, type_names, type_of_values};

/// Gemini's keywords that apply to one type only (the rest apply to any).
pub(super) fn gemini_keywords_of(kind: &str) -> &'static [&'static str] {
    match kind {
        "string" => &["format", "enum", "minLength", "maxLength", "pattern"],
        "integer" | "number" => &["format", "enum", "minimum", "maximum"],
        "array" => &["items", "minItems", "maxItems"],
        "object" => &[
            "properties",
            "required",
            "minProperties",
            "maxProperties",
            "propertyOrdering",
        ],
        _ => &[],
    }
}

/// Whether Gemini takes `format` for values of type `kind`.
pub(super) fn gemini_format(kind: &str, format: &str) -> bool {
    matches!(
        (kind, format),
        ("number", "float" | "double")
            | ("integer", "int32" | "int64")
            | ("string", "enum" | "date-time")
    )
}

impl Lowering<'_> {
    /// Gemini's parameters for the tool: `None` if it has none.
    pub(super) fn gemini_root(mut self) -> Result<Option<Value>, ProviderError> {
        let root = self.root;
        let Value::Object(mut lowered) = self.lower(root, "")? else {
            return Ok(None);
        };
        lowered.remove("nullable");
        let is_object = match lowered.get("type") {
            None => lowered.contains_key("properties") || lowered.is_empty(),
            Some(kind) => kind == "object",
        };
        if !is_object {
            return Err(self.unsupported(
                "",
                "the input schema is not an object; Gemini declares a function's parameters as \
                 an object of named properties: take the arguments as a struct",
            ));
        }
        let empty = lowered
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty);
        if empty {
            // Gemini refuses an object without properties: no parameters at all.
            return Ok(None);
        }
        lowered.insert("type".into(), "object".into());
        Ok(Some(Value::Object(lowered)))
    }

    /// One schema object (no `$ref`, no `allOf`) in Gemini's subset.
    pub(super) fn gemini_node(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
    ) -> Result<Value, ProviderError> {
        let mut out = Map::new();
        let mut nullable = schema.get("nullable") == Some(&Value::Bool(true));
        let mut types = schema.get("type").map(type_names).unwrap_or_default();
        if types.len() > 1 && types.iter().any(|t| t == "null") {
            nullable = true;
            types.retain(|t| t != "null");
        }
        let mut values = match (schema.get("enum"), schema.get("const")) {
            (Some(Value::Array(values)), _) => Some(values.clone()),
            (_, Some(value)) => Some(vec![value.clone()]),
            _ => None,
        };
        if let Some(values) = &mut values
            && values.contains(&Value::Null)
        {
            values.retain(|v| !v.is_null());
            if values.is_empty() {
                types = vec!["null".to_owned()];
            } else {
                nullable = true;
            }
        }
        if types.is_empty() {
            if schema.contains_key("properties") {
                types.push("object".to_owned());
            } else if schema.contains_key("items") || schema.contains_key("prefixItems") {
                types.push("array".to_owned());
            } else if let Some(kind) = values.as_deref().and_then(type_of_values) {
                types.push(kind.to_owned());
            }
        }
        for (key, value) in schema {
            let here = format!("{at}/{}", escape(key));
            match key.as_str() {
                "properties" => {
                    let mut properties = Map::new();
                    for (name, property) in value.as_object().into_iter().flatten() {
                        let lowered = self.lower(property, &format!("{here}/{}", escape(name)))?;
                        properties.insert(name.clone(), lowered);
                    }
                    out.insert(key.clone(), Value::Object(properties));
                }
                "items" | "prefixItems" => {
                    let tuple = schema.contains_key("prefixItems") || value.is_array();
                    if tuple && !out.contains_key("items") {
                        out.insert("items".into(), self.tuple_items(schema, at)?);
                    } else if !tuple {
                        out.insert("items".into(), self.lower(value, &here)?);
                    }
                }
                "required" => {
                    let names = schema.get("properties").and_then(Value::as_object);
                    let required: Vec<Value> = value
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|name| {
                            name.as_str()
                                .is_some_and(|name| names.is_some_and(|n| n.contains_key(name)))
                        })
                        .cloned()
                        .collect();
                    if !required.is_empty() {
                        out.insert(key.clone(), Value::Array(required));
                    }
                }
                "examples" => {
                    if !schema.contains_key("example")
                        && let Some(first) = value.as_array().and_then(|v| v.first())
                    {
                        out.insert("example".into(), first.clone());
                    }
                }
                "title" | "description" | "default" | "example" | "pattern" | "minLength"
                | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties"
                | "minimum" | "maximum" | "propertyOrdering" => {
                    out.insert(key.clone(), value.clone());
                }
                // Done below, or not in Gemini's subset.
                _ => {}
            }
        }
        match types.len() {
            0 => {}
            1 => {
                out.insert("type".into(), Value::String(types[0].clone()));
            }
            _ => {
                // Several types: one branch each, with the keywords of that type.
                let branches = types
                    .iter()
                    .map(|kind| {
                        let mut branch = Map::new();
                        branch.insert("type".into(), Value::String(kind.clone()));
                        for keyword in gemini_keywords_of(kind) {
                            if let Some(value) = out.get(*keyword) {
                                branch.insert((*keyword).into(), value.clone());
                            }
                        }
                        Value::Object(branch)
                    })
                    .collect::<Vec<_>>();
                for kind in &types {
                    for keyword in gemini_keywords_of(kind) {
                        out.remove(*keyword);
                    }
                }
                out.insert("anyOf".into(), Value::Array(branches));
            }
        }
        let kind = out.get("type").and_then(Value::as_str).map(str::to_owned);
        if let Some(values) = values
            && kind.as_deref() != Some("boolean")
            && kind.as_deref() != Some("null")
        {
            let strings = values
                .iter()
                .map(|v| match v {
                    Value::String(s) => Value::String(s.clone()),
                    other => Value::String(other.to_string()),
                })
                .collect();
            out.insert("enum".into(), Value::Array(strings));
            match kind.as_deref() {
                Some("integer" | "number") => {
                    out.insert("format".into(), "enum".into());
                }
                None if !out.contains_key("anyOf") => {
                    out.insert("type".into(), "string".into());
                }
                _ => {}
            }
        }
        if let (Some(kind), Some(format)) = (&kind, schema.get("format").and_then(Value::as_str))
            && gemini_format(kind, format)
            && !out.contains_key("format")
        {
            out.insert("format".into(), format.into());
        }
        Self::gemini_exclusive_bounds(schema, kind.as_deref(), &mut out);
        self.gemini_union(schema, at, &mut out, &mut nullable)?;
        if nullable {
            out.insert("nullable".into(), Value::Bool(true));
        }
        Ok(Value::Object(out))
    }

    /// `exclusiveMinimum`/`exclusiveMaximum` as Gemini's inclusive `minimum`/`maximum` (the
    /// next whole number for an integer, the bound itself for a number).
    pub(super) fn gemini_exclusive_bounds(
        schema: &Map<String, Value>,
        kind: Option<&str>,
        out: &mut Map<String, Value>,
    ) {
        for (exclusive, inclusive, step) in [
            ("exclusiveMinimum", "minimum", 1.0),
            ("exclusiveMaximum", "maximum", -1.0),
        ] {
            let Some(bound) = schema.get(exclusive).and_then(Value::as_f64) else {
                continue;
            };
            let bound = if kind == Some("integer") && bound.fract() == 0.0 {
                bound + step
            } else {
                bound
            };
            let tighter = out
                .get(inclusive)
                .and_then(Value::as_f64)
                .is_none_or(|current| {
                    if step > 0.0 {
                        bound > current
                    } else {
                        bound < current
                    }
                });
            if tighter {
                let number = if bound.fract() == 0.0 && bound.abs() < 9.0e15 {
                    Number::from(bound as i64)
                } else {
                    Number::from_f64(bound).unwrap_or_else(|| Number::from(0))
                };
                out.insert(inclusive.into(), Value::Number(number));
            }
        }
    }

    /// `anyOf`/`oneOf` for Gemini: `null` branches become `nullable`, one branch left is merged
    /// into the schema, more stay an `anyOf`.
    pub(super) fn gemini_union(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
        out: &mut Map<String, Value>,
        nullable: &mut bool,
    ) -> Result<(), ProviderError> {
        let unions: Vec<(&str, &Value)> = ["anyOf", "oneOf"]
            .into_iter()
            .filter_map(|key| schema.get(key).map(|value| (key, value)))
            .collect();
        let [(key, branches)] = unions.as_slice() else {
            if unions.is_empty() {
                return Ok(());
            }
            return Err(self.unsupported(
                at,
                "the schema has both `anyOf` and `oneOf`, which Gemini cannot write as one \
                 `anyOf`; simplify the type",
            ));
        };
        if out.contains_key("anyOf") {
            return Err(self.unsupported(
                at,
                format!(
                    "the schema has both a list of types and `{key}`, which Gemini cannot write \
                     as one `anyOf`; simplify the type"
                ),
            ));
        }
        let here = format!("{at}/{key}");
        let mut kept = Vec::new();
        for (i, branch) in branches.as_array().into_iter().flatten().enumerate() {
            let lowered = self.lower(branch, &format!("{here}/{i}"))?;
            let only_null = lowered.as_object().is_some_and(|b| {
                b.get("type").and_then(Value::as_str) == Some("null")
                    && b.keys()
                        .all(|k| matches!(k.as_str(), "type" | "title" | "description"))
            });
            if only_null {
                *nullable = true;
            } else if !kept.contains(&lowered) {
                kept.push(lowered);
            }
        }
        match kept.len() {
            0 => {
                if !out.contains_key("type") {
                    out.insert("type".into(), "null".into());
                    *nullable = false;
                }
            }
            1 => {
                if let Some(Value::Object(branch)) = kept.pop() {
                    if branch.get("nullable") == Some(&Value::Bool(true)) {
                        *nullable = true;
                    }
                    merge_schemas(out, &branch).map_err(|conflict| {
                        self.unsupported(
                            &here,
                            format!(
                                "the schema and its only `{key}` branch disagree on \
                                 `{conflict}`, so they cannot be merged; simplify the type"
                            ),
                        )
                    })?;
                }
            }
            _ => {
                out.insert("anyOf".into(), Value::Array(kept));
            }
        }
        Ok(())
    }
}
