//! The model of a `#[tool_registry]` impl block: parsed from the user's syntax (keeping it for
//! spans) and validated, every misuse a spanned error.

use heck::ToUpperCamelCase;
use syn::{Attribute, Expr, ExprLit, ItemImpl, Lit, LitStr, Meta, Type};

mod catalog;
mod method;
mod options;
mod registry;

/// A `#[tool_registry]` impl block and its tools, resources and prompts.
pub(crate) struct Registry {
    /// The impl block with the `#[tool]` and `#[description]` markers removed.
    pub(crate) item: ItemImpl,
    pub(crate) tools: Vec<ToolMethod>,
    pub(crate) resources: Vec<ResourceMethod>,
    pub(crate) prompts: Vec<PromptMethod>,
    /// The paths of the argument markers removed (`#[description]`, `#[complete]`), so that
    /// their imports count as used.
    pub(crate) description_paths: Vec<syn::Path>,
}

/// What a `#[resource]` method serves: one URI, or the URIs matching a template.
pub(crate) enum ResourceKind {
    Fixed(LitStr),
    Template(LitStr),
}

/// One `#[resource]` method.
pub(crate) struct ResourceMethod {
    pub(crate) ident: syn::Ident,
    pub(crate) kind: ResourceKind,
    /// `name = "…"`, or the method's name.
    pub(crate) name: String,
    pub(crate) title: Option<LitStr>,
    pub(crate) mime_type: Option<LitStr>,
    pub(crate) doc: Vec<Expr>,
    /// The template's variables, in the method's argument order.
    pub(crate) args: Vec<CatalogArg>,
    pub(crate) is_async: bool,
    pub(crate) cfgs: Vec<Attribute>,
    /// Where the return type is written (the method's name when there is none), for errors
    /// about what it returns.
    pub(crate) output_span: proc_macro2::Span,
}

/// One `#[prompt]` method.
pub(crate) struct PromptMethod {
    pub(crate) ident: syn::Ident,
    /// The prompt's name: the method's name without `r#`.
    pub(crate) name: String,
    pub(crate) title: Option<LitStr>,
    pub(crate) doc: Vec<Expr>,
    pub(crate) args: Vec<CatalogArg>,
    pub(crate) is_async: bool,
    pub(crate) cfgs: Vec<Attribute>,
    /// Where the return type is written (the method's name when there is none), for errors
    /// about what it returns.
    pub(crate) output_span: proc_macro2::Span,
}

/// An argument of a prompt, or a variable of a resource template.
pub(crate) struct CatalogArg {
    /// Its name: the parameter's name without `r#`.
    pub(crate) name: String,
    /// `String` (required) rather than `Option<String>`.
    pub(crate) required: bool,
    pub(crate) description: Option<LitStr>,
    /// `#[complete(method)]`.
    pub(crate) complete: Option<syn::Ident>,
}

/// One `#[tool]` method.
pub(crate) struct ToolMethod {
    pub(crate) ident: syn::Ident,
    /// The tool's name: the method's name without `r#`.
    pub(crate) name: String,
    /// The doc comment's `#[doc = …]` values in order (literals or `include_str!(…)`).
    pub(crate) doc: Vec<Expr>,
    pub(crate) args: Vec<ToolArg>,
    pub(crate) is_async: bool,
    /// The declared return type (`()` when there is none).
    pub(crate) output: Type,
    /// The method's `#[cfg(…)]` attributes, repeated on every generated item.
    pub(crate) cfgs: Vec<Attribute>,
    pub(crate) title: Option<LitStr>,
    pub(crate) annotations: Annotations,
}

/// `#[tool(read_only, destructive = false, …)]`.
#[derive(Default)]
pub(crate) struct Annotations {
    pub(crate) read_only: Option<bool>,
    pub(crate) destructive: Option<bool>,
    pub(crate) idempotent: Option<bool>,
    pub(crate) open_world: Option<bool>,
    /// `task = "optional"` or `"required"` (`TaskSupport`'s variant), if said.
    pub(crate) task: Option<syn::Ident>,
    /// `manual_start`: the tool calls `task::start()` itself (it may ask questions first).
    pub(crate) manual_start: Option<proc_macro2::Span>,
}

/// One argument of a tool method.
pub(crate) struct ToolArg {
    pub(crate) ident: syn::Ident,
    pub(crate) ty: Type,
    pub(crate) description: Option<LitStr>,
    /// `#[default = …]`.
    pub(crate) default: Option<Expr>,
    /// `#[serde(…)]` and `#[schemars(…)]`, moved to the generated field.
    pub(crate) field_attrs: Vec<Attribute>,
}

