//! Reading `#[resource(…)]` and `#[prompt(…)]` methods: their options, their text arguments
//! (with `#[description]` and `#[complete(…)]`), each misuse a spanned error.

use llm_worker_rules::prompt::MAX_PROMPT_ARGUMENTS;
use llm_worker_rules::resource::{UriProblem, check_mime_type, check_resource_uri};
use llm_worker_rules::template::{Piece, check_template, pieces};
use llm_worker_rules::tool::{MAX_NAME_LEN, NameProblem};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, FnArg, ImplItemFn, Lit, LitStr, Meta, Pat, Type};

use super::method::{check_receiver, contains_impl_trait, description_text};
use super::options::option_value;
use super::{
    CatalogArg, Errors, PromptMethod, ResourceKind, ResourceMethod, doc_pieces, is_marker,
};

/// A parameter as written, with its markers read and removed.
struct RawArg {
    ident: syn::Ident,
    ty: Type,
    description: Option<(Attribute, LitStr)>,
    complete: Option<syn::Ident>,
}

impl ResourceMethod {
    /// Parses a `#[resource(…)]` method, removing its argument markers; `None` if it has
    /// errors (pushed).
    pub(super) fn parse(
        method: &mut ImplItemFn,
        marker: &Attribute,
        errors: &mut Errors,
        marker_paths: &mut Vec<syn::Path>,
    ) -> Option<Self> {
        let before = errors.0.is_some();
        let options = resource_options(marker, errors);
        super::check_doc(&method.attrs, "resource", errors);
        check_signature(&method.sig, "resource", errors);
        let raw = raw_args(method, errors, marker_paths);
        let ident = method.sig.ident.clone();
        let kind = match (options.uri, options.template) {
            (Some(uri), None) => {
                check_uri(&uri, errors);
                ResourceKind::Fixed(uri)
            }
            (None, Some(template)) => ResourceKind::Template(template),
            (Some(uri), Some(_)) => {
                errors.push(syn::Error::new_spanned(
                    uri,
                    "give `uri = \"…\"` (one resource) or `template = \"…\"` (a family of \
                     them), not both",
                ));
                return None;
            }
            (None, None) => {
                errors.push(syn::Error::new_spanned(
                    marker,
                    "#[resource] needs `uri = \"scheme://…\"` (one resource, read by a method \
                     taking only `&self`) or `template = \"scheme://…/{id}\"` (a family whose \
                     variables are the method's `String` arguments)",
                ));
                return None;
            }
        };
        let mut args = Vec::new();
        match &kind {
            ResourceKind::Fixed(_) => {
                if let Some(first) = raw.first() {
                    errors.push(syn::Error::new_spanned(
                        &first.ident,
                        "a #[resource(uri = …)] method takes only `&self`; for URIs with \
                         variables, write `template = \"…/{name}\"` with one `{name}` per \
                         argument",
                    ));
                }
            }
            ResourceKind::Template(template) => {
                args = template_args(template, raw, errors);
            }
        }
        if errors.0.is_some() && !before {
            return None;
        }
        if options.name.is_none() {
            // The method's name is the resource's, shown to users as a title is: held to the
            // host's rule for titles (length, nothing hidden).
            let name = ident.unraw().to_string();
            if let Err(problem) = llm_worker_rules::tool::check_title(&name) {
                errors.push(syn::Error::new_spanned(
                    &ident,
                    format!(
                        "this resource's name (its method's) would be refused by the host: \
                         {problem}; rename the method or give `name = \"…\"`"
                    ),
                ));
            }
        }
        Some(Self {
            name: options
                .name
                .map_or_else(|| ident.unraw().to_string(), |name| name.value()),
            ident,
            kind,
            title: options.title,
            mime_type: options.mime_type,
            doc: doc_pieces(&method.attrs),
            args,
            is_async: method.sig.asyncness.is_some(),
            cfgs: cfgs(&method.attrs),
            output_span: output_span(&method.sig),
        })
    }
}

