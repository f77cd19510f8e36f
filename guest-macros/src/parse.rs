//! The model of a `#[tool_registry]` impl block: parsed from the user's syntax (keeping it for
//! spans) and validated, every misuse a spanned error.

use heck::ToUpperCamelCase;
use llm_worker_rules::tool::{MAX_NAME_LEN, MAX_TITLE_BYTES, NameProblem, TitleProblem};
use syn::ext::IdentExt;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprLit, FnArg, ImplItem, ImplItemFn, ItemImpl, Lit, LitBool, LitStr, Meta,
    Pat, ReturnType, Token, Type,
};

/// A `#[tool_registry]` impl block and its tools.
pub(crate) struct Registry {
    /// The impl block with the `#[tool]` and `#[description]` markers removed.
    pub(crate) item: ItemImpl,
    pub(crate) tools: Vec<ToolMethod>,
    /// The paths of the `#[description]` markers removed, so that their imports count as used.
    pub(crate) description_paths: Vec<syn::Path>,
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
        let method_names: Vec<syn::Ident> = item
            .items
            .iter()
            .filter_map(|i| match i {
                ImplItem::Fn(f) => Some(f.sig.ident.clone()),
                _ => None,
            })
            .collect();
        let mut tools: Vec<ToolMethod> = Vec::new();
        let mut description_paths = Vec::new();
        let mut marked = 0;
        for impl_item in &mut item.items {
            let ImplItem::Fn(method) = impl_item else {
                continue;
            };
            for attr in &method.attrs {
                if is_marker(attr, "description") {
                    errors.push(syn::Error::new_spanned(
                        attr,
                        "#[description = \"…\"] describes an argument; a tool's own \
                         description is its doc comment (`/// …` above the method)",
                    ));
                }
            }
            let positions: Vec<usize> = method
                .attrs
                .iter()
                .enumerate()
                .filter(|(_, a)| is_marker(a, "tool"))
                .map(|(i, _)| i)
                .collect();
            let Some(&position) = positions.first() else {
                continue;
            };
            for &extra in &positions[1..] {
                errors.push(syn::Error::new_spanned(
                    &method.attrs[extra],
                    "#[tool] is written twice on this method; once is enough (put the options \
                     in one: `#[tool(title = \"…\", read_only)]`)",
                ));
            }
            // Keep the marker (so the user's `use …::tool` counts as used), tagged so that the
            // `#[tool]` macro knows it was read here and passes the method through.
            marked += 1;
            let marker = method.attrs[position].clone();
            let path = marker.path().clone();
            method.attrs[position] = syn::parse_quote!(#[#path(__llm_worker_registered)]);
            for &extra in positions[1..].iter().rev() {
                method.attrs.remove(extra);
            }
            let (title, annotations) = match tool_options(&marker) {
                Ok(options) => options,
                Err(error) => {
                    errors.push(error);
                    (None, Annotations::default())
                }
            };
            let Some(mut tool) = ToolMethod::parse(method, &mut errors, &mut description_paths)
            else {
                continue;
            };
            tool.title = title;
            tool.annotations = annotations;
            let factory = format!("{}_definition", tool.name);
            if let Some(clash) = method_names.iter().find(|m| m.unraw() == factory) {
                let mut error = syn::Error::new_spanned(
                    &tool.ident,
                    format!(
                        "the tool `{}` needs the generated method `{factory}`, but this impl \
                         block already has a method of that name; rename one of them",
                        tool.name
                    ),
                );
                error.combine(syn::Error::new_spanned(clash, "the other method"));
                errors.push(error);
            }
            let pascal = to_pascal_case(&tool.name);
            if let Some(first) = tools.iter().find(|t| to_pascal_case(&t.name) == pascal) {
                let message = if first.name == tool.name {
                    format!("a tool named `{}` is defined twice", tool.name)
                } else {
                    format!(
                        "the tools `{}` and `{}` would both generate `{pascal}Args` and \
                         `Tool{pascal}`; rename one of the methods",
                        first.name, tool.name
                    )
                };
                let mut error = syn::Error::new_spanned(&tool.ident, message);
                error.combine(syn::Error::new_spanned(&first.ident, "first defined here"));
                errors.push(error);
            }
            tools.push(tool);
        }
        if marked == 0 {
            errors.push(syn::Error::new(
                item.self_ty.span(),
                "#[tool_registry] found no #[tool] methods in this impl block; mark the \
                 methods that are tools with #[tool]",
            ));
        }
        errors.finish()?;
        Ok(Self {
            item,
            tools,
            description_paths,
        })
    }
}

