//! OpenAI's strict mode (Structured Outputs): closed objects listing every property as
//! required, references kept where they can be, and an error naming the part for what strict
//! mode cannot express (see [`provider_json_with`](super::provider_json_with)).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::ProviderError;
use super::lower::{Lowering, escape, type_names, type_value, unescape};

/// The string formats OpenAI's strict mode lists as supported.
pub(super) const OPENAI_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

impl Lowering<'_> {
    /// OpenAI's strict-mode parameters for the tool.
    pub(super) fn strict_root(mut self) -> Result<Value, ProviderError> {
        let root = self.root;
        let mut lowered = self.lower(root, "")?;
        let Some(object) = lowered.as_object() else {
            return Err(self.unsupported("", "the input schema is not an object"));
        };
        if object.contains_key("anyOf") {
            return Err(self.unsupported(
                "",
                format!(
                    "the input schema is a union (`anyOf`/`oneOf`) at the root; strict mode needs \
                     one object of named properties at the root: put the choices in a property, \
                     {}",
                    Self::LEAVE_STRICT
                ),
            ));
        }
        if object.get("type").and_then(Value::as_str) != Some("object") {
            return Err(self.unsupported(
                "",
                format!(
                    "the input schema is not an object; strict mode needs one object of named \
                     properties at the root: take the arguments as a struct, {}",
                    Self::LEAVE_STRICT
                ),
            ));
        }
        // The targets of the references kept, until they refer to no new one.
        let mut done = BTreeSet::from(["#".to_owned()]);
        while let Some(reference) = self.kept.iter().find(|r| !done.contains(*r)).cloned() {
            done.insert(reference.clone());
            let (target, target_at) = self.resolve(&reference, "")?;
            self.expanding.push(reference.clone());
            let definition = self.lower(target, &target_at);
            self.expanding.pop();
            let definition = definition?;
            let mut tokens = target_at.splitn(3, '/').skip(1);
            if let (Some(container), Some(name), Some(object)) =
                (tokens.next(), tokens.next(), lowered.as_object_mut())
            {
                let definitions = object
                    .entry(unescape(container))
                    .or_insert_with(|| json!({}));
                if let Some(definitions) = definitions.as_object_mut() {
                    definitions.insert(unescape(name), definition);
                }
            }
        }
        Ok(lowered)
    }

    /// One schema object (no `$ref`, no `allOf`) in strict mode's subset.
    pub(super) fn strict_node(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
    ) -> Result<Value, ProviderError> {
        let mut out = Map::new();
        let mut types = schema.get("type").map(type_names).unwrap_or_default();
        if types.is_empty() {
            if schema.contains_key("properties") {
                types.push("object".to_owned());
            } else if schema.contains_key("items") || schema.contains_key("prefixItems") {
                types.push("array".to_owned());
            }
        }
        for (key, value) in schema {
            let here = format!("{at}/{}", escape(key));
            match key.as_str() {
                "description" | "title" | "enum" | "const" | "pattern" | "multipleOf"
                | "minItems" | "maxItems" => {
                    out.insert(key.clone(), value.clone());
                }
                "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum"
                    if value.is_number() =>
                {
                    out.insert(key.clone(), value.clone());
                }
                "format" => {
                    if let Some(format) = value.as_str()
                        && OPENAI_FORMATS.contains(&format)
                        && types.iter().any(|t| t == "string")
                    {
                        out.insert(key.clone(), value.clone());
                    }
                }
                "not" | "if" | "then" | "else" | "dependentRequired" | "dependentSchemas"
                | "dependencies" => {
                    return Err(self.unsupported(
                        &here,
                        format!(
                            "`{key}` has no equivalent in strict mode; remove it from the \
                             schema, {}",
                            Self::LEAVE_STRICT
                        ),
                    ));
                }
                "patternProperties" if value.as_object().is_some_and(|p| !p.is_empty()) => {
                    return Err(self.free_form(&here));
                }
                "unevaluatedProperties" | "unevaluatedItems" if *value != Value::Bool(false) => {
                    return Err(self.unsupported(
                        &here,
                        format!(
                            "`{key}` other than `false` has no equivalent in strict mode; name \
                             every part, {}",
                            Self::LEAVE_STRICT
                        ),
                    ));
                }
                // Structure: below. Anything else is an annotation, or a constraint strict mode
                // does not take (the tool still checks it).
                _ => {}
            }
        }
        let unions: Vec<&str> = ["anyOf", "oneOf"]
            .into_iter()
            .filter(|key| schema.contains_key(*key))
            .collect();
        if unions.len() > 1 {
            return Err(self.unsupported(
                at,
                format!(
                    "the schema has both `anyOf` and `oneOf`, which strict mode cannot write as \
                     one `anyOf`; simplify the type, {}",
                    Self::LEAVE_STRICT
                ),
            ));
        }
        if types.is_empty()
            && unions.is_empty()
            && !out.contains_key("enum")
            && !out.contains_key("const")
        {
            return Err(self.unsupported(
                at,
                format!(
                    "the value may be any JSON (no `type`, as for a `serde_json::Value`); strict \
                     mode needs a type for every value: give this part a concrete type, {}",
                    Self::LEAVE_STRICT
                ),
            ));
        }
        if !types.is_empty() {
            out.insert("type".into(), type_value(types.clone()));
        }
        if let Some(key) = unions.first() {
            let here = format!("{at}/{key}");
            let mut branches = Vec::new();
            for (i, branch) in schema[*key].as_array().into_iter().flatten().enumerate() {
                branches.push(self.lower(branch, &format!("{here}/{i}"))?);
            }
            out.insert("anyOf".into(), Value::Array(branches));
        }
        if types.iter().any(|t| t == "object") {
            self.strict_object(schema, at, &mut out)?;
        }
        if types.iter().any(|t| t == "array") {
            let items = match (schema.get("items"), schema.get("prefixItems")) {
                (Some(items @ (Value::Object(_) | Value::Bool(_))), None) => {
                    self.lower(items, &format!("{at}/items"))?
                }
                (Some(_), _) | (None, Some(_)) => self.tuple_items(schema, at)?,
                (None, None) => {
                    return Err(self.unsupported(
                        at,
                        format!(
                            "the array's items may be any JSON (no `items`); strict mode needs \
                             a type for every value: give the items a type, {}",
                            Self::LEAVE_STRICT
                        ),
                    ));
                }
            };
            out.insert("items".into(), items);
        }
        Ok(Value::Object(out))
    }

    pub(super) fn free_form(&self, at: &str) -> ProviderError {
        self.unsupported(
            at,
            format!(
                "the object takes keys that its `properties` do not name (a map, or a free-form \
                 object); strict mode needs every key named: take a struct with named fields \
                 here, {}",
                Self::LEAVE_STRICT
            ),
        )
    }

    /// An object's properties in strict mode: all required, the optional ones nullable, no
    /// other keys.
    pub(super) fn strict_object(
        &mut self,
        schema: &Map<String, Value>,
        at: &str,
        out: &mut Map<String, Value>,
    ) -> Result<(), ProviderError> {
        if let Some(extra) = schema.get("additionalProperties")
            && *extra != Value::Bool(false)
        {
            return Err(self.free_form(&format!("{at}/additionalProperties")));
        }
        let mut properties = Map::new();
        let mut names = Vec::new();
        for (name, property) in schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            let lowered = self.lower(property, &format!("{at}/properties/{}", escape(name)))?;
            // Required now, but never made nullable here: an optional property that accepts
            // `null` (an `Option`) is nullable already, and adding `null` to one that does not
            // would let the model send what the tool's own schema refuses.
            properties.insert(name.clone(), lowered);
            names.push(Value::String(name.clone()));
        }
        out.insert("properties".into(), Value::Object(properties));
        out.insert("required".into(), Value::Array(names));
        out.insert("additionalProperties".into(), Value::Bool(false));
        Ok(())
    }
}
