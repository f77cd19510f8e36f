//! Checks what a 0.3.0 plugin offers besides tools: its resources (URIs, names, sizes), URI
//! templates (RFC 6570 level 1) and prompts (names as tools', their arguments), each within
//! caps, unique within the plugin. The same checks apply to a list a plugin gives again after
//! saying it changed.

use std::collections::BTreeSet;

use llm_worker_rules::prompt::{MAX_PROMPT_ARGUMENTS, MAX_PROMPTS};
use llm_worker_rules::resource::{
    MAX_RESOURCES, MAX_TEMPLATES, check_mime_type, check_resource_uri,
};
use llm_worker_rules::template::check_template;
use llm_worker_rules::tool::{VisibleCut, check_name, check_title};

/// Most characters of a name or URI a refusal quotes (it may be refused for its length).
const SHOWN: usize = 200;

use crate::tool::{Content, PromptMeta, ResourceContents, ResourceMeta, ResourceTemplate};

/// A display name: one line, 1 to [`MAX_TITLE_BYTES`] bytes.
fn check_display_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty".to_owned());
    }
    check_title(name).map_err(|problem| problem.to_string())
}

/// A MIME type, by the contract's one rule ([`check_mime_type`]).
fn mime_type(mime: &str) -> Result<(), String> {
    check_mime_type(mime).map_err(|problem| format!("{mime:?} is refused: {problem}"))
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
    super::check_description(text).map_err(|reason| format!("is refused: {reason}"))
}

/// Checks content a plugin returns (a tool's result, a prompt's messages): each MIME type, of
/// media, embedded contents and links, by the contract's rule, as a listed resource's is at
/// load (clients show them, and put them where a MIME type goes). The URIs it names are held
/// to the rules of listed ones where they reach a client (MCP's `speaks_for_itself`).
pub(crate) fn check_content(content: &Content) -> Result<(), String> {
    match content {
        Content::Text(_) => Ok(()),
        Content::Image(media) | Content::Audio(media) => mime_type(&media.mime_type)
            .map_err(|reason| format!("a media block's MIME type {reason}")),
        Content::Resource(contents) => check_resource_contents(contents),
        Content::Link(link) => check_optional("MIME type", link.mime_type.as_ref(), mime_type)
            .map_err(|reason| format!("a link to a resource: {reason}")),
    }
}

/// Checks the MIME type of a resource's contents a plugin returns (read, or embedded in
/// content), as [`check_content`] does.
pub(crate) fn check_resource_contents(contents: &ResourceContents) -> Result<(), String> {
    check_optional("MIME type", contents.mime_type.as_ref(), mime_type)
        .map_err(|reason| format!("a resource's contents: {reason}"))
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
        let problem =
            |reason: String| format!("resource '{}': {reason}", VisibleCut(&resource.uri, SHOWN));
        check_resource_uri(&resource.uri)
            .map_err(|reason| problem(format!("its URI is refused: {reason}")))?;
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
        check_optional("MIME type", resource.mime_type.as_ref(), mime_type).map_err(problem)?;
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
        let problem = |reason: String| {
            format!(
                "resource template '{}': {reason}",
                VisibleCut(&template.uri_template, SHOWN)
            )
        };
        check_template(&template.uri_template)
            .map_err(|reason| problem(format!("its URI template is refused: {reason}")))?;
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
        check_optional("MIME type", template.mime_type.as_ref(), mime_type).map_err(problem)?;
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
        let problem =
            |reason: String| format!("prompt '{}': {reason}", VisibleCut(&prompt.name, SHOWN));
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
            let problem = |reason: String| {
                problem(format!(
                    "argument '{}': {reason}",
                    VisibleCut(&argument.name, SHOWN)
                ))
            };
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
    // A loaded plugin's templates were checked at load: not again for each URI looked up.
    llm_worker_rules::template::matches_checked(template, uri)
}

/// `uri` as RFC 3986 compares URIs: the rules' one definition
/// ([`llm_worker_rules::resource::comparable_uri`]).
pub(crate) use llm_worker_rules::resource::comparable_uri;

#[cfg(test)]
mod tests {
    use super::*;

    /// URIs and MIME types on both sides of the rules. The load check must give the rules'
    /// answer; the macros' tests (`guest-macros/src/parse/catalog.rs`) assert the same of
    /// the macros, so what builds loads and what is refused at load does not build.
    const SAMPLE_URIS: &[(&str, bool)] = &[
        ("notes://today", true),
        ("file:///a/b.txt", true),
        ("urn:isbn:0451450523", true),
        ("a+b.c-d:x", true),
        ("my notes:x", false),
        ("notes://a b", false),
        ("notes://tab\there", false),
        ("today", false),
        ("1x://y", false),
        ("://x", false),
        ("", false),
        ("notes://{id}", false),
        // Not in normal form: another plugin could offer the same resource spelt otherwise.
        ("NOTES://all", false),
        ("notes://ALL", false),
        ("notes://%61ll", false),
        ("notes://all/%2f", false),
        ("notes://all/%2F", true),
        ("notes://all/A", true),
        ("urn:ISBN:0451450523", true),
        ("notes://a%2Fb/x", true),
        ("notes://all/%+A", false),
        ("x://Alice@h/x", true),
    ];
    const SAMPLE_MIME_TYPES: &[(&str, bool)] = &[
        ("text/plain", true),
        ("image/png", true),
        ("application/vnd.api+json", true),
        ("text/plain; charset=utf-8", true),
        ("markdown", false),
        ("text/", false),
        ("text/pl ain", false),
        ("text/plain/x", false),
        ("", false),
    ];

    #[test]
    fn the_load_check_is_the_rule_the_macros_apply() {
        for &(uri, valid) in SAMPLE_URIS {
            let loaded = check_resources(&[ResourceMeta::new(uri, "name")]);
            assert_eq!(loaded.is_ok(), valid, "{uri:?}: {loaded:?}");
            assert_eq!(check_resource_uri(uri).is_ok(), valid, "{uri:?}");
        }
        for &(mime, valid) in SAMPLE_MIME_TYPES {
            let resource = ResourceMeta {
                mime_type: Some(mime.to_owned()),
                ..ResourceMeta::new("notes://today", "name")
            };
            let template = ResourceTemplate {
                uri_template: "notes://{id}".to_owned(),
                name: "t".to_owned(),
                mime_type: Some(mime.to_owned()),
                ..ResourceTemplate::default()
            };
            let loaded = check_resources(&[resource]);
            assert_eq!(loaded.is_ok(), valid, "{mime:?}: {loaded:?}");
            assert_eq!(check_templates(&[template]).is_ok(), valid, "{mime:?}");
            assert_eq!(check_mime_type(mime).is_ok(), valid, "{mime:?}");
        }
        let refused = check_resources(&[ResourceMeta::new("my notes:x", "notes")])
            .expect_err("a space in a URI");
        assert!(
            refused.starts_with("resource 'my notes:x': its URI is refused")
                && refused.contains("`notes://today`"),
            "{refused}"
        );
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

#[cfg(test)]
mod quoted {
    use super::*;

    /// A URI refused for its length is quoted cut, not whole: a plugin could make it megabytes.
    #[test]
    fn a_refusal_quotes_a_long_uri_cut() {
        let uri = format!("notes://{}", "a".repeat(1 << 20));
        let message = check_resources(&[ResourceMeta::new(&uri, "long")]).expect_err("too long");
        assert!(
            message.len() < 1_000 && message.contains("bytes)"),
            "{}",
            &message[..message.len().min(2_000)]
        );
    }
}
