//! Code generation for resources, prompts and completion: the `ToolRegistry` methods that
//! list them and serve them from the registry value (only `quote!`).

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::LitStr;

use super::dispatch_imports;
use crate::parse::{CatalogArg, PromptMethod, Registry, ResourceKind, ResourceMethod};

/// The `ToolRegistry` methods a block with resources or prompts overrides (none without).
pub(super) fn registry_methods(registry: &Registry, krate: &TokenStream) -> TokenStream {
    let output = quote!(#krate::__private::output);
    let mut methods = TokenStream::new();
    if !registry.resources.is_empty() {
        methods.extend(resource_methods(&registry.resources, krate, &output));
    }
    if !registry.prompts.is_empty() {
        methods.extend(prompt_methods(&registry.prompts, krate, &output));
    }
    if !registry.resources.is_empty() || !registry.prompts.is_empty() {
        methods.extend(complete_method(registry, krate, &output));
    }
    methods
}

fn optional_string(text: Option<&LitStr>) -> TokenStream {
    match text {
        Some(text) => quote!(::core::option::Option::Some(::std::string::String::from(#text))),
        None => quote!(::core::option::Option::None),
    }
}

fn optional_str(text: Option<&LitStr>) -> TokenStream {
    match text {
        Some(text) => quote!(::core::option::Option::Some(#text)),
        None => quote!(::core::option::Option::None),
    }
}

/// `self.method(args)`, its value (`result`) converted by `map` and returned: for the
/// synchronous method and for the `…_async` one the exports run. An `async` method is awaited
/// in the latter (the instance's other calls run while it waits), and run to its end in place
/// in the former, its value converted inside the future (so that a value borrowing from
/// `self` need not outlive it).
fn invoke(
    method: &syn::Ident,
    args: &[syn::Ident],
    is_async: bool,
    map: &TokenStream,
    output: &TokenStream,
) -> [TokenStream; 2] {
    if is_async {
        [
            quote!(return #output::block_on(async {
                let result = self.#method(#(#args),*).await;
                #map
            });),
            quote! {
                let result = self.#method(#(#args),*).await;
                return #map;
            },
        ]
    } else {
        let call = quote! {
            let result = self.#method(#(#args),*);
            return #map;
        };
        [call.clone(), call]
    }
}

/// Converts `result` (the method's value) with `success`, its error to a `RequestError`.
fn map_result(success: TokenStream, output: &TokenStream) -> TokenStream {
    quote! {{
        let split = (&#output::Is::of(&result)).__llm_worker_split();
        match split.result(result) {
            ::std::result::Result::Ok(value) => ::std::result::Result::Ok(#success),
            ::std::result::Result::Err(error) => ::std::result::Result::Err(
                (&&&&#output::Is::of(&error)).__llm_worker_error().request_error(error),
            ),
        }
    }}
}

fn locals(args: &[CatalogArg]) -> Vec<syn::Ident> {
    (0..args.len())
        .map(|at| format_ident!("__llm_worker_arg_{at}"))
        .collect()
}

fn resource_methods(
    resources: &[ResourceMethod],
    krate: &TokenStream,
    output: &TokenStream,
) -> TokenStream {
    let dispatch = dispatch_imports(output);
    let mut listed = Vec::new();
    let mut templates = Vec::new();
    // Fixed URIs are tried before templates, whatever the order of declaration: a template
    // matching a fixed URI of the same plugin must not take its reads.
    let mut reads = [Vec::new(), Vec::new()];
    let mut template_reads = [Vec::new(), Vec::new()];
    for resource in resources {
        let cfgs = &resource.cfgs;
        let name = &resource.name;
        let title = optional_string(resource.title.as_ref());
        let mime = optional_string(resource.mime_type.as_ref());
        let pieces = &resource.doc;
        let description = quote!(#output::optional_description(&[#(#pieces),*]));
        let mime_str = optional_str(resource.mime_type.as_ref());
        let span = resource.output_span;
        let map = map_result(
            quote_spanned!(span=> #output::resource_contents(value, uri, #mime_str)),
            output,
        );
        let locals = locals(&resource.args);
        let calls = invoke(&resource.ident, &locals, resource.is_async, &map, output);
        match &resource.kind {
            ResourceKind::Fixed(uri) => {
                listed.push(quote! {
                    #(#cfgs)*
                    list.push(#output::ResourceMeta {
                        uri: ::std::string::String::from(#uri),
                        name: ::std::string::String::from(#name),
                        title: #title,
                        description: #description,
                        mime_type: #mime,
                        size: ::core::option::Option::None,
                    });
                });
                for (reads, call) in reads.iter_mut().zip(&calls) {
                    reads.push(quote! {
                        #(#cfgs)*
                        if uri == #uri {
                            #call
                        }
                    });
                }
            }
            ResourceKind::Template(template) => {
                templates.push(quote! {
                    #(#cfgs)*
                    list.push(#output::ResourceTemplate {
                        uri_template: ::std::string::String::from(#template),
                        name: ::std::string::String::from(#name),
                        title: #title,
                        description: #description,
                        mime_type: #mime,
                    });
                });
                for (reads, call) in template_reads.iter_mut().zip(&calls) {
                    let names = resource.args.iter().map(|arg| &arg.name);
                    reads.push(quote! {
                        #(#cfgs)*
                        if let ::core::option::Option::Some(mut variables) =
                            #output::template_variables(#template, uri)
                        {
                            #(let #locals = #output::take_variable(&mut variables, #names);)*
                            #call
                        }
                    });
                }
            }
        }
    }
    let [mut reads, mut reads_async] = reads;
    let [template_reads, template_reads_async] = template_reads;
    reads.extend(template_reads);
    reads_async.extend(template_reads_async);
    let not_found = quote! {
        ::std::result::Result::Err(#output::resource_not_found(
            uri,
            &<Self as #krate::ToolRegistry>::resources(self),
            &<Self as #krate::ToolRegistry>::resource_templates(self),
        ))
    };
    quote! {
        fn resources(&self) -> ::std::vec::Vec<#output::ResourceMeta> {
            #[allow(unused_mut)]
            let mut list = ::std::vec::Vec::new();
            #(#listed)*
            list
        }

        fn resource_templates(&self) -> ::std::vec::Vec<#output::ResourceTemplate> {
            #[allow(unused_mut)]
            let mut list = ::std::vec::Vec::new();
            #(#templates)*
            list
        }

        fn read_resource(
            &self,
            uri: &str,
        ) -> ::std::result::Result<
            ::std::vec::Vec<#output::ResourceContents>,
            #output::RequestError,
        > {
            #dispatch
            #(#reads)*
            #not_found
        }

        fn read_resource_async<'a>(
            &'a self,
            uri: &'a str,
        ) -> #krate::RegistryFuture<
            'a,
            ::std::result::Result<
                ::std::vec::Vec<#output::ResourceContents>,
                #output::RequestError,
            >,
        > {
            ::std::boxed::Box::pin(async move {
                #dispatch
                #(#reads_async)*
                #not_found
            })
        }
    }
}

fn prompt_methods(
    prompts: &[PromptMethod],
    krate: &TokenStream,
    output: &TokenStream,
) -> TokenStream {
    let dispatch = dispatch_imports(output);
    let mut listed = Vec::new();
    let mut renders = [Vec::new(), Vec::new()];
    for prompt in prompts {
        let cfgs = &prompt.cfgs;
        let name = &prompt.name;
        let title = optional_string(prompt.title.as_ref());
        let pieces = &prompt.doc;
        let arguments = prompt.args.iter().map(|arg| {
            let arg_name = &arg.name;
            let description = optional_string(arg.description.as_ref());
            let required = arg.required;
            quote! {
                #output::PromptArgument {
                    name: ::std::string::String::from(#arg_name),
                    title: ::core::option::Option::None,
                    description: #description,
                    required: #required,
                }
            }
        });
        listed.push(quote! {
            #(#cfgs)*
            list.push(#output::PromptMeta {
                name: ::std::string::String::from(#name),
                title: #title,
                description: #output::optional_description(&[#(#pieces),*]),
                arguments: ::std::vec![#(#arguments),*],
            });
        });
        let specs = prompt.args.iter().map(|arg| {
            let arg_name = &arg.name;
            let required = arg.required;
            quote!(#output::ArgumentSpec { name: #arg_name, required: #required })
        });
        let locals = locals(&prompt.args);
        let values = prompt.args.iter().zip(&locals).map(|(arg, local)| {
            if arg.required {
                quote!(let #local = #output::required(values.next().flatten());)
            } else {
                quote!(let #local = values.next().flatten();)
            }
        });
        let span = prompt.output_span;
        let map = map_result(quote_spanned!(span=> #output::prompt(value)), output);
        let calls = invoke(&prompt.ident, &locals, prompt.is_async, &map, output);
        let specs: Vec<TokenStream> = specs.collect();
        let values: Vec<TokenStream> = values.collect();
        for (renders, call) in renders.iter_mut().zip(&calls) {
            renders.push(quote! {
                #(#cfgs)*
                if name == #name {
                    #[allow(unused_mut, unused_variables)]
                    let mut values =
                        #output::prompt_arguments(#name, arguments, &[#(#specs),*])?
                            .into_iter();
                    #(#values)*
                    #call
                }
            });
        }
    }
    let [renders, renders_async] = renders;
    let not_found = quote! {
        ::std::result::Result::Err(#output::prompt_not_found(
            name,
            &<Self as #krate::ToolRegistry>::prompts(self),
        ))
    };
    quote! {
        fn prompts(&self) -> ::std::vec::Vec<#output::PromptMeta> {
            #[allow(unused_mut)]
            let mut list = ::std::vec::Vec::new();
            #(#listed)*
            list
        }

        fn get_prompt(
            &self,
            name: &str,
            arguments: &[(::std::string::String, ::std::string::String)],
        ) -> ::std::result::Result<#output::Prompt, #output::RequestError> {
            #dispatch
            #(#renders)*
            #not_found
        }

        fn get_prompt_async<'a>(
            &'a self,
            name: &'a str,
            arguments: &'a [(::std::string::String, ::std::string::String)],
        ) -> #krate::RegistryFuture<
            'a,
            ::std::result::Result<#output::Prompt, #output::RequestError>,
        > {
            ::std::boxed::Box::pin(async move {
                #dispatch
                #(#renders_async)*
                #not_found
            })
        }
    }
}

/// For one prompt or template: each argument's completion, or the error for another name.
fn argument_completions(
    what: &TokenStream,
    args: &[CatalogArg],
    output: &TokenStream,
) -> TokenStream {
    let branches = args.iter().map(|arg| {
        let arg_name = &arg.name;
        let completion = match &arg.complete {
            Some(method) => {
                quote_spanned!(method.span()=> #output::completion(self.#method(value)))
            }
            None => quote!(<#output::Completion as ::core::default::Default>::default()),
        };
        quote! {
            if argument == #arg_name {
                return ::std::result::Result::Ok(#completion);
            }
        }
    });
    let names = args.iter().map(|arg| &arg.name);
    quote! {
        #(#branches)*
        return ::std::result::Result::Err(#output::no_such_argument(
            &#what,
            argument,
            &[#(#names),*],
        ));
    }
}

fn complete_method(registry: &Registry, krate: &TokenStream, output: &TokenStream) -> TokenStream {
    let prompts = registry.prompts.iter().map(|prompt| {
        let cfgs = &prompt.cfgs;
        let name = &prompt.name;
        let what = quote!(::std::format!("the prompt '{}'", #name));
        let body = argument_completions(&what, &prompt.args, output);
        quote! {
            #(#cfgs)*
            if name.as_str() == #name {
                #body
            }
        }
    });
    let templates = registry.resources.iter().filter_map(|resource| {
        let ResourceKind::Template(template) = &resource.kind else {
            return None;
        };
        let cfgs = &resource.cfgs;
        let what = quote!(::std::format!("the resource template '{}'", #template));
        let body = argument_completions(&what, &resource.args, output);
        Some(quote! {
            #(#cfgs)*
            if template.as_str() == #template {
                #body
            }
        })
    });
    quote! {
        fn complete(
            &self,
            reference: &#output::CompletionRef,
            argument: &str,
            value: &str,
        ) -> ::std::result::Result<#output::Completion, #output::RequestError> {
            let _ = (argument, value);
            match reference {
                #output::CompletionRef::Prompt(name) => {
                    #(#prompts)*
                    ::std::result::Result::Err(#output::prompt_not_found(
                        name,
                        &<Self as #krate::ToolRegistry>::prompts(self),
                    ))
                }
                #output::CompletionRef::ResourceTemplate(template) => {
                    #(#templates)*
                    ::std::result::Result::Err(#output::template_not_found(
                        template,
                        &<Self as #krate::ToolRegistry>::resource_templates(self),
                    ))
                }
            }
        }
    }
}