/// The options of `#[tool(title = "…", read_only, destructive = false, …)]`.
fn tool_options(marker: &Attribute) -> syn::Result<(Option<LitStr>, Annotations)> {
    let mut title = None;
    let mut annotations = Annotations::default();
    let list = match &marker.meta {
        Meta::Path(_) => return Ok((title, annotations)),
        Meta::List(list) => list,
        Meta::NameValue(nv) => {
            return Err(syn::Error::new_spanned(
                nv,
                "write #[tool] or #[tool(title = \"…\", read_only, destructive, idempotent, \
                 open_world)]",
            ));
        }
    };
    // Every misuse of an option is collected, and the others still read: one build shows them
    // all. An error returned from the closure is a syntax error, which stops the reading.
    let mut errors = Errors::default();
    list.parse_nested_meta(|meta| {
        let slot = if meta.path.is_ident("title") {
            match option_value(&meta)? {
                Some(Expr::Lit(ExprLit {
                    lit: Lit::Str(text),
                    ..
                })) => match title_problem(&text.value()) {
                    Some(problem) => errors.push(syn::Error::new_spanned(&text, problem)),
                    None => title = Some(text),
                },
                Some(other) => errors.push(syn::Error::new_spanned(
                    other,
                    "expected `title = \"…\"` with a string literal",
                )),
                None => errors.push(syn::Error::new_spanned(
                    &meta.path,
                    "expected `title = \"…\"` with a string literal",
                )),
            }
            return Ok(());
        } else if meta.path.is_ident("read_only") {
            &mut annotations.read_only
        } else if meta.path.is_ident("destructive") {
            &mut annotations.destructive
        } else if meta.path.is_ident("idempotent") {
            &mut annotations.idempotent
        } else if meta.path.is_ident("open_world") {
            &mut annotations.open_world
        } else {
            option_value(&meta)?;
            errors.push(syn::Error::new_spanned(
                &meta.path,
                "unknown #[tool] option; the options are `title = \"…\"`, `read_only`, \
                 `destructive`, `idempotent` and `open_world` (the tool's name is the \
                 method's name, its description the doc comment)",
            ));
            return Ok(());
        };
        let parenthesized = meta.input.peek(syn::token::Paren);
        match option_value(&meta)? {
            None if parenthesized => errors.push(syn::Error::new_spanned(
                &meta.path,
                "write the hint alone (`read_only`) or with a value (`read_only = false`)",
            )),
            None => *slot = Some(true),
            Some(Expr::Lit(ExprLit {
                lit: Lit::Bool(LitBool { value, .. }),
                ..
            })) => *slot = Some(value),
            Some(other) => {
                errors.push(syn::Error::new_spanned(other, "expected `true` or `false`"));
            }
        }
        Ok(())
    })?;
    errors.finish()?;
    Ok((title, annotations))
}

/// The value of an option, `= value`, if it has one; `option(…)` is read past (and left for
/// the caller to refuse).
fn option_value(meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Expr>> {
    if meta.input.peek(Token![=]) {
        return meta.value()?.parse().map(Some);
    }
    if meta.input.peek(syn::token::Paren) {
        let content;
        syn::parenthesized!(content in meta.input);
        content.parse::<proc_macro2::TokenStream>()?;
    }
    Ok(None)
}

/// Why hosts would refuse `title` (and with it the whole plugin), if they would.
fn title_problem(title: &str) -> Option<String> {
    let problem = llm_worker_rules::tool::check_title(title).err()?;
    Some(match problem {
        TitleProblem::Empty => {
            "a tool's title must not be empty; leave `title` out instead".to_owned()
        }
        TitleProblem::NotOneLine => {
            "a tool's title is one line of text: no line breaks or control characters".to_owned()
        }
        TitleProblem::TooLong { len } => format!(
            "this title is {len} bytes; hosts accept titles of at most {MAX_TITLE_BYTES} bytes \
             (put the details in the doc comment)"
        ),
    })
}

/// Whether `ty` (anywhere inside) is `impl Trait`, which a generated item cannot name.
fn contains_impl_trait(ty: &Type) -> bool {
    struct Finder(bool);
    impl<'ast> syn::visit::Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = true;
        }
    }
    let mut finder = Finder(false);
    syn::visit::Visit::visit_type(&mut finder, ty);
    finder.0
}

