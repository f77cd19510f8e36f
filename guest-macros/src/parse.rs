//! The model of a `#[tool_registry]` impl block: parsed from the user's syntax (keeping it for
//! spans) and validated, every misuse a spanned error.

use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, FnArg, GenericArgument, ImplItem, ImplItemFn, ItemImpl, Lit, LitStr,
    Meta, Pat, PathArguments, ReturnType, Type,
};

/// A `#[tool_registry]` impl block and its tools.
pub(crate) struct Registry {
    /// The impl block with the `#[tool]` and `#[description]` markers removed.
    pub(crate) item: ItemImpl,
    pub(crate) tools: Vec<ToolMethod>,
}

/// One `#[tool]` method.
pub(crate) struct ToolMethod {
    pub(crate) ident: syn::Ident,
    pub(crate) description: Option<String>,
    pub(crate) args: Vec<ToolArg>,
    pub(crate) is_async: bool,
    pub(crate) output: Output,
}

/// One argument of a tool method.
pub(crate) struct ToolArg {
    pub(crate) ident: syn::Ident,
    pub(crate) ty: Type,
    pub(crate) description: Option<LitStr>,
}

/// How a method's return value becomes the tool's output.
pub(crate) enum Output {
    /// Formatted with `{:?}`.
    Debug,
    /// A `Result`: `Err` becomes `ExecutionFailed`; `Ok` is formatted with `{:?}`, or given as
    /// it is when it is a `String`.
    Result { ok_is_string: bool },
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

fn is_marker(attr: &Attribute, name: &str) -> bool {
    attr.path().is_ident(name)
}

impl Registry {
    /// Parses and validates the impl block. On error, also returns the block with the markers
    /// removed, so that the rest of the user's code still compiles and only the real errors
    /// show.
    pub(crate) fn parse(item: ItemImpl) -> Result<Self, (syn::Error, Box<ItemImpl>)> {
        let mut cleaned = item.clone();
        match Self::parse_inner(item) {
            Ok(registry) => Ok(registry),
            Err(error) => {
                strip_markers(&mut cleaned);
                Err((error, Box::new(cleaned)))
            }
        }
    }

    fn parse_inner(mut item: ItemImpl) -> syn::Result<Self> {
        let mut errors = Errors::default();
        if let Some((_, path, _)) = &item.trait_ {
            return Err(syn::Error::new_spanned(
                path,
                "#[tool_registry] goes on an inherent impl block (`impl MyType { … }`), not on \
                 a trait implementation",
            ));
        }
        if !item.generics.params.is_empty() {
            errors.push(syn::Error::new_spanned(
                &item.generics,
                "#[tool_registry] does not support generic impl blocks; implement the tools on \
                 a concrete type",
            ));
        }
        let mut tools: Vec<ToolMethod> = Vec::new();
        let mut marked = 0;
        for impl_item in &mut item.items {
            let ImplItem::Fn(method) = impl_item else {
                continue;
            };
            let Some(position) = method.attrs.iter().position(|a| is_marker(a, "tool")) else {
                continue;
            };
            // Keep the marker (so the user's `use …::tool` counts as used), tagged so that the
            // `#[tool]` macro knows it was read here and passes the method through.
            marked += 1;
            let marker = method.attrs[position].clone();
            let path = marker.path().clone();
            method.attrs[position] = syn::parse_quote!(#[#path(__llm_worker_registered)]);
            if !matches!(marker.meta, Meta::Path(_)) {
                errors.push(syn::Error::new_spanned(
                    &marker,
                    "#[tool] takes no arguments: the tool's name is the method's name and its \
                     description is the doc comment",
                ));
            }
            match ToolMethod::parse(method, &mut errors) {
                Some(tool) => {
                    if let Some(first) = tools.iter().find(|t| t.ident == tool.ident) {
                        let mut error = syn::Error::new_spanned(
                            &tool.ident,
                            format!("a tool named `{}` is defined twice", tool.ident),
                        );
                        error.combine(syn::Error::new_spanned(&first.ident, "first defined here"));
                        errors.push(error);
                    }
                    tools.push(tool);
                }
                None => continue,
            }
        }
        if marked == 0 {
            errors.push(syn::Error::new(
                item.self_ty.span(),
                "#[tool_registry] found no #[tool] methods in this impl block; mark the \
                 methods that are tools with #[tool]",
            ));
        }
        errors.finish()?;
        Ok(Self { item, tools })
    }
}

impl ToolMethod {
    /// Parses a method, removing its argument markers; `None` if it has errors (pushed).
    fn parse(method: &mut ImplItemFn, errors: &mut Errors) -> Option<Self> {
        let before = errors.0.is_some();
        let sig = &method.sig;
        let ident = sig.ident.clone();
        if let Some(token) = &sig.unsafety {
            errors.push(syn::Error::new_spanned(
                token,
                "a #[tool] method cannot be `unsafe`: a model calls it with any input",
            ));
        }
        if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
            errors.push(syn::Error::new_spanned(
                &sig.generics,
                "a #[tool] method cannot be generic: its arguments must be concrete types to \
                 have a JSON schema",
            ));
        }
        if let Some(variadic) = &sig.variadic {
            errors.push(syn::Error::new_spanned(
                variadic,
                "a #[tool] method cannot be variadic",
            ));
        }
        match sig.inputs.first() {
            Some(FnArg::Receiver(receiver))
                if receiver.reference.is_some() && receiver.mutability.is_none() => {}
            Some(FnArg::Receiver(receiver)) if receiver.reference.is_none() => {
                errors.push(syn::Error::new_spanned(
                    receiver,
                    "a #[tool] method takes `&self`, not `self` by value: the same instance \
                     serves every call",
                ));
            }
            Some(FnArg::Receiver(receiver)) => {
                errors.push(syn::Error::new_spanned(
                    receiver,
                    "a #[tool] method takes `&self`, not `&mut self`: calls may run \
                     concurrently, so keep state in a Mutex or an atomic",
                ));
            }
            _ => {
                errors.push(syn::Error::new_spanned(
                    &sig.ident,
                    "a #[tool] method takes `&self` as its first parameter",
                ));
            }
        }

