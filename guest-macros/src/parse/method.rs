//! Reading one `#[tool]` method: its name, receiver, arguments (with their markers) and return
//! type, each misuse a spanned error.

use llm_worker_rules::tool::{MAX_NAME_LEN, NameProblem};
use syn::ext::IdentExt;
use syn::{Attribute, Expr, ExprLit, FnArg, ImplItemFn, Lit, LitStr, Meta, Pat, ReturnType, Type};

use super::{Annotations, Errors, ToolArg, ToolMethod, doc_pieces, is_marker};

impl ToolMethod {
    /// Parses a method, removing its argument markers; `None` if it has errors (pushed).
    pub(super) fn parse(
        method: &mut ImplItemFn,
        errors: &mut Errors,
        description_paths: &mut Vec<syn::Path>,
    ) -> Option<Self> {
        let before = errors.0.is_some();
        let sig = &method.sig;
        let ident = sig.ident.clone();
        let name = ident.unraw().to_string();
        check_name(&ident, &name, errors);
        super::check_doc(&method.attrs, "tool", errors);
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
        check_receiver(sig, "tool", errors);

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
                if attr.path().is_ident("cfg") || attr.path().is_ident("cfg_attr") {
                    // The argument's field and the call's argument would not follow it.
                    errors.push(syn::Error::new_spanned(
                        &attr,
                        "a #[tool] argument cannot be conditional (`#[cfg]`): its tool's input \
                         schema lists it either way; make the whole method conditional, or \
                         take an `Option`",
                    ));
                } else if is_marker(&attr, "description") {
                    description_paths.push(attr.path().clone());
                    match description_text(&attr) {
                        Ok(text) => {
                            super::check_description_literal(&text, errors);
                            description = Some(text);
                        }
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
                    super::check_identifier_text(&pat.ident, "argument", errors);
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

        // Names alike but for case (`id` and `ID`, `straße` and `strasse`): the host refuses
        // every input holding both (a parser ignoring case would take one value for both).
        for (at, arg) in args.iter().enumerate() {
            use syn::ext::IdentExt as _;
            let name = arg.ident.unraw().to_string();
            let alike = |other: &str| {
                other.to_lowercase() == name.to_lowercase()
                    || other.to_uppercase() == name.to_uppercase()
            };
            if let Some(earlier) = args[..at]
                .iter()
                .find(|earlier| alike(&earlier.ident.unraw().to_string()))
            {
                errors.push(syn::Error::new_spanned(
                    &arg.ident,
                    format!(
                        "this argument's name differs from `{}`'s only in case: the host refuses \
                         every input naming both (a parser ignoring case would take one value \
                         for both); rename one",
                        earlier.ident.unraw()
                    ),
                ));
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

/// Whether `ty` (anywhere inside) is `impl Trait`, which a generated item cannot name.
pub(super) fn contains_impl_trait(ty: &Type) -> bool {
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

/// A tool method takes `&self` (also written `self: &Self`).
pub(super) fn check_receiver(sig: &syn::Signature, kind: &str, errors: &mut Errors) {
    let Some(FnArg::Receiver(receiver)) = sig.inputs.first() else {
        errors.push(syn::Error::new_spanned(
            &sig.ident,
            format!("a #[{kind}] method takes `&self` as its first parameter"),
        ));
        return;
    };
    let by_mut_ref = || {
        syn::Error::new_spanned(
            receiver,
            format!(
                "a #[{kind}] method takes `&self`, not `&mut self`: calls may run \
                 concurrently, so keep state in a Mutex or an atomic"
            ),
        )
    };
    if receiver.colon_token.is_none() {
        match (&receiver.reference, &receiver.mutability) {
            (Some(_), None) => {}
            (Some(_), Some(_)) => errors.push(by_mut_ref()),
            (None, _) => errors.push(syn::Error::new_spanned(
                receiver,
                format!(
                    "a #[{kind}] method takes `&self`, not `self` by value: the same instance \
                     serves every call"
                ),
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
                    "a #[{kind}] method takes `&self`, not `self: {written}`: each tool holds \
                     a clone of the registry value, so put what must be shared (an `Arc<…>`) in \
                     a field"
                ),
            ));
        }
    }
}

/// The text of `#[description = "…"]`.
pub(super) fn description_text(attr: &Attribute) -> syn::Result<LitStr> {
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