/// The hosts' rule for tool names (`llm_worker_rules::tool::check_name`).
fn check_name(ident: &syn::Ident, name: &str, errors: &mut Errors) {
    let message = match llm_worker_rules::tool::check_name(name) {
        Ok(()) => return,
        Err(NameProblem::BadChar(bad)) => format!(
            "the tool name `{name}` contains {bad:?}; hosts accept 1 to {MAX_NAME_LEN} \
             characters of `A-Z a-z 0-9 _ -`, so rename the method"
        ),
        Err(NameProblem::TooLong { len }) => format!(
            "the tool name `{name}` has {len} characters; hosts accept 1 to {MAX_NAME_LEN} \
             characters of `A-Z a-z 0-9 _ -`, so shorten the method's name"
        ),
        // A method's name is never empty; should the rules grow, say what they say.
        Err(problem) => format!("the tool name `{name}` is refused by hosts: {problem}"),
    };
    errors.push(syn::Error::new_spanned(ident, message));
}

impl ToolMethod {
    /// Parses a method, removing its argument markers; `None` if it has errors (pushed).
    fn parse(
        method: &mut ImplItemFn,
        errors: &mut Errors,
        description_paths: &mut Vec<syn::Path>,
    ) -> Option<Self> {
        let before = errors.0.is_some();
        let sig = &method.sig;
        let ident = sig.ident.clone();
        let name = ident.unraw().to_string();
        check_name(&ident, &name, errors);
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
        check_receiver(sig, errors);

        let mut args = Vec::new();
        for input in method.sig.inputs.iter_mut() {
            let FnArg::Typed(typed) = input else {
                continue;
            };
            let mut description = None;
            let mut default = None;
            let mut field_attrs = Vec::new();
            let mut kept = Vec::new();
            for attr in typed.attrs.drain(..) {
                if is_marker(&attr, "description") {
                    description_paths.push(attr.path().clone());
                    match description_text(&attr) {
                        Ok(text) => description = Some(text),
                        Err(error) => errors.push(error),
                    }
                } else if attr.path().is_ident("default") {
                    match &attr.meta {
                        Meta::NameValue(nv) => default = Some(nv.value.clone()),
                        _ => errors.push(syn::Error::new_spanned(
                            &attr,
                            "expected `#[default = value]`, such as `#[default = 10]`",
                        )),
                    }
                } else if attr.path().is_ident("serde") || attr.path().is_ident("schemars") {
                    field_attrs.push(attr);
                } else {
                    kept.push(attr);
                }
            }
            typed.attrs = kept;
            if let Type::Reference(reference) = &*typed.ty {
                let owned = match &*reference.elem {
                    Type::Path(p) if p.path.is_ident("str") => "`String`".to_owned(),
                    Type::Slice(slice) => {
                        let elem = &slice.elem;
                        format!(
                            "`Vec<{}>`",
                            quote::quote!(#elem).to_string().replace(' ', "")
                        )
                    }
                    _ => "an owned type".to_owned(),
                };
                errors.push(syn::Error::new_spanned(
                    &typed.ty,
                    format!(
                        "a #[tool] argument cannot be a reference: use {owned} — the input is \
                         deserialised into owned values"
                    ),
                ));
            } else if contains_impl_trait(&typed.ty) {
                errors.push(syn::Error::new_spanned(
                    &typed.ty,
                    "a #[tool] argument needs a concrete type (it is deserialised from JSON), \
                     not `impl Trait`",
                ));
            }
            match &*typed.pat {
                Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                    args.push(ToolArg {
                        ident: pat.ident.clone(),
                        ty: (*typed.ty).clone(),
                        description,
                        default,
                        field_attrs,
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
            ReturnType::Default => syn::parse_quote!(()),
            ReturnType::Type(_, ty) => {
                if contains_impl_trait(ty) {
                    errors.push(syn::Error::new_spanned(
                        ty,
                        "a #[tool] method must name its return type (not `impl Trait`): the \
                         type decides how the value becomes the tool's output",
                    ));
                }
                (**ty).clone()
            }
        };

        if errors.0.is_some() && !before {
            return None;
        }
        let cfgs = method
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("cfg"))
            .cloned()
            .collect();
        Some(Self {
            ident,
            name,
            doc: doc_pieces(&method.attrs),
            args,
            is_async: method.sig.asyncness.is_some(),
            output,
            cfgs,
            title: None,
            annotations: Annotations::default(),
        })
    }
}

/// A tool method takes `&self` (also written `self: &Self`).
fn check_receiver(sig: &syn::Signature, errors: &mut Errors) {
    let Some(FnArg::Receiver(receiver)) = sig.inputs.first() else {
        errors.push(syn::Error::new_spanned(
            &sig.ident,
            "a #[tool] method takes `&self` as its first parameter",
        ));
        return;
    };
    let by_mut_ref = || {
        syn::Error::new_spanned(
            receiver,
            "a #[tool] method takes `&self`, not `&mut self`: calls may run concurrently, so \
             keep state in a Mutex or an atomic",
        )
    };
    if receiver.colon_token.is_none() {
        match (&receiver.reference, &receiver.mutability) {
            (Some(_), None) => {}
            (Some(_), Some(_)) => errors.push(by_mut_ref()),
            (None, _) => errors.push(syn::Error::new_spanned(
                receiver,
                "a #[tool] method takes `&self`, not `self` by value: the same instance serves \
                 every call",
            )),
        }
        return;
    }
    // `self: T`: `&Self` is `&self`; anything else is refused with what it is.
    match &*receiver.ty {
        Type::Reference(r) if r.mutability.is_none() => {}
        Type::Reference(_) => errors.push(by_mut_ref()),
        other => {
            let written = quote::quote!(#other).to_string().replace(' ', "");
            errors.push(syn::Error::new_spanned(
                receiver,
                format!(
                    "a #[tool] method takes `&self`, not `self: {written}`: each tool holds a \
                     clone of the registry value, so put what must be shared (an `Arc<…>`) in a \
                     field"
                ),
            ));
        }
    }
}

/// Removes the `#[tool]` markers' effect and the argument attributes (which rustc does not
/// accept on parameters) from an impl block.
fn strip_markers(item: &mut ItemImpl) {
    for impl_item in &mut item.items {
        let ImplItem::Fn(method) = impl_item else {
            continue;
        };
        let is_tool = method.attrs.iter().any(|a| is_marker(a, "tool"));
        method.attrs.retain(|a| !is_marker(a, "description"));
        for attr in &mut method.attrs {
            if is_marker(attr, "tool") {
                let path = attr.path().clone();
                *attr = syn::parse_quote!(#[#path(__llm_worker_registered)]);
            }
        }
        if !is_tool {
            continue;
        }
        for input in &mut method.sig.inputs {
            if let FnArg::Typed(typed) = input {
                typed.attrs.retain(|attr| {
                    !is_marker(attr, "description")
                        && !attr.path().is_ident("default")
                        && !attr.path().is_ident("serde")
                        && !attr.path().is_ident("schemars")
                });
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

/// `search_user` → `SearchUser`: the spec's `{PascalCase}Args` and `Tool{PascalCase}`.
pub(crate) fn to_pascal_case(name: &str) -> String {
    name.to_upper_camel_case()
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
    fn tools_arguments_and_options_are_read() {
        let reg = registry(quote! {
            impl App {
                /// First line.
                #[tool(title = "Search", read_only, destructive = false)]
                fn search(&self, #[description = "the query"] #[default = 5] limit: u32) -> String { query }
                #[tool]
                async fn r#type(self: &Self) -> Result<String, String> { Ok(String::new()) }
                fn helper(&self) {}
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reg.tools.len(), 2);
        let search = &reg.tools[0];
        assert_eq!(search.doc.len(), 1);
        assert_eq!(
            search.title.as_ref().map(LitStr::value).as_deref(),
            Some("Search")
        );
        assert_eq!(search.annotations.read_only, Some(true));
        assert_eq!(search.annotations.destructive, Some(false));
        assert_eq!(search.annotations.idempotent, None);
        assert_eq!(search.args.len(), 1);
        assert!(search.args[0].default.is_some());
        assert_eq!(
            search.args[0]
                .description
                .as_ref()
                .map(LitStr::value)
                .as_deref(),
            Some("the query")
        );
        assert!(!search.is_async);
        let raw = &reg.tools[1];
        assert_eq!(raw.name, "type");
        assert!(raw.doc.is_empty());
        assert!(raw.is_async);
        // The argument markers are removed; the tool markers are tagged as read.
        let item = &reg.item;
        let emitted = quote!(#item).to_string();
        assert!(!emitted.contains("description"));
        assert!(!emitted.contains("default"));
        assert!(emitted.contains("# [tool (__llm_worker_registered)]"));
    }

    #[test]
    fn markers_are_recognised_by_path() {
        let reg = registry(quote! {
            impl App {
                #[llm_worker_guest::tool]
                fn a(&self, #[llm_worker_guest::description = "x"] x: u32) {}
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reg.tools.len(), 1);
        assert!(reg.tools[0].args[0].description.is_some());
        assert_eq!(reg.description_paths.len(), 1);
    }

    #[test]
    fn generated_name_clashes_are_errors() {
        let clash = |tokens| registry(tokens).err().map(|e| e.to_string());
        let text =
            clash(quote! { impl App { #[tool] fn get_x(&self) {} #[tool] fn get__x(&self) {} } });
        assert!(text.is_some_and(|t| t.contains("`get_x` and `get__x`")));
        let text = clash(quote! { impl App { #[tool] fn a(&self) {} fn a_definition(&self) {} } });
        assert!(text.is_some_and(|t| t.contains("a_definition")));
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