        let mut args = Vec::new();
        for input in method.sig.inputs.iter_mut() {
            let FnArg::Typed(typed) = input else {
                continue;
            };
            let mut description = None;
            let mut kept = Vec::new();
            for attr in typed.attrs.drain(..) {
                if is_marker(&attr, "description") {
                    match description_text(&attr) {
                        Ok(text) => description = Some(text),
                        Err(error) => errors.push(error),
                    }
                } else {
                    kept.push(attr);
                }
            }
            typed.attrs = kept;
            match &*typed.pat {
                Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                    args.push(ToolArg {
                        ident: pat.ident.clone(),
                        ty: (*typed.ty).clone(),
                        description,
                    });
                }
                other => errors.push(syn::Error::new_spanned(
                    other,
                    "a #[tool] argument must be a plain name (`query: String`): it becomes \
                     the JSON field of that name",
                )),
            }
        }

        let output = match &method.sig.output {
            ReturnType::Default => Output::Debug,
            ReturnType::Type(_, ty) => match result_ok_type(ty) {
                Some(ok) => Output::Result {
                    ok_is_string: is_string(ok),
                },
                None => Output::Debug,
            },
        };

        if errors.0.is_some() && !before {
            return None;
        }
        Some(Self {
            ident,
            description: doc_text(&method.attrs),
            args,
            is_async: method.sig.asyncness.is_some(),
            output,
        })
    }
}

/// Removes the `#[tool]` markers' effect and the `#[description]` attributes (which rustc does
/// not accept on parameters) from an impl block.
fn strip_markers(item: &mut ItemImpl) {
    for impl_item in &mut item.items {
        let ImplItem::Fn(method) = impl_item else {
            continue;
        };
        for attr in &mut method.attrs {
            if is_marker(attr, "tool") {
                let path = attr.path().clone();
                *attr = syn::parse_quote!(#[#path(__llm_worker_registered)]);
            }
        }
        for input in &mut method.sig.inputs {
            if let FnArg::Typed(typed) = input {
                typed.attrs.retain(|attr| !is_marker(attr, "description"));
            }
        }
    }
}

/// The text of `#[description = "…"]`.
fn description_text(attr: &Attribute) -> syn::Result<LitStr> {
    if let Meta::NameValue(nv) = &attr.meta
        && let Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) = &nv.value
    {
        return Ok(text.clone());
    }
    Err(syn::Error::new_spanned(
        attr,
        "expected `#[description = \"…\"]` with a string literal",
    ))
}

