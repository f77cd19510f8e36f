//! How `#[resource]` and `#[prompt]` methods are served: what their return values become
//! ([`ResourceBody`], [`PromptBody`]), their arguments read from a URI or a prompt request,
//! completions, and the errors for what is not there. Used by generated code only.

use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;

use crate::content::{
    Completion, Message, Prompt, PromptMeta, RequestError, ResourceContents, ResourceData,
    ResourceMeta, ResourceTemplate,
};

/// The most values one completion carries (the contract's limit).
pub use llm_worker_rules::prompt::MAX_COMPLETION_VALUES;

/// What a `#[resource]` method may return: text, bytes, or the contents themselves.
#[diagnostic::on_unimplemented(
    message = "a #[resource] method's return value `{Self}` cannot become the resource's contents",
    label = "not text, bytes or `ResourceContents`",
    note = "return a `String` (text), a `Vec<u8>` (bytes), a `ResourceContents` or a \
            `Vec<ResourceContents>`, bare or as the `T` of a `Result<T, E>`"
)]
pub trait ResourceBody {
    /// The contents of the resource `uri`, with the MIME type of the `#[resource]` marker for
    /// text and bytes.
    fn into_contents(self, uri: &str, mime_type: Option<&str>) -> Vec<ResourceContents>;
}

macro_rules! text_bodies {
    ($($ty:ty => $into:expr),* $(,)?) => {$(
        impl ResourceBody for $ty {
            fn into_contents(self, uri: &str, mime_type: Option<&str>) -> Vec<ResourceContents> {
                let into: fn($ty) -> String = $into;
                vec![ResourceContents {
                    uri: uri.to_owned(),
                    mime_type: mime_type.map(str::to_owned),
                    data: ResourceData::Text(into(self)),
                }]
            }
        }

        impl PromptBody for $ty {
            fn into_prompt(self) -> Prompt {
                let into: fn($ty) -> String = $into;
                Prompt {
                    description: None,
                    messages: vec![Message::user(into(self))],
                }
            }
        }
    )*};
}

text_bodies! {
    String => |text| text,
    &str => str::to_owned,
    Cow<'_, str> => |text| text.into_owned(),
    Box<str> => String::from,
    Arc<str> => |text| text.as_ref().to_owned(),
    Rc<str> => |text| text.as_ref().to_owned(),
}

impl ResourceBody for Vec<u8> {
    fn into_contents(self, uri: &str, mime_type: Option<&str>) -> Vec<ResourceContents> {
        vec![ResourceContents {
            uri: uri.to_owned(),
            mime_type: mime_type.map(str::to_owned),
            data: ResourceData::Blob(self),
        }]
    }
}

impl ResourceBody for ResourceContents {
    fn into_contents(self, _uri: &str, _mime_type: Option<&str>) -> Vec<ResourceContents> {
        vec![self]
    }
}

impl ResourceBody for Vec<ResourceContents> {
    fn into_contents(self, _uri: &str, _mime_type: Option<&str>) -> Vec<ResourceContents> {
        self
    }
}

/// What a `#[prompt]` method may return: text (one user message), messages, or the prompt.
#[diagnostic::on_unimplemented(
    message = "a #[prompt] method's return value `{Self}` cannot become a rendered prompt",
    label = "not text, `Vec<Message>` or `Prompt`",
    note = "return a `String` (one message from the user), a `Vec<Message>` or a `Prompt`, \
            bare or as the `T` of a `Result<T, E>`"
)]
pub trait PromptBody {
    /// The rendered prompt.
    fn into_prompt(self) -> Prompt;
}

impl PromptBody for Vec<Message> {
    fn into_prompt(self) -> Prompt {
        Prompt {
            description: None,
            messages: self,
        }
    }
}

impl PromptBody for Prompt {
    fn into_prompt(self) -> Prompt {
        self
    }
}

/// The contents a resource method's value gives.
pub fn resource_contents<T: ResourceBody>(
    value: T,
    uri: &str,
    mime_type: Option<&str>,
) -> Vec<ResourceContents> {
    value.into_contents(uri, mime_type)
}

/// The prompt a prompt method's value gives.
pub fn prompt<T: PromptBody>(value: T) -> Prompt {
    value.into_prompt()
}

/// The variables of `uri` if it matches `template`, as (name, value) pairs.
#[must_use]
pub fn template_variables(template: &str, uri: &str) -> Option<Vec<(String, String)>> {
    let mut variables = Vec::new();
    llm_worker_rules::template::match_uri(template, uri, |name, value| {
        variables.push((name.to_owned(), value.to_owned()));
    })
    .then_some(variables)
}

/// The value of the variable `name` (the macro checked that the template has it).
#[must_use]
pub fn take_variable(variables: &mut [(String, String)], name: &str) -> String {
    variables
        .iter_mut()
        .find(|(variable, _)| variable == name)
        .map(|(_, value)| std::mem::take(value))
        .unwrap_or_default()
}

/// A prompt's argument as its method declares it.
pub struct ArgumentSpec {
    /// Its name.
    pub name: &'static str,
    /// Whether it must be given (a `String`; an `Option<String>` may be left out).
    pub required: bool,
}