/// Collects errors so that one expansion reports every misuse at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(existing) => existing.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// Whether `attr` is the marker `name`, however it is spelled: `#[tool]`,
/// `#[llm_worker_guest::tool]`, `#[llm_worker::tool]`.
fn is_marker(attr: &Attribute, name: &str) -> bool {
    let path = attr.path();
    match path.segments.len() {
        1 => path.is_ident(name),
        _ => {
            let mut segments = path.segments.iter().map(|s| s.ident.to_string());
            let first = segments.next().unwrap_or_default();
            let last = path.segments.last().map(|s| s.ident.to_string());
            path.segments.len() == 2
                && matches!(
                    first.as_str(),
                    "llm_worker_guest" | "llm_worker" | "llm_worker_macros"
                )
                && last.as_deref() == Some(name)
        }
    }
}

/// The values of the `#[doc = …]` attributes: string literals from `///` and `/** */`, or
/// expressions such as `include_str!("…")`.
pub(crate) fn doc_pieces(attrs: &[Attribute]) -> Vec<Expr> {
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc"))
        .filter_map(|attr| match &attr.meta {
            Meta::NameValue(nv) => Some(nv.value.clone()),
            _ => None,
        })
        .collect()
}

/// Checks, at compile time, the description a tool, resource or prompt (`what`) gets from its
/// doc comments, by the host's rule for descriptions (`llm_worker_rules::tool::
/// check_description`): a description the host would refuse at load (a hidden character, too
/// long) is an error here, on the doc comment. The text checked is the one the SDK sends, made
/// by the same function (`llm_worker_rules::tool::doc_description`); a doc comment with a piece
/// that is not a string literal (`include_str!`) is checked at load only.
pub(crate) fn check_doc(attrs: &[Attribute], what: &str, errors: &mut Errors) {
    let mut pieces = Vec::new();
    let mut first = None;
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("doc")) {
        // `#[doc(alias = "…")]`, `#[doc(hidden)]`: not part of the description.
        if let Meta::NameValue(nv) = &attr.meta {
            match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(text),
                    ..
                }) => {
                    first.get_or_insert(attr);
                    pieces.push(text.value());
                }
                _ => return,
            }
        }
    }
    let Some(first) = first else {
        return;
    };
    let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let text = llm_worker_rules::tool::doc_description(&pieces);
    if let Err(problem) = llm_worker_rules::tool::check_description(&text) {
        errors.push(syn::Error::new_spanned(
            first,
            format!(
                "this {what}'s description (its doc comment) would be refused by the host: \
                 {problem}"
            ),
        ));
    }
}

/// Checks a name the host is given as written in Rust (a tool argument's, which becomes a
/// property of its input schema; a resource's when it has no `name = "…"`): Rust takes into
/// identifiers some characters shown as nothing (a combining grapheme joiner, a variation
/// selector), which the host refuses in what a plugin lists.
pub(crate) fn check_identifier_text(ident: &syn::Ident, what: &str, errors: &mut Errors) {
    use syn::ext::IdentExt as _;
    let name = ident.unraw().to_string();
    if let Some((at, found)) = llm_worker_rules::tool::first_hidden(&name) {
        errors.push(syn::Error::new_spanned(
            ident,
            format!(
                "this {what}'s name would be refused by the host: it holds {found:?} \
                 (U+{:04X}) at character {at}, which is shown as nothing; rename it",
                u32::from(found)
            ),
        ));
    }
}

/// Checks a prompt argument's `#[description = "…"]` by the host's rule for descriptions
/// (length, and no character a terminal acts on or that hides text).
pub(crate) fn check_full_description_literal(text: &LitStr, errors: &mut Errors) {
    if let Err(problem) = llm_worker_rules::tool::check_description(&text.value()) {
        errors.push(syn::Error::new_spanned(
            text,
            format!("this description would be refused by the host: {problem}"),
        ));
    }
}

/// Checks a `#[description = "…"]` (an argument's, in the input schema) by the host's rule
/// for the texts of a schema: no character a terminal acts on or that hides text. (Its length
/// counts toward the schema's, which the host bounds as a whole.)
pub(crate) fn check_description_literal(text: &LitStr, errors: &mut Errors) {
    if let Some((at, found)) = llm_worker_rules::tool::first_hidden(&text.value()) {
        errors.push(syn::Error::new_spanned(
            text,
            format!(
                "this description would be refused by the host: it holds {found:?} (U+{:04X}) \
                 at character {at}, which a terminal acts on or which hides text",
                u32::from(found)
            ),
        ));
    }
}

/// `search_user` → `SearchUser`: the spec's `{PascalCase}Args` and `Tool{PascalCase}`.
pub(crate) fn to_pascal_case(name: &str) -> String {
    name.to_upper_camel_case()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pascal_case_follows_the_spec() {
        assert_eq!(to_pascal_case("search"), "Search");
        assert_eq!(to_pascal_case("get_user"), "GetUser");
        assert_eq!(to_pascal_case("a__b_"), "AB");
    }
}