impl PromptMethod {
    /// Parses a `#[prompt(…)]` method, removing its argument markers; `None` if it has errors
    /// (pushed).
    pub(super) fn parse(
        method: &mut ImplItemFn,
        marker: &Attribute,
        errors: &mut Errors,
        marker_paths: &mut Vec<syn::Path>,
    ) -> Option<Self> {
        let before = errors.0.is_some();
        let title = prompt_options(marker, errors);
        super::check_doc(&method.attrs, "prompt", errors);
        check_signature(&method.sig, "prompt", errors);
        let ident = method.sig.ident.clone();
        let name = ident.unraw().to_string();
        check_prompt_name(&ident, &name, errors);
        let mut args = Vec::new();
        for arg in raw_args(method, errors, marker_paths) {
            let required = if is_string(&arg.ty) {
                true
            } else if is_option_of_string(&arg.ty) {
                false
            } else {
                errors.push(syn::Error::new_spanned(
                    &arg.ty,
                    "a #[prompt] argument is a `String` (required) or an `Option<String>` \
                     (optional): the user gives prompt arguments as text, so parse other types \
                     in the method",
                ));
                continue;
            };
            let name = arg.ident.unraw().to_string();
            check_argument_name(&arg.ident, &name, errors);
            args.push(CatalogArg {
                name,
                required,
                description: arg.description.map(|(_, text)| text),
                complete: arg.complete,
            });
        }
        if args.len() > MAX_PROMPT_ARGUMENTS {
            errors.push(syn::Error::new_spanned(
                &ident,
                format!(
                    "this prompt has {} arguments; hosts accept at most {MAX_PROMPT_ARGUMENTS}",
                    args.len()
                ),
            ));
        }
        if errors.0.is_some() && !before {
            return None;
        }
        Some(Self {
            ident,
            name,
            title,
            doc: doc_pieces(&method.attrs),
            args,
            is_async: method.sig.asyncness.is_some(),
            cfgs: cfgs(&method.attrs),
            output_span: output_span(&method.sig),
        })
    }
}

fn output_span(sig: &syn::Signature) -> proc_macro2::Span {
    match &sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => sig.ident.span(),
    }
}

fn cfgs(attrs: &[Attribute]) -> Vec<Attribute> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .cloned()
        .collect()
}

