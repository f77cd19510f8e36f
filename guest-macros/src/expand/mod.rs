//! Code generation: only `quote!`, from a validated [`Registry`].

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;

use crate::parse::{Registry, ToolMethod, to_pascal_case};

mod catalog;

/// The crate the generated code names: `llm-worker-guest` (plugins) or `llm-worker` (hosts),
/// whichever the calling crate depends on, under the name it uses.
fn api_crate() -> syn::Result<TokenStream> {
    for package in ["llm-worker-guest", "llm-worker"] {
        match crate_name(package) {
            Ok(FoundCrate::Itself) => {
                let ident = format_ident!("{}", package.replace('-', "_"));
                return Ok(quote!(::#ident));
            }
            Ok(FoundCrate::Name(name)) => {
                let ident = format_ident!("{name}");
                return Ok(quote!(::#ident));
            }
            Err(_) => continue,
        }
    }
    Err(syn::Error::new(
        Span::call_site(),
        "#[tool_registry] needs the crate `llm-worker-guest` (for a plugin) or `llm-worker` \
         (for a host) in [dependencies]",
    ))
}

pub(crate) fn tool_registry(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    if !attr.is_empty() {
        return Err(syn::Error::new_spanned(
            attr,
            "#[tool_registry] takes no arguments",
        ));
    }
    let item: syn::ItemImpl = syn::parse2(item).map_err(|e| {
        syn::Error::new(
            e.span(),
            "#[tool_registry] goes on an impl block: `impl MyType { … }`",
        )
    })?;
    let registry = match Registry::parse(item) {
        Ok(registry) => registry,
        Err((error, cleaned)) => {
            let error = error.into_compile_error();
            return Ok(quote!(#error #cleaned));
        }
    };
    let krate = api_crate()?;
    Ok(expand(&registry, &krate))
}

/// The argument `#[tool_registry]` gives the `#[tool]` markers it has read.
pub(crate) const REGISTERED: &str = "__llm_worker_registered";

/// A marker (`#[tool]`, `#[resource]`, `#[description]`, …) outside a `#[tool_registry]` impl
/// block.
pub(crate) fn misplaced(name: &str, attr: TokenStream, item: TokenStream) -> TokenStream {
    if attr.to_string() == REGISTERED {
        return item;
    }
    let message = format!(
        "#[{name}] only works inside an impl block marked #[tool_registry], which reads and \
         removes it; #[tool_registry] knows it by its name, so write `#[{name}]` or \
         `#[llm_worker_guest::{name}]`, not an import renamed with `as`"
    );
    let error = syn::Error::new(Span::call_site(), message).into_compile_error();
    quote!(#error #item)
}

/// The expansion: the user's impl block and, per tool, the items the spec names
/// (`{Pascal}Args`, `Tool{Pascal}`; `{tool}_definition` is a method of the user's type); all
/// else (trait implementations, the factories' impl block, the registry) inside
/// `const _: () = { … };`, out of the user's namespace.
fn expand(registry: &Registry, krate: &TokenStream) -> TokenStream {
    let item = &registry.item;
    let self_ty = &item.self_ty;
    let (named, hidden): (Vec<_>, Vec<_>) = registry
        .tools
        .iter()
        .map(|tool| expand_tool(tool, self_ty, krate))
        .unzip();
    let definitions = registry.tools.iter().map(|tool| {
        let factory = format_ident!("{}_definition", tool.name);
        let cfgs = &tool.cfgs;
        quote!(#(#cfgs)* definitions.push(self.#factory());)
    });
    let description_uses = description_uses(registry, krate);
    let catalog = catalog::registry_methods(registry, krate);
    quote! {
        #item

        #(#named)*

        const _: () = {
            #(#hidden)*

            #description_uses

            impl #krate::ToolRegistry for #self_ty {
                fn tool_definitions(&self) -> ::std::vec::Vec<#krate::ToolDefinition> {
                    #[allow(unused_mut)]
                    let mut definitions = ::std::vec::Vec::new();
                    #(#definitions)*
                    definitions
                }

                #catalog
            }
        };
    }
}

/// Each `#[description]` marker's path, used once, so that the user's import of it counts as
/// used (the markers themselves are removed: rustc takes no macros on parameters).
///
/// Without an import, `description` is found through the glob of the hidden markers module,
/// inside a block of its own (not in the user's module). `self::*`, the user's module with its
/// import, comes first: of two globs that bring the same item rustc keeps the first, so the
/// user's import is the one resolved. (rustc also counts an outer import as used when it
/// checks a block's glob against the names outside, which covers imports inside a function
/// body; `tests/macros.rs` holds both cases under `deny(unused_imports)`.)
fn description_uses(registry: &Registry, krate: &TokenStream) -> Option<TokenStream> {
    let mut seen = std::collections::HashSet::new();
    let uses: Vec<TokenStream> = registry
        .description_paths
        .iter()
        .filter(|path| seen.insert(quote!(#path).to_string()))
        .map(|path| quote!(#[#path(__llm_worker_registered)] const _: () = ();))
        .collect();
    if uses.is_empty() {
        return None;
    }
    Some(quote! {
        const _: () = {
            #[allow(unused_imports)]
            use self::*;
            #[allow(unused_imports)]
            use #krate::__private::markers::*;
            #(#uses)*
        };
    })
}

/// One tool's items: those the spec names, and the rest (to go out of the user's namespace).
fn expand_tool(
    tool: &ToolMethod,
    self_ty: &syn::Type,
    krate: &TokenStream,
) -> (TokenStream, TokenStream) {
    let method = &tool.ident;
    let name = &tool.name;
    let pascal = to_pascal_case(name);
    let args_ty = format_ident!("{pascal}Args", span = method.span());
    let tool_ty = format_ident!("Tool{pascal}", span = method.span());
    let factory = format_ident!("{name}_definition", span = method.span());
    let cfgs = &tool.cfgs;
    let private = quote!(#krate::__private);
    let output = quote!(#private::output);
    let serde_path = format!("{krate}::__private::serde").replace(' ', "");
    let schemars_path = format!("{krate}::__private::schemars").replace(' ', "");

    let mut default_fns = Vec::new();
    let fields = tool.args.iter().map(|arg| {
        let ident = &arg.ident;
        let ty = &arg.ty;
        let doc = arg
            .description
            .as_ref()
            .map(|text| quote!(#[schemars(description = #text)]));
        // The default is a function of the registry type, so that `Self` in its expression
        // means what it means in the method's signature. Named with the tool name's length,
        // so that no two tools' arguments share one (`a_b`'s `c` and `a`'s `b_c`).
        let default = arg.default.as_ref().map(|value| {
            let function = format_ident!(
                "__llm_worker_default_{}_{}_{}",
                name.len(),
                name,
                ident.unraw()
            );
            // Qualified (`<Registry<'static>>::f`): a type with generic or lifetime arguments is
            // not a path expression as it is written.
            let path = format!("<{}>::{function}", quote!(#self_ty)).replace(' ', "");
            // A string literal may default a `String` (or `Cow<str>`, …) argument.
            let value = match value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(_),
                    ..
                }) => quote!(::core::convert::Into::into(#value)),
                other => quote!(#other),
            };
            default_fns.push(quote_spanned! {ty.span()=>
                #[doc(hidden)]
                fn #function() -> #ty {
                    #value
                }
            });
            quote!(#[serde(default = #path)])
        });
        let attrs = &arg.field_attrs;
        // Spanned at the user's type, so "does not implement Deserialize" points there.
        quote_spanned! {ty.span()=> #doc #default #(#attrs)* pub #ident: #ty }
    });
    let fields: Vec<_> = fields.collect();
    let arg_names: Vec<_> = tool.args.iter().map(|arg| &arg.ident).collect();
    let call = if tool.is_async {
        quote!(self.ctx.#method(#(args.#arg_names),*).await)
    } else {
        quote!(self.ctx.#method(#(args.#arg_names),*))
    };
    // A call that may run as a task becomes one once its input is read, unless the tool says
    // when itself.
    let runs_as_task = tool
        .annotations
        .task
        .as_ref()
        .is_some_and(|variant| variant != "Forbidden");
    let call = if runs_as_task && tool.annotations.manual_start.is_none() {
        quote!({
            #krate::task::start();
            #call
        })
    } else {
        call
    };
    let output_ty = &tool.output;
    let pieces = &tool.doc;
    let title = tool
        .title
        .as_ref()
        .map(|title| quote!(let meta = meta.title(#title);));
    let task = tool
        .annotations
        .task
        .as_ref()
        .map(|variant| quote!(let meta = meta.task_support(#krate::TaskSupport::#variant);));
    let hint = |value: Option<bool>| match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    };
    let (read_only, destructive, idempotent, open_world) = (
        hint(tool.annotations.read_only),
        hint(tool.annotations.destructive),
        hint(tool.annotations.idempotent),
        hint(tool.annotations.open_world),
    );
    let tool_doc = format!(
        "The tool `{name}`: runs `{self_ty}::{name}` on a clone of the registry value.",
        self_ty = quote!(#self_ty).to_string().replace(' ', "")
    );
    let factory_doc = format!("The definition (factory) of the tool `{name}`.");
    let fallback = format!("Tool: {name}");
    let dispatch = dispatch_imports(&output);
    // Spanned at the method, so that a clash with a user's type points there.
    let args_struct = quote_spanned! {method.span()=>
        #(#cfgs)*
        #[derive(#private::serde::Deserialize, #private::schemars::JsonSchema)]
        #[serde(crate = #serde_path, deny_unknown_fields)]
        #[schemars(crate = #schemars_path)]
        struct #args_ty {
            #(#fields,)*
        }
    };
    let named = quote! {
        #args_struct

        #(#cfgs)*
        #[doc = #tool_doc]
        #[derive(Clone)]
        pub struct #tool_ty {
            ctx: #self_ty,
        }
    };
    let hidden = quote! {
        #(#cfgs)*
        #[#private::async_trait]
        impl #krate::Tool for #tool_ty {
            async fn execute(
                &self,
                input_json: &str,
            ) -> ::std::result::Result<::std::string::String, #krate::ToolError> {
                #dispatch
                let args: #args_ty = #output::arguments(input_json)?;
                let result = #call;
                let split = (&#output::Is::of(&result)).__llm_worker_split();
                match split.result(result) {
                    ::std::result::Result::Ok(value) => {
                        (&&&&&#output::Is::of(&value)).__llm_worker_output().output(value)
                    }
                    ::std::result::Result::Err(error) => ::std::result::Result::Err(
                        (&&&&#output::Is::of(&error)).__llm_worker_error().tool_error(error),
                    ),
                }
            }

            async fn call(
                &self,
                input_json: &str,
            ) -> ::std::result::Result<#output::ToolOutput, #krate::ToolError> {
                #dispatch
                let args: #args_ty = #output::arguments(input_json)?;
                let result = #call;
                let split = (&#output::Is::of(&result)).__llm_worker_split();
                match split.result(result) {
                    ::std::result::Result::Ok(value) => {
                        (&&&&&#output::Is::of(&value)).__llm_worker_output().content(value)
                    }
                    ::std::result::Result::Err(error) => ::std::result::Result::Err(
                        (&&&&#output::Is::of(&error)).__llm_worker_error().tool_error(error),
                    ),
                }
            }
        }

        #(#cfgs)*
        impl #self_ty {
            #(#default_fns)*

            #[doc = #factory_doc]
            pub fn #factory(&self) -> #krate::ToolDefinition {
                #dispatch
                let ctx = ::std::clone::Clone::clone(self);
                ::std::sync::Arc::new(move || {
                    let schema = #output::strip_root_title(
                        #private::schemars::schema_for!(#args_ty).to_value(),
                    );
                    let description = #output::doc_description(&[#(#pieces),*]);
                    let description = if description.is_empty() {
                        ::std::string::String::from(#fallback)
                    } else {
                        description
                    };
                    let split = (&#output::Is::<#output_ty>::new()).__llm_worker_split();
                    let output_schema = (&&&&&split.ok()).__llm_worker_output().output_schema(split.ok());
                    let meta = #krate::ToolMeta::new(#name)
                        .description(description)
                        .input_schema(schema)
                        .annotations(#krate::ToolAnnotations {
                            read_only: #read_only,
                            destructive: #destructive,
                            idempotent: #idempotent,
                            open_world: #open_world,
                        });
                    #title
                    #task
                    let meta = match output_schema {
                        ::std::option::Option::Some(output_schema) => meta.output_schema(output_schema),
                        ::std::option::Option::None => meta,
                    };
                    let tool: ::std::sync::Arc<dyn #krate::Tool> =
                        ::std::sync::Arc::new(#tool_ty { ctx: ::std::clone::Clone::clone(&ctx) });
                    (meta, tool)
                })
            }
        }
    };
    (named, hidden)
}

/// The traits the autoref dispatch of return values and errors calls, imported anonymously.
fn dispatch_imports(output: &TokenStream) -> TokenStream {
    quote! {
        #[allow(unused_imports)]
        use #output::{
            ErrorIsBoxedError as _, ErrorIsDebug as _, ErrorIsDisplay as _,
            ErrorIsRequestError as _, ErrorIsStdError as _, ErrorIsToolError as _,
            OutputIsContent as _, OutputIsDebug as _, OutputIsJson as _,
            OutputIsJsonWithSchema as _, OutputIsText as _, SplitPlain as _, SplitResult as _,
        };
    }
}
