//! The options of the `#[tool(…)]` marker: its title and the hints a client is shown.

use llm_worker_rules::tool::{MAX_TITLE_BYTES, TitleProblem};
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, Lit, LitBool, LitStr, Meta, Token};

use super::{Annotations, Errors};

/// The options of `#[tool(title = "…", read_only, destructive = false, …)]`.
pub(super) fn tool_options(marker: &Attribute) -> syn::Result<(Option<LitStr>, Annotations)> {
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
        } else if meta.path.is_ident("task") {
            let expected = "expected `task = \"optional\"`, `\"required\"` or `\"forbidden\"`";
            match option_value(&meta)? {
                Some(Expr::Lit(ExprLit {
                    lit: Lit::Str(text),
                    ..
                })) => {
                    let variant = match text.value().as_str() {
                        "forbidden" => "Forbidden",
                        "optional" => "Optional",
                        "required" => "Required",
                        _ => {
                            errors.push(syn::Error::new_spanned(&text, expected));
                            return Ok(());
                        }
                    };
                    annotations.task = Some(syn::Ident::new(variant, text.span()));
                }
                Some(other) => errors.push(syn::Error::new_spanned(other, expected)),
                None => errors.push(syn::Error::new_spanned(&meta.path, expected)),
            }
            return Ok(());
        } else if meta.path.is_ident("manual_start") {
            if option_value(&meta)?.is_some() {
                errors.push(syn::Error::new_spanned(
                    &meta.path,
                    "write `manual_start` alone: the tool calls `task::start()` itself",
                ));
            }
            annotations.manual_start = Some(meta.path.span());
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
                 `destructive`, `idempotent`, `open_world`, `task = \"optional\"` and \
                 `manual_start` (the tool's name is the method's name, its description the doc \
                 comment)",
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
    if let Some(span) = annotations.manual_start {
        let tasks = annotations
            .task
            .as_ref()
            .is_some_and(|variant| variant != "Forbidden");
        if !tasks {
            errors.push(syn::Error::new(
                span,
                "`manual_start` is for a tool whose calls run as tasks: add `task = \"optional\"` \
                 or `task = \"required\"`",
            ));
        }
    }
    errors.finish()?;
    Ok((title, annotations))
}

/// The value of an option, `= value`, if it has one; `option(…)` is read past (and left for
/// the caller to refuse).
pub(super) fn option_value(meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Expr>> {
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