/// The checks every marked method shares: not unsafe, not generic, `&self`.
fn check_signature(sig: &syn::Signature, kind: &str, errors: &mut Errors) {
    if let Some(token) = &sig.unsafety {
        errors.push(syn::Error::new_spanned(
            token,
            format!("a #[{kind}] method cannot be `unsafe`: a client calls it with any input"),
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(syn::Error::new_spanned(
            &sig.generics,
            format!("a #[{kind}] method cannot be generic: write it for concrete types"),
        ));
    }
    if let syn::ReturnType::Type(_, ty) = &sig.output
        && contains_impl_trait(ty)
    {
        errors.push(syn::Error::new_spanned(
            ty,
            format!(
                "a #[{kind}] method must name its return type (not `impl Trait`): the type \
                 decides what the value becomes"
            ),
        ));
    }
    check_receiver(sig, kind, errors);
}

/// The parameters after `self`, with `#[description]` and `#[complete(…)]` read and removed.
fn raw_args(
    method: &mut ImplItemFn,
    errors: &mut Errors,
    marker_paths: &mut Vec<syn::Path>,
) -> Vec<RawArg> {
    let mut args = Vec::new();
    for input in &mut method.sig.inputs {
        let FnArg::Typed(typed) = input else {
            continue;
        };
        let mut description = None;
        let mut complete = None;
        let mut kept = Vec::new();
        for attr in typed.attrs.drain(..) {
            if is_marker(&attr, "description") {
                marker_paths.push(attr.path().clone());
                match description_text(&attr) {
                    Ok(text) => {
                        super::check_full_description_literal(&text, errors);
                        description = Some((attr, text));
                    }
                    Err(error) => errors.push(error),
                }
            } else if is_marker(&attr, "complete") {
                marker_paths.push(attr.path().clone());
                match attr.parse_args::<syn::Ident>() {
                    Ok(target) => complete = Some(target),
                    Err(_) => errors.push(syn::Error::new_spanned(
                        &attr,
                        "expected `#[complete(method)]`, naming a method of this impl block \
                         `fn(&self, value: &str) -> Vec<String>` that suggests values",
                    )),
                }
            } else {
                kept.push(attr);
            }
        }
        typed.attrs = kept;
        match &*typed.pat {
            Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => args.push(RawArg {
                ident: pat.ident.clone(),
                ty: (*typed.ty).clone(),
                description,
                complete,
            }),
            other => errors.push(syn::Error::new_spanned(
                other,
                "an argument must be a plain name (`topic: String`): it is given by that name",
            )),
        }
    }
    args
}

/// A template method's arguments: exactly the template's variables, each a `String`.
fn template_args(template: &LitStr, raw: Vec<RawArg>, errors: &mut Errors) -> Vec<CatalogArg> {
    let text = template.value();
    if let Err(problem) = check_template(&text) {
        errors.push(syn::Error::new_spanned(
            template,
            format!("this URI template is refused: {problem}"),
        ));
        return Vec::new();
    }
    let variables: Vec<&str> = pieces(&text)
        .filter_map(|piece| match piece {
            Ok(Piece::Variable(name)) => Some(name),
            _ => None,
        })
        .collect();
    for (at, variable) in variables.iter().enumerate() {
        if variables[..at].contains(variable) {
            errors.push(syn::Error::new_spanned(
                template,
                format!("the variable `{{{variable}}}` is in the template twice; name each once"),
            ));
        } else if !raw.iter().any(|arg| arg.ident.unraw() == variable) {
            errors.push(syn::Error::new_spanned(
                template,
                format!(
                    "the template's variable `{{{variable}}}` has no argument; add \
                     `{variable}: String` to the method"
                ),
            ));
        }
    }
    let mut args = Vec::new();
    for arg in raw {
        let name = arg.ident.unraw().to_string();
        if !variables.contains(&name.as_str()) {
            errors.push(syn::Error::new_spanned(
                &arg.ident,
                format!(
                    "`{name}` is not a variable of the template \"{text}\"; a template method's \
                     arguments are its variables (write `{{{name}}}` in the template, or remove \
                     the argument)"
                ),
            ));
            continue;
        }
        if !is_string(&arg.ty) {
            errors.push(syn::Error::new_spanned(
                &arg.ty,
                "a template variable is a `String` (the text it matched in the URI); parse \
                 other types in the method",
            ));
        }
        if let Some((attr, _)) = &arg.description {
            errors.push(syn::Error::new_spanned(
                attr,
                "a template variable has no description of its own; describe the template's \
                 variables in the method's doc comment",
            ));
        }
        args.push(CatalogArg {
            name,
            required: true,
            description: None,
            complete: arg.complete,
        });
    }
    args
}

/// Whether `ty` is `String` (also written `std::string::String`).
fn is_string(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.qself.is_none()
        && path.path.segments.last().is_some_and(|s| s.ident == "String" && s.arguments.is_none()))
}

/// Whether `ty` is `Option<String>`.
fn is_option_of_string(ty: &Type) -> bool {
    let Type::Path(path) = ty else {
        return false;
    };
    let Some(last) = path.path.segments.last() else {
        return false;
    };
    let syn::PathArguments::AngleBracketed(generics) = &last.arguments else {
        return false;
    };
    last.ident == "Option"
        && generics.args.len() == 1
        && matches!(generics.args.first(), Some(syn::GenericArgument::Type(inner)) if is_string(inner))
}

/// The options of `#[resource(uri | template = "…", name, title, mime_type)]`.
#[derive(Default)]
struct ResourceOptions {
    uri: Option<LitStr>,
    template: Option<LitStr>,
    name: Option<LitStr>,
    title: Option<LitStr>,
    mime_type: Option<LitStr>,
}

fn resource_options(marker: &Attribute, errors: &mut Errors) -> ResourceOptions {
    let mut options = ResourceOptions::default();
    let Meta::List(list) = &marker.meta else {
        return options;
    };
    let parsed = list.parse_nested_meta(|meta| {
        let value = option_value(&meta)?;
        let slot = if meta.path.is_ident("uri") {
            &mut options.uri
        } else if meta.path.is_ident("template") {
            &mut options.template
        } else if meta.path.is_ident("name") {
            &mut options.name
        } else if meta.path.is_ident("title") {
            &mut options.title
        } else if meta.path.is_ident("mime_type") {
            &mut options.mime_type
        } else {
            errors.push(syn::Error::new_spanned(
                &meta.path,
                "unknown #[resource] option; the options are `uri = \"…\"` or `template = \
                 \"…\"`, and `name`, `title` and `mime_type` (its description is the doc \
                 comment)",
            ));
            return Ok(());
        };
        match string_value(value) {
            Some(text) => *slot = Some(text),
            None => errors.push(syn::Error::new_spanned(
                &meta.path,
                "expected a string literal: `option = \"…\"`",
            )),
        }
        Ok(())
    });
    if let Err(error) = parsed {
        errors.push(error);
    }
    for (text, what) in [(&options.name, "name"), (&options.title, "title")] {
        if let Some(text) = text
            && let Err(problem) = llm_worker_rules::tool::check_title(&text.value())
        {
            errors.push(syn::Error::new_spanned(
                text,
                format!("a resource's {what} is refused by hosts: {problem}"),
            ));
        }
    }
    if let Some(mime) = &options.mime_type
        && let Err(problem) = check_mime_type(&mime.value())
    {
        errors.push(syn::Error::new_spanned(
            mime,
            format!("this MIME type is refused by hosts: {problem}"),
        ));
    }
    options
}

fn prompt_options(marker: &Attribute, errors: &mut Errors) -> Option<LitStr> {
    let Meta::List(list) = &marker.meta else {
        return None;
    };
    let mut title = None;
    let parsed = list.parse_nested_meta(|meta| {
        let value = option_value(&meta)?;
        if !meta.path.is_ident("title") {
            errors.push(syn::Error::new_spanned(
                &meta.path,
                "unknown #[prompt] option; the only option is `title = \"…\"` (the prompt's \
                 name is the method's name, its description the doc comment)",
            ));
            return Ok(());
        }
        match string_value(value) {
            Some(text) => match llm_worker_rules::tool::check_title(&text.value()) {
                Ok(()) => title = Some(text),
                Err(problem) => errors.push(syn::Error::new_spanned(
                    &text,
                    format!("a prompt's title is refused by hosts: {problem}"),
                )),
            },
            None => errors.push(syn::Error::new_spanned(
                &meta.path,
                "expected `title = \"…\"` with a string literal",
            )),
        }
        Ok(())
    });
    if let Err(error) = parsed {
        errors.push(error);
    }
    title
}

fn string_value(value: Option<Expr>) -> Option<LitStr> {
    match value {
        Some(Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        })) => Some(text),
        _ => None,
    }
}

