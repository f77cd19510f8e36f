//! Reading a whole `#[tool_registry]` impl block: its `#[tool]` methods, the names they would
//! generate, and the block with the markers removed when there are errors.

use llm_worker_rules::prompt::MAX_PROMPTS;
use llm_worker_rules::resource::{MAX_RESOURCES, MAX_TEMPLATES};
use llm_worker_rules::tool::MAX_TOOLS;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{FnArg, ImplItem, ItemImpl};

use super::options::tool_options;
use super::{
    Annotations, Errors, PromptMethod, Registry, ResourceKind, ResourceMethod, ToolMethod,
    is_marker, to_pascal_case,
};

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
        let mut resources: Vec<ResourceMethod> = Vec::new();
        let mut prompts: Vec<PromptMethod> = Vec::new();
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
            let tool_marker = take_marker(method, "tool", &mut errors);
            let resource_marker = take_marker(method, "resource", &mut errors);
            let prompt_marker = take_marker(method, "prompt", &mut errors);
            let markers = [&tool_marker, &resource_marker, &prompt_marker];
            if markers.iter().any(|m| m.is_some()) {
                marked += 1;
            }
            if markers.iter().filter(|m| m.is_some()).count() > 1 {
                errors.push(syn::Error::new_spanned(
                    &method.sig.ident,
                    "a method is one of #[tool], #[resource] and #[prompt]; to offer the same \
                     thing twice, write a second method that calls this one",
                ));
                continue;
            }
            if let Some(marker) = resource_marker {
                let parsed =
                    ResourceMethod::parse(method, &marker, &mut errors, &mut description_paths);
                if let Some(resource) = parsed {
                    check_unique_resource(&resources, &resource, &mut errors);
                    resources.push(resource);
                }
                continue;
            }
            if let Some(marker) = prompt_marker {
                let parsed =
                    PromptMethod::parse(method, &marker, &mut errors, &mut description_paths);
                if let Some(prompt) = parsed {
                    if let Some(first) = prompts.iter().find(|p| p.name == prompt.name) {
                        let mut error = syn::Error::new_spanned(
                            &prompt.ident,
                            format!("a prompt named `{}` is defined twice", prompt.name),
                        );
                        error.combine(syn::Error::new_spanned(&first.ident, "first defined here"));
                        errors.push(error);
                    }
                    prompts.push(prompt);
                }
                continue;
            }
            let Some(marker) = tool_marker else {
                continue;
            };
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
        check_caps(&tools, &resources, &prompts, &mut errors);
        if marked == 0 {
            errors.push(syn::Error::new(
                item.self_ty.span(),
                "#[tool_registry] found no #[tool], #[resource] or #[prompt] methods in this \
                 impl block; mark the methods that are tools with #[tool]",
            ));
        }
        errors.finish()?;
        Ok(Self {
            item,
            tools,
            resources,
            prompts,
            description_paths,
        })
    }
}

/// The hosts' caps on how many tools, resources, templates and prompts one plugin lists: the
/// first method over a cap is the error.
fn check_caps(
    tools: &[ToolMethod],
    resources: &[ResourceMethod],
    prompts: &[PromptMethod],
    errors: &mut Errors,
) {
    let (fixed, templates): (Vec<_>, Vec<_>) = resources
        .iter()
        .partition(|r| matches!(r.kind, ResourceKind::Fixed(_)));
    let fixed: Vec<&syn::Ident> = fixed.iter().map(|r| &r.ident).collect();
    let templates: Vec<&syn::Ident> = templates.iter().map(|r| &r.ident).collect();
    let tools: Vec<&syn::Ident> = tools.iter().map(|t| &t.ident).collect();
    let prompts: Vec<&syn::Ident> = prompts.iter().map(|p| &p.ident).collect();
    for (listed, cap, what) in [
        (&tools, MAX_TOOLS, "#[tool] methods (tools)"),
        (
            &fixed,
            MAX_RESOURCES,
            "#[resource(uri = …)] methods (resources)",
        ),
        (
            &templates,
            MAX_TEMPLATES,
            "#[resource(template = …)] methods (templates)",
        ),
        (&prompts, MAX_PROMPTS, "#[prompt] methods (prompts)"),
    ] {
        if let Some(over) = listed.get(cap) {
            errors.push(syn::Error::new_spanned(
                over,
                format!(
                    "this impl block has {} {what}; hosts accept at most {cap} per plugin",
                    listed.len()
                ),
            ));
        }
    }
}

/// Finds the marker `name` on `method`, reports it if written twice, and tags it: it stays
/// (so the user's `use …::tool` counts as used), tagged so that the marker's macro knows it
/// was read here and passes the method through. Returns the marker as written.
fn take_marker(
    method: &mut syn::ImplItemFn,
    name: &str,
    errors: &mut Errors,
) -> Option<syn::Attribute> {
    let positions: Vec<usize> = method
        .attrs
        .iter()
        .enumerate()
        .filter(|(_, a)| is_marker(a, name))
        .map(|(i, _)| i)
        .collect();
    let &position = positions.first()?;
    for &extra in &positions[1..] {
        let message = if name == "tool" {
            "#[tool] is written twice on this method; once is enough (put the options in one: \
             `#[tool(title = \"…\", read_only)]`)"
                .to_owned()
        } else {
            format!(
                "#[{name}] is written twice on this method; once is enough (put the options in one)"
            )
        };
        errors.push(syn::Error::new_spanned(&method.attrs[extra], message));
    }
    let marker = method.attrs[position].clone();
    let path = marker.path().clone();
    method.attrs[position] = syn::parse_quote!(#[#path(__llm_worker_registered)]);
    for &extra in positions[1..].iter().rev() {
        method.attrs.remove(extra);
    }
    Some(marker)
}

/// Two `#[resource]` methods may not serve the same URI or template.
fn check_unique_resource(
    resources: &[ResourceMethod],
    resource: &ResourceMethod,
    errors: &mut Errors,
) {
    let key = |r: &ResourceMethod| match &r.kind {
        ResourceKind::Fixed(uri) => (false, uri.value()),
        ResourceKind::Template(template) => (true, template.value()),
    };
    let (is_template, text) = key(resource);
    if let Some(first) = resources
        .iter()
        .find(|r| key(r) == (is_template, text.clone()))
    {
        let what = if is_template { "template" } else { "URI" };
        let mut error = syn::Error::new_spanned(
            &resource.ident,
            format!("the resource {what} \"{text}\" is served by two methods; keep one"),
        );
        error.combine(syn::Error::new_spanned(&first.ident, "first defined here"));
        errors.push(error);
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
        let is_catalog = method
            .attrs
            .iter()
            .any(|a| is_marker(a, "resource") || is_marker(a, "prompt"));
        method.attrs.retain(|a| !is_marker(a, "description"));
        for attr in &mut method.attrs {
            if is_marker(attr, "tool") || is_marker(attr, "resource") || is_marker(attr, "prompt") {
                let path = attr.path().clone();
                *attr = syn::parse_quote!(#[#path(__llm_worker_registered)]);
            }
        }
        if is_catalog {
            for input in &mut method.sig.inputs {
                if let FnArg::Typed(typed) = input {
                    typed.attrs.retain(|attr| {
                        !is_marker(attr, "description") && !is_marker(attr, "complete")
                    });
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;
    use syn::LitStr;

    fn registry(tokens: proc_macro2::TokenStream) -> syn::Result<Registry> {
        Registry::parse(syn::parse2(tokens)?).map_err(|(error, _)| error)
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
