//! Checks what a 0.3.0 plugin offers besides tools: its resources (URIs, names, sizes), URI
//! templates (RFC 6570 level 1) and prompts (names as tools', their arguments), each within
//! caps, unique within the plugin. The same checks apply to a list a plugin gives again after
//! saying it changed.

use std::collections::BTreeSet;

use llm_worker_rules::tool::{MAX_DESCRIPTION_BYTES, check_name, check_title};

use crate::tool::{PromptMeta, ResourceMeta, ResourceTemplate};
use llm_worker_rules::template::MAX_URI_BYTES;

/// Most resources one plugin may list.
pub(crate) const MAX_RESOURCES: usize = 1000;
/// Most URI templates one plugin may offer.
pub(crate) const MAX_TEMPLATES: usize = 100;
/// Most prompts one plugin may offer.
pub(crate) const MAX_PROMPTS: usize = 256;
/// Most arguments one prompt may have.
pub(crate) const MAX_PROMPT_ARGUMENTS: usize = 64;

/// A URI: a scheme (`letter *( letter / digit / "+" / "-" / "." )`), a colon, then no
/// whitespace or control characters; at most [`MAX_URI_BYTES`].
pub(crate) fn check_uri(uri: &str) -> Result<(), String> {
    if uri.is_empty() || uri.len() > MAX_URI_BYTES {
        return Err(format!("is {} bytes; give 1 to {MAX_URI_BYTES}", uri.len()));
    }
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("has whitespace or control characters".to_owned());
    }
    let scheme = uri.split(':').next().unwrap_or_default();
    let valid_scheme = uri.contains(':')
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid_scheme {
        return Err("has no scheme (write it like `notes://today` or `file:///a.txt`)".to_owned());
    }
    Ok(())
}

/// A display name: one line, 1 to [`MAX_TITLE_BYTES`] bytes.
fn check_display_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty".to_owned());
    }
    check_title(name).map_err(|problem| problem.to_string())
}