/// The hosts' rule for a resource's URI ([`check_resource_uri`]).
fn check_uri(uri: &LitStr, errors: &mut Errors) {
    let message = match check_resource_uri(&uri.value()) {
        Ok(()) => return,
        Err(UriProblem::HasVariable) => {
            "this URI has a `{variable}`: write `template = \"…\"` for \
                                         a family of resources"
                .to_owned()
        }
        Err(problem) => format!("this resource's URI is refused by hosts: {problem}"),
    };
    errors.push(syn::Error::new_spanned(uri, message));
}

/// The hosts' rule for prompt names, the same as for tool names.
fn check_prompt_name(ident: &syn::Ident, name: &str, errors: &mut Errors) {
    let message = match llm_worker_rules::tool::check_name(name) {
        Ok(()) => return,
        Err(NameProblem::BadChar(bad)) => format!(
            "the prompt name `{name}` contains {bad:?}; hosts accept 1 to {MAX_NAME_LEN} \
             characters of `A-Z a-z 0-9 _ -`, so rename the method"
        ),
        Err(NameProblem::TooLong { len }) => format!(
            "the prompt name `{name}` has {len} characters; hosts accept 1 to {MAX_NAME_LEN} \
             characters of `A-Z a-z 0-9 _ -`, so shorten the method's name"
        ),
        Err(problem) => format!("the prompt name `{name}` is refused by hosts: {problem}"),
    };
    errors.push(syn::Error::new_spanned(ident, message));
}