/// The whole doc comment, one line per `///` line, without the conventional leading space.
pub(crate) fn doc_text(attrs: &[Attribute]) -> Option<String> {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc"))
        .filter_map(|attr| match &attr.meta {
            Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(text),
                    ..
                }) => Some(text.value()),
                _ => None,
            },
            _ => None,
        })
        .flat_map(|text| {
            text.lines()
                .map(|line| line.strip_prefix(' ').unwrap_or(line).trim_end().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    let text = lines.join("\n").trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// The `T` of a return type spelled `Result<T, …>` (any path ending in `Result`).
pub(crate) fn result_ok_type(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    args.args.iter().find_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    })
}

fn is_string(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.qself.is_none()
        && path.path.segments.last().is_some_and(|s| s.ident == "String" && s.arguments.is_none()))
}

/// `search_user` → `SearchUser`.
pub(crate) fn to_pascal_case(name: &str) -> String {
    name.split('_')
        .filter(|segment| !segment.is_empty())
        .map(|segment| {
            let mut chars = segment.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_uppercase().chain(chars).collect()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn registry(tokens: proc_macro2::TokenStream) -> syn::Result<Registry> {
        Registry::parse(syn::parse2(tokens)?).map_err(|(error, _)| error)
    }

    #[test]
    fn pascal_case_follows_the_spec() {
        assert_eq!(to_pascal_case("search"), "Search");
        assert_eq!(to_pascal_case("get_user"), "GetUser");
        assert_eq!(to_pascal_case("a__b_"), "AB");
    }

    #[test]
    fn doc_comments_become_the_description() {
        let reg = registry(quote! {
            impl App {
                /// First line.
                /// Second line.
                #[tool]
                fn search(&self, #[description = "the query"] query: String) -> String { query }
                #[tool]
                async fn bare(&self) -> Result<String, String> { Ok(String::new()) }
                fn helper(&self) {}
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reg.tools.len(), 2);
        let search = &reg.tools[0];
        assert_eq!(
            search.description.as_deref(),
            Some("First line.\nSecond line.")
        );
        assert_eq!(search.args.len(), 1);
        assert_eq!(
            search.args[0]
                .description
                .as_ref()
                .map(LitStr::value)
                .as_deref(),
            Some("the query")
        );
        assert!(!search.is_async);
        assert!(matches!(search.output, Output::Debug));
        let bare = &reg.tools[1];
        assert!(bare.description.is_none());
        assert!(bare.is_async);
        assert!(matches!(bare.output, Output::Result { ok_is_string: true }));
        // The argument markers are removed; the tool markers are tagged as read.
        let item = &reg.item;
        let emitted = quote!(#item).to_string();
        assert!(!emitted.contains("description"));
        assert!(emitted.contains("# [tool (__llm_worker_registered)]"));
    }

    #[test]
    fn result_types_are_recognised_by_path() {
        let ty: Type = syn::parse_quote!(std::io::Result<u32>);
        assert!(result_ok_type(&ty).is_some());
        let ty: Type = syn::parse_quote!(Option<u32>);
        assert!(result_ok_type(&ty).is_none());
        let ty: Type = syn::parse_quote!(String);
        assert!(is_string(&ty));
    }

    #[test]
    fn misuse_is_reported_with_every_error() {
        let error = registry(quote! {
            impl App {
                #[tool]
                fn a(self) {}
                #[tool]
                fn b<T>(&self, x: T) {}
                #[tool]
                unsafe fn c(&self) {}
                #[tool]
                fn d(&self, #[description = 5] x: u32) {}
            }
        })
        .err()
        .map(|e| e.into_iter().count());
        assert_eq!(error, Some(4));
    }

    #[test]
    fn trait_impls_are_refused() {
        let error = registry(quote! { impl Trait for App { #[tool] fn a(&self) {} } });
        assert!(error.is_err());
    }
}
