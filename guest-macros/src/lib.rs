//! `#[tool_registry]`, `#[tool]`, `#[resource]`, `#[prompt]`, `#[description]` and
//! `#[complete]`: turn the methods of an ordinary `impl` block into llm-worker tools, resources
//! and prompts.
//!
//! Use them through `llm-worker-guest` (plugins) or `llm-worker` (hosts), which re-export them
//! together with everything the generated code needs; see those crates for examples.

mod expand;
mod parse;

use proc_macro::TokenStream;

/// Makes every `#[tool]` method of an inherent `impl` block a tool.
///
/// For a method `search` it generates `SearchArgs` (the arguments, `Deserialize` +
/// `JsonSchema`), `ToolSearch` (a `Tool` holding a clone of `self`), and
/// `search_definition(&self) -> ToolDefinition`; for the whole block an implementation of
/// `ToolRegistry` listing every definition.
#[proc_macro_attribute]
pub fn tool_registry(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::tool_registry(attr.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Marks a method of a `#[tool_registry]` impl block as a tool.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::misplaced("tool", attr.into(), item.into()).into()
}

/// Describes an argument of a `#[tool]` method: `#[description = "…"]`, carried into the
/// input schema.
#[proc_macro_attribute]
pub fn description(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::misplaced("description", attr.into(), item.into()).into()
}

/// Marks a method of a `#[tool_registry]` impl block as a resource
/// (`#[resource(uri = "…")]`) or a family of resources (`#[resource(template = "…/{id}")]`).
#[proc_macro_attribute]
pub fn resource(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::misplaced("resource", attr.into(), item.into()).into()
}

/// Marks a method of a `#[tool_registry]` impl block as a prompt.
#[proc_macro_attribute]
pub fn prompt(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::misplaced("prompt", attr.into(), item.into()).into()
}

/// Names the method that completes an argument of a `#[prompt]` or a variable of a
/// `#[resource(template = …)]`: `#[complete(method)]`, where `method` is
/// `fn(&self, value: &str) -> Vec<String>` of the same impl block.
#[proc_macro_attribute]
pub fn complete(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::misplaced("complete", attr.into(), item.into()).into()
}