/// The hosts' rule for a prompt argument's name, the same as for tool names.
fn check_argument_name(ident: &syn::Ident, name: &str, errors: &mut Errors) {
    if let Err(problem) = llm_worker_rules::prompt::check_name(name) {
        errors.push(syn::Error::new_spanned(
            ident,
            format!(
                "the prompt argument name `{name}` is refused by hosts: {problem}; rename the \
                 argument"
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::super::Registry;
    use super::*;

    fn registry(tokens: proc_macro2::TokenStream) -> syn::Result<Registry> {
        Registry::parse(syn::parse2(tokens)?).map_err(|(error, _)| error)
    }

    #[test]
    fn resources_and_prompts_are_read_with_their_arguments() {
        let reg = registry(quote! {
            impl App {
                /// All.
                #[resource(uri = "a://all", mime_type = "text/plain")]
                fn all(&self) -> String { String::new() }
                #[resource(template = "a://{day}/{id}", name = "entry", title = "Entry")]
                fn entry(&self, id: String, #[complete(days)] day: String) -> String { id }
                /// Asks.
                #[prompt(title = "Ask")]
                fn r#ask(&self, #[description = "the topic"] topic: String, tone: Option<String>) -> String { topic }
            }
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(reg.tools.is_empty());
        let [all, entry] = &reg.resources[..] else {
            panic!("two resources expected");
        };
        assert_eq!(all.name, "all");
        assert!(matches!(&all.kind, ResourceKind::Fixed(uri) if uri.value() == "a://all"));
        assert_eq!(entry.name, "entry");
        let names: Vec<&str> = entry.args.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["id", "day"]);
        assert_eq!(
            entry.args[1]
                .complete
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("days")
        );
        let ask = &reg.prompts[0];
        assert_eq!(ask.name, "ask");
        assert!(ask.args[0].required && !ask.args[1].required);
        assert_eq!(
            ask.args[0]
                .description
                .as_ref()
                .map(LitStr::value)
                .as_deref(),
            Some("the topic")
        );
        // The argument markers are removed from the emitted block.
        let item = &reg.item;
        let emitted = quote!(#item).to_string();
        assert!(!emitted.contains("complete") && !emitted.contains("description"));
    }

    /// Whether the macros accept `#[resource(uri = …, mime_type = …)]`.
    fn builds(uri: &str, mime: &str) -> bool {
        registry(quote! {
            impl App {
                #[resource(uri = #uri, mime_type = #mime)]
                fn r(&self) -> String { String::new() }
            }
        })
        .is_ok()
    }

    /// The macros give the rules' answer for every sample, as the host's load check does
    /// (`host/src/plugin/validate/offerings.rs`): what builds loads, and what the host refuses
    /// does not build.
    #[test]
    fn the_macros_apply_the_rule_the_host_loads_by() {
        use llm_worker_rules::resource::{check_mime_type, check_resource_uri};
        for uri in [
            "notes://today",
            "file:///a/b.txt",
            "urn:isbn:0451450523",
            "a+b.c-d:x",
            "my notes:x",
            "notes://a b",
            "notes://tab\there",
            "today",
            "1x://y",
            "://x",
            "",
            "notes://{id}",
            "NOTES://all",
            "notes://ALL",
            "notes://%61ll",
            "notes://all/%2f",
            "notes://all/%2F",
            "notes://all/A",
            "urn:ISBN:0451450523",
            "notes://a%2Fb/x",
            "notes://all/%+A",
            "x://Alice@h/x",
        ] {
            let rule = check_resource_uri(uri).is_ok();
            assert_eq!(builds(uri, "text/plain"), rule, "{uri:?}");
        }
        for mime in [
            "text/plain",
            "image/png",
            "application/vnd.api+json",
            "text/plain; charset=utf-8",
            "markdown",
            "text/",
            "text/pl ain",
            "text/plain/x",
            "",
        ] {
            let rule = check_mime_type(mime).is_ok();
            assert_eq!(builds("notes://today", mime), rule, "{mime:?}");
        }
        let refused = registry(quote! {
            impl App {
                #[resource(template = "my notes:{id}")]
                fn r(&self, id: String) -> String { id }
            }
        });
        assert!(refused.is_err(), "a template with a space builds");
    }

    #[test]
    fn the_caps_are_the_hosts() {
        use llm_worker_rules::prompt::{MAX_PROMPT_ARGUMENTS, MAX_PROMPTS};
        use llm_worker_rules::resource::{MAX_RESOURCES, MAX_TEMPLATES};
        use llm_worker_rules::tool::MAX_TOOLS;
        let methods = |count: usize, method: &dyn Fn(syn::Ident) -> proc_macro2::TokenStream| {
            let methods = (0..count).map(|i| method(quote::format_ident!("m{i}")));
            registry(quote! { impl App { #(#methods)* } })
                .err()
                .map(|e| e.to_string())
        };
        let tool = |m: syn::Ident| quote! { #[tool] fn #m(&self) -> String { String::new() } };
        let resource = |m: syn::Ident| {
            let uri = format!("a://{m}");
            quote! { #[resource(uri = #uri)] fn #m(&self) -> String { String::new() } }
        };
        let template = |m: syn::Ident| {
            let template = format!("a://{m}/{{id}}");
            quote! { #[resource(template = #template)] fn #m(&self, id: String) -> String { id } }
        };
        let prompt = |m: syn::Ident| quote! { #[prompt] fn #m(&self) -> String { String::new() } };
        for (method, cap) in [
            (
                &tool as &dyn Fn(syn::Ident) -> proc_macro2::TokenStream,
                MAX_TOOLS,
            ),
            (&resource, MAX_RESOURCES),
            (&template, MAX_TEMPLATES),
            (&prompt, MAX_PROMPTS),
        ] {
            assert_eq!(methods(cap, method), None, "{cap} build");
            let error = methods(cap + 1, method).unwrap_or_default();
            assert!(error.contains(&format!("at most {cap}")), "{error}");
        }
        let args = (0..=MAX_PROMPT_ARGUMENTS).map(|i| quote::format_ident!("a{i}"));
        let error = registry(quote! {
            impl App { #[prompt] fn p(&self, #(#args: String),*) -> String { String::new() } }
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            error.contains(&format!("at most {MAX_PROMPT_ARGUMENTS}")),
            "{error}"
        );
        let error = registry(quote! {
            impl App { #[prompt] fn p(&self, café: String) -> String { café } }
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(error.contains("prompt argument name `café`"), "{error}");
    }

    /// The descriptions of resources, prompts and prompt arguments are held at compile time to
    /// the rule the host loads them by, on the text the SDK sends (so a doc comment the host
    /// takes is not refused here either).
    #[test]
    fn descriptions_are_checked_as_the_host_checks_them() {
        let error = |tokens: proc_macro2::TokenStream| {
            registry(tokens)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let refused = error(quote! {
            impl App {
                #[tool] fn t(&self) -> String { String::new() }
                #[doc = "a\u{202E}b"]
                #[resource(uri = "a://r")] fn r(&self) -> String { String::new() }
            }
        });
        assert!(refused.contains("this resource's description"), "{refused}");
        let long = "x".repeat(llm_worker_rules::tool::MAX_DESCRIPTION_BYTES + 1);
        let refused = error(quote! {
            impl App {
                #[tool] fn t(&self) -> String { String::new() }
                #[doc = #long]
                #[prompt] fn p(&self) -> String { String::new() }
            }
        });
        assert!(refused.contains("this prompt's description"), "{refused}");
        let refused = error(quote! {
            impl App {
                #[tool] fn t(&self) -> String { String::new() }
                #[prompt] fn p(&self, #[description = "x\u{1b}[2J"] topic: String) -> String { topic }
            }
        });
        assert!(
            refused.contains("would be refused by the host"),
            "{refused}"
        );
        // A keycap at the start of a line (after the `*` of a `/** */` block) is text.
        let taken = error(quote! {
            impl App {
                #[tool] fn t(&self) -> String { String::new() }
                #[doc = "\n * *\u{FE0F}\u{20E3} rating\n "]
                #[prompt] fn p(&self) -> String { String::new() }
            }
        });
        assert_eq!(taken, "");
    }

    /// Rust takes characters shown as nothing into identifiers (a variation selector here):
    /// a tool argument's or a resource's name made of one is refused as the host would.
    #[test]
    fn names_taken_from_rust_are_checked_as_the_host_checks_them() {
        let parsed = |text: &str| {
            let tokens: proc_macro2::TokenStream = text.parse().expect("tokens");
            registry(tokens)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let refused = parsed(
            "impl App { #[tool] fn t(&self, a\u{FE01}b: String) -> String { String::new() } }",
        );
        assert!(refused.contains("this argument's name"), "{refused}");
        let refused = parsed(
            "impl App { #[tool] fn t(&self) -> String { String::new() } \
             #[resource(uri = \"a://r\")] fn n\u{FE01}te(&self) -> String { String::new() } }",
        );
        assert!(
            refused.contains("this resource's name (its method's)"),
            "{refused}"
        );
        let taken = parsed(
            "impl App { #[tool] fn t(&self) -> String { String::new() } \
             #[resource(uri = \"a://r\")] fn caf\u{E9}(&self) -> String { String::new() } }",
        );
        assert_eq!(taken, "");
    }

    #[test]
    fn type_checks_accept_only_text() {
        assert!(is_string(&syn::parse_quote!(String)));
        assert!(is_string(&syn::parse_quote!(std::string::String)));
        assert!(!is_string(&syn::parse_quote!(&str)));
        assert!(is_option_of_string(&syn::parse_quote!(Option<String>)));
        assert!(!is_option_of_string(&syn::parse_quote!(Option<u32>)));
    }
}