fn check_optional(
    what: &str,
    text: Option<&String>,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<(), String> {
    match text {
        Some(text) => check(text).map_err(|reason| format!("its {what} {reason}")),
        None => Ok(()),
    }
}

fn check_description(text: &str) -> Result<(), String> {
    if text.len() > MAX_DESCRIPTION_BYTES {
        return Err(format!(
            "is {} bytes, over the limit of {MAX_DESCRIPTION_BYTES}",
            text.len()
        ));
    }
    Ok(())
}

/// Checks a resource list: the cap, each URI (unique), name, title, description.
pub(crate) fn check_resources(resources: &[ResourceMeta]) -> Result<(), String> {
    if resources.len() > MAX_RESOURCES {
        return Err(format!(
            "it lists {} resources, over the limit of {MAX_RESOURCES}",
            resources.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for resource in resources {
        let problem = |reason: String| format!("resource '{}': {reason}", resource.uri);
        check_uri(&resource.uri).map_err(|reason| problem(format!("its URI {reason}")))?;
        if !seen.insert(resource.uri.as_str()) {
            return Err(problem("it is listed twice".to_owned()));
        }
        check_display_name(&resource.name)
            .map_err(|reason| problem(format!("its name {reason}")))?;
        check_optional("title", resource.title.as_ref(), check_display_name).map_err(problem)?;
        check_optional(
            "description",
            resource.description.as_ref(),
            check_description,
        )
        .map_err(problem)?;
        check_optional("MIME type", resource.mime_type.as_ref(), check_display_name)
            .map_err(problem)?;
    }
    Ok(())
}

/// Checks the URI templates: the cap, each template's syntax (unique), name, texts.
pub(crate) fn check_templates(templates: &[ResourceTemplate]) -> Result<(), String> {
    if templates.len() > MAX_TEMPLATES {
        return Err(format!(
            "it offers {} resource templates, over the limit of {MAX_TEMPLATES}",
            templates.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for template in templates {
        let problem =
            |reason: String| format!("resource template '{}': {reason}", template.uri_template);
        check_uri(&template.uri_template).map_err(|reason| problem(format!("its URI {reason}")))?;
        llm_worker_rules::template::check_template(&template.uri_template)
            .map_err(|reason| problem(reason.to_string()))?;
        if !seen.insert(template.uri_template.as_str()) {
            return Err(problem("it is offered twice".to_owned()));
        }
        check_display_name(&template.name)
            .map_err(|reason| problem(format!("its name {reason}")))?;
        check_optional("title", template.title.as_ref(), check_display_name).map_err(problem)?;
        check_optional(
            "description",
            template.description.as_ref(),
            check_description,
        )
        .map_err(problem)?;
        check_optional("MIME type", template.mime_type.as_ref(), check_display_name)
            .map_err(problem)?;
    }
    Ok(())
}

/// Checks the prompts: the cap, names as tools' (unique), their arguments.
pub(crate) fn check_prompts(prompts: &[PromptMeta]) -> Result<(), String> {
    if prompts.len() > MAX_PROMPTS {
        return Err(format!(
            "it offers {} prompts, over the limit of {MAX_PROMPTS}",
            prompts.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for prompt in prompts {
        let problem = |reason: String| format!("prompt '{}': {reason}", prompt.name);
        check_name(&prompt.name).map_err(|reason| problem(format!("its name {reason}")))?;
        if !seen.insert(prompt.name.as_str()) {
            return Err(problem("it is offered twice".to_owned()));
        }
        check_optional("title", prompt.title.as_ref(), check_display_name).map_err(problem)?;
        check_optional(
            "description",
            prompt.description.as_ref(),
            check_description,
        )
        .map_err(problem)?;
        if prompt.arguments.len() > MAX_PROMPT_ARGUMENTS {
            return Err(problem(format!(
                "it has {} arguments, over the limit of {MAX_PROMPT_ARGUMENTS}",
                prompt.arguments.len()
            )));
        }
        let mut names = BTreeSet::new();
        for argument in &prompt.arguments {
            let problem =
                |reason: String| problem(format!("argument '{}': {reason}", argument.name));
            check_name(&argument.name).map_err(|reason| problem(format!("its name {reason}")))?;
            if !names.insert(argument.name.as_str()) {
                return Err(problem("it is given twice".to_owned()));
            }
            check_optional("title", argument.title.as_ref(), check_display_name)
                .map_err(problem)?;
            check_optional(
                "description",
                argument.description.as_ref(),
                check_description,
            )
            .map_err(problem)?;
        }
    }
    Ok(())
}

/// A template with its variables' names left out (`notes://{…}/data`): two templates of the
/// same shape match the same URIs.
pub(crate) fn template_shape(template: &str) -> String {
    use llm_worker_rules::template::{Piece, pieces};
    pieces(template)
        .map(|piece| match piece {
            Ok(Piece::Literal(text)) => text,
            Ok(Piece::Variable(_)) | Err(_) => "{…}",
        })
        .collect()
}

/// Whether `uri` is an instance of `template`, by the contract's one rule
/// ([`llm_worker_rules::template::match_uri`], linear in the URI's length).
pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
    llm_worker_rules::template::match_uri(template, uri, |_, _| {})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_need_a_scheme_and_no_spaces() {
        assert_eq!(check_uri("test://static-text"), Ok(()));
        assert_eq!(check_uri("file:///a/b.txt"), Ok(()));
        for bad in [
            "",
            "no-scheme",
            "://x",
            "1x://y",
            "a b://c",
            "x://a b",
            "x://\u{7}",
        ] {
            assert!(check_uri(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(check_uri(&format!("x://{}", "a".repeat(MAX_URI_BYTES))).is_err());
    }

    #[test]
    fn a_template_matches_its_instances_only() {
        let template = "test://template/{id}/data";
        assert!(template_matches(template, "test://template/123/data"));
        assert!(!template_matches(template, "test://template//data"));
        assert!(!template_matches(template, "test://template/1/2/data"));
        assert!(!template_matches(template, "test://template/123/data/more"));
        assert!(!template_matches(template, "xtest://template/123/data"));
        let bad = [
            "x://{",
            "x://}",
            "x://{}",
            "x://{+path}",
            "x://{a}/{a}",
            "x://{a,b}",
        ];
        let listed = |uri: &str| ResourceTemplate {
            uri_template: uri.to_owned(),
            name: "t".to_owned(),
            ..ResourceTemplate::default()
        };
        for template in bad {
            assert!(
                check_templates(&[listed(template)]).is_err(),
                "{template:?} was accepted"
            );
        }
        assert_eq!(check_templates(&[listed("x://{a}/{b}")]), Ok(()));
    }

    #[test]
    fn templates_of_one_shape_are_one_offering() {
        assert_eq!(
            template_shape("notes://note/{number}"),
            template_shape("notes://note/{n}")
        );
        assert_eq!(template_shape("x://{a}/y"), "x://{…}/y");
        assert_ne!(template_shape("x://{a}/y"), template_shape("x://{a}/z"));
    }

    #[test]
    fn a_hostile_uri_is_matched_in_linear_time() {
        let template = format!(
            "x://{}",
            (0..60).map(|i| format!("{{v{i}}}-")).collect::<String>()
        );
        let uri = format!("x://{}", "a-".repeat(5000));
        // Completes at once (a backtracking matcher would not); whether it matches is the
        // rule's business.
        let _ = template_matches(&template, &uri);
        assert!(!template_matches(&template, &format!("{uri}/")));
    }

    #[test]
    fn lists_refuse_duplicates_and_bad_names() {
        let resource = |uri: &str| ResourceMeta::new(uri, "name");
        assert_eq!(
            check_resources(&[resource("a://1"), resource("a://2")]),
            Ok(())
        );
        let twice = check_resources(&[resource("a://1"), resource("a://1")]).expect_err("twice");
        assert!(twice.contains("listed twice"), "{twice}");
        let nameless = check_resources(&[ResourceMeta::new("a://1", "")]).expect_err("nameless");
        assert!(nameless.contains("name"), "{nameless}");
        let prompt = |name: &str| PromptMeta {
            name: name.to_owned(),
            ..PromptMeta::default()
        };
        assert_eq!(check_prompts(&[prompt("summarise")]), Ok(()));
        assert!(check_prompts(&[prompt("has space")]).is_err());
        assert!(check_prompts(&[prompt("p"), prompt("p")]).is_err());
    }
}