/// The values of the prompt `prompt`'s arguments, in the order of `specs`, from the request's
/// (name, value) pairs.
///
/// # Errors
/// `InvalidArgument` naming a required argument not given, an argument the prompt does not
/// have, or one given twice.
pub fn prompt_arguments(
    prompt: &str,
    given: &[(String, String)],
    specs: &[ArgumentSpec],
) -> Result<Vec<Option<String>>, RequestError> {
    let mut values: Vec<Option<String>> = vec![None; specs.len()];
    for (name, value) in given {
        let Some(at) = specs.iter().position(|spec| spec.name == name) else {
            return Err(RequestError::InvalidArgument(format!(
                "the prompt '{prompt}' has no argument '{name}'; its arguments are: {}",
                names(specs)
            )));
        };
        if values[at].replace(value.clone()).is_some() {
            return Err(RequestError::InvalidArgument(format!(
                "the argument '{name}' of the prompt '{prompt}' is given twice; give it once"
            )));
        }
    }
    for (spec, value) in specs.iter().zip(&values) {
        if spec.required && value.is_none() {
            return Err(RequestError::InvalidArgument(format!(
                "the prompt '{prompt}' needs the argument '{}'",
                spec.name
            )));
        }
    }
    Ok(values)
}

fn names(specs: &[ArgumentSpec]) -> String {
    if specs.is_empty() {
        return "(none)".to_owned();
    }
    specs
        .iter()
        .map(|spec| spec.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A required argument's value (checked by [`prompt_arguments`]).
#[must_use]
pub fn required(value: Option<String>) -> String {
    value.unwrap_or_default()
}

/// A completion of these values: the first [`MAX_COMPLETION_VALUES`], with the total and
/// whether there are more.
#[must_use]
pub fn completion(mut values: Vec<String>) -> Completion {
    let total = values.len();
    values.truncate(MAX_COMPLETION_VALUES);
    Completion {
        has_more: total > values.len(),
        total: u32::try_from(total).ok(),
        values,
    }
}

/// `NotFound` for a URI that is neither a resource nor matches a template, naming them.
#[must_use]
pub fn resource_not_found(
    uri: &str,
    resources: &[ResourceMeta],
    templates: &[ResourceTemplate],
) -> RequestError {
    let known: Vec<&str> = resources
        .iter()
        .map(|r| r.uri.as_str())
        .chain(templates.iter().map(|t| t.uri_template.as_str()))
        .collect();
    RequestError::NotFound(format!(
        "no resource '{uri}'; this plugin's resources and templates are: {}",
        list(&known)
    ))
}

/// `NotFound` for a prompt that is not there, naming those that are.
#[must_use]
pub fn prompt_not_found(name: &str, prompts: &[PromptMeta]) -> RequestError {
    let known: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    RequestError::NotFound(format!(
        "no prompt '{name}'; this plugin's prompts are: {}",
        list(&known)
    ))
}

/// `NotFound` for a completion of a template that is not there.
#[must_use]
pub fn template_not_found(template: &str, templates: &[ResourceTemplate]) -> RequestError {
    let known: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    RequestError::NotFound(format!(
        "no resource template '{template}'; this plugin's templates are: {}",
        list(&known)
    ))
}

/// `InvalidArgument` for completing an argument that `what` does not have.
#[must_use]
pub fn no_such_argument(what: &str, argument: &str, arguments: &[&str]) -> RequestError {
    RequestError::InvalidArgument(format!(
        "{what} has no argument '{argument}'; its arguments are: {}",
        list(arguments)
    ))
}

fn list(names: &[&str]) -> String {
    if names.is_empty() {
        "(none)".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: [ArgumentSpec; 2] = [
        ArgumentSpec {
            name: "topic",
            required: true,
        },
        ArgumentSpec {
            name: "tone",
            required: false,
        },
    ];

    fn pair(name: &str, value: &str) -> (String, String) {
        (name.to_owned(), value.to_owned())
    }

    #[test]
    fn prompt_arguments_are_checked_and_ordered() {
        let values = prompt_arguments("p", &[pair("tone", "dry"), pair("topic", "owls")], &SPECS);
        assert_eq!(values, Ok(vec![Some("owls".into()), Some("dry".into())]));
        let missing = prompt_arguments("p", &[pair("tone", "dry")], &SPECS);
        assert!(matches!(missing, Err(RequestError::InvalidArgument(t)) if t.contains("'topic'")));
        let unknown = prompt_arguments("p", &[pair("topik", "x")], &SPECS);
        assert!(
            matches!(unknown, Err(RequestError::InvalidArgument(t)) if t.contains("topic, tone"))
        );
        let twice = prompt_arguments("p", &[pair("topic", "a"), pair("topic", "b")], &SPECS);
        assert!(matches!(twice, Err(RequestError::InvalidArgument(t)) if t.contains("twice")));
    }

    #[test]
    fn completions_are_capped() {
        let many: Vec<String> = (0..150).map(|n| n.to_string()).collect();
        let completion = completion(many);
        assert_eq!(completion.values.len(), MAX_COMPLETION_VALUES);
        assert_eq!(completion.total, Some(150));
        assert!(completion.has_more);
        assert!(!super::completion(vec!["a".into()]).has_more);
    }

    #[test]
    fn bodies_become_contents_and_prompts() {
        let text = resource_contents("hi", "a://b", Some("text/plain"));
        assert_eq!(
            text,
            vec![ResourceContents::text("a://b", Some("text/plain"), "hi")]
        );
        let bytes = resource_contents(vec![1u8, 2], "a://b", None);
        assert_eq!(bytes[0].data, ResourceData::Blob(vec![1, 2]));
        assert_eq!(prompt("Say hi").messages, vec![Message::user("Say hi")]);
        let mut variables = template_variables("a://{x}/y", "a://1/y").unwrap_or_default();
        assert_eq!(take_variable(&mut variables, "x"), "1");
        assert_eq!(template_variables("a://{x}/y", "a://1/z"), None);
    }
}
