//! `#[tool_registry]`, `#[tool]` and `#[description]`: turn the methods of an ordinary `impl`
//! block into llm-worker tools.
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
