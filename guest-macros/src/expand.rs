//! Code generation: only `quote!`, from a validated [`Registry`].

use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use crate::parse::{Output, Registry, ToolMethod, to_pascal_case};

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

/// `#[tool]` or `#[description]` outside a `#[tool_registry]` impl block.
pub(crate) fn misplaced(name: &str, attr: TokenStream, item: TokenStream) -> TokenStream {
    if attr.to_string() == REGISTERED {
        return item;
    }
    let message = format!(
        "#[{name}] only works inside an impl block marked #[tool_registry], which reads and \
         removes it"
    );
    let error = syn::Error::new(Span::call_site(), message).into_compile_error();
    quote!(#error #item)
}

fn expand(registry: &Registry, krate: &TokenStream) -> TokenStream {
    let item = &registry.item;
    let self_ty = &item.self_ty;
    let tools = registry
        .tools
        .iter()
        .map(|tool| expand_tool(tool, self_ty, krate));
    let definitions = registry.tools.iter().map(|tool| {
        let factory = format_ident!("{}_definition", tool.ident);
        quote!(self.#factory())
    });
    quote! {
        #item

        #(#tools)*

        impl #krate::ToolRegistry for #self_ty {
            fn tool_definitions(&self) -> ::std::vec::Vec<#krate::ToolDefinition> {
                ::std::vec![#(#definitions),*]
            }
        }
    }
}

fn expand_tool(tool: &ToolMethod, self_ty: &syn::Type, krate: &TokenStream) -> TokenStream {
    let method = &tool.ident;
    let name = method.to_string();
    let pascal = to_pascal_case(&name);
    let args_ty = format_ident!("{pascal}Args", span = method.span());
    let tool_ty = format_ident!("Tool{pascal}", span = method.span());
    let factory = format_ident!("{name}_definition", span = method.span());
    let description = tool
        .description
        .clone()
        .unwrap_or_else(|| format!("Tool: {name}"));
    let serde_path = format!("{krate}::__private::serde").replace(' ', "");
    let schemars_path = format!("{krate}::__private::schemars").replace(' ', "");

    let fields = tool.args.iter().map(|arg| {
        let ident = &arg.ident;
        let ty = &arg.ty;
        let doc = arg
            .description
            .as_ref()
            .map(|text| quote!(#[schemars(description = #text)]));
        // Spanned at the user's type, so "does not implement Deserialize" points there.
        quote_spanned! {ty.span()=> #doc pub #ident: #ty }
    });
    let arg_names: Vec<_> = tool.args.iter().map(|arg| &arg.ident).collect();
    let call = if tool.is_async {
        quote!(self.ctx.#method(#(args.#arg_names),*).await)
    } else {
        quote!(self.ctx.#method(#(args.#arg_names),*))
    };
    let convert = match tool.output {
        Output::Debug => quote!(::std::result::Result::Ok(::std::format!("{:?}", result))),
        Output::Result { ok_is_string } => {
            let ok = if ok_is_string {
                quote!(value)
            } else {
                quote!(::std::format!("{:?}", value))
            };
            quote! {
                match result {
                    ::std::result::Result::Ok(value) => ::std::result::Result::Ok(#ok),
                    ::std::result::Result::Err(error) => ::std::result::Result::Err(
                        #krate::ToolError::ExecutionFailed(::std::string::ToString::to_string(&error)),
                    ),
                }
            }
        }
    };
    let tool_doc = format!(
        "The tool `{name}`: runs `{self_ty}::{name}` on a clone of the registry value.",
        self_ty = quote!(#self_ty).to_string().replace(' ', "")
    );
    let factory_doc = format!("The definition (factory) of the tool `{name}`.");

    quote! {
        #[derive(#krate::__private::serde::Deserialize, #krate::__private::schemars::JsonSchema)]
        #[serde(crate = #serde_path)]
        #[schemars(crate = #schemars_path)]
        struct #args_ty {
            #(#fields,)*
        }

        #[doc = #tool_doc]
        #[derive(Clone)]
        pub struct #tool_ty {
            ctx: #self_ty,
        }

        #[#krate::__private::async_trait]
        impl #krate::Tool for #tool_ty {
            async fn execute(
                &self,
                input_json: &str,
            ) -> ::std::result::Result<::std::string::String, #krate::ToolError> {
                let args: #args_ty = #krate::__private::serde_json::from_str(input_json)
                    .map_err(|error| #krate::ToolError::InvalidArgument(::std::string::ToString::to_string(&error)))?;
                let result = #call;
                #convert
            }
        }

        impl #self_ty {
            #[doc = #factory_doc]
            pub fn #factory(&self) -> #krate::ToolDefinition {
                let ctx = ::std::clone::Clone::clone(self);
                ::std::sync::Arc::new(move || {
                    let schema = #krate::__private::schemars::schema_for!(#args_ty);
                    let meta = #krate::ToolMeta::new(#name)
                        .description(#description)
                        .input_schema(schema.to_value());
                    let tool: ::std::sync::Arc<dyn #krate::Tool> =
                        ::std::sync::Arc::new(#tool_ty { ctx: ::std::clone::Clone::clone(&ctx) });
                    (meta, tool)
                })
            }
        }
    }
}
