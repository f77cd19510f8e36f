//! Fetch: the `fetch` tool and prompt of the MCP reference server `mcp-server-fetch` (same
//! names, arguments, defaults, paging and messages), through the policy's HTTP grants only.
//!
//! A page is fetched with redirects followed (each hop is a new request the host checks
//! against the grants), its HTML turned into Markdown (see [`markdown`]), and one page of at
//! most `max_length` characters returned from `start_index`. Tool calls obey robots.txt for
//! the autonomous user agent, on the page and on every redirect hop, as the original does; the
//! prompt (a user's own request) does not.
//!
//! Settings, as the original's flags, from the policy's `[env]` (read at each call):
//! `FETCH_USER_AGENT` (`--user-agent`) and `FETCH_IGNORE_ROBOTS_TXT=1`
//! (`--ignore-robots-txt`); and `FETCH_TIMEOUT_MS` (default 25000), after which a call gives
//! up waiting for responses with its own message, before the host's time limit stops it.
//! Private addresses and proxies are the host's business (`[http] allow_private`).

pub mod http;
pub mod markdown;
mod prompt;

use http::{Deadline, Failure, Response};
use llm_worker_guest::{ToolDefinition, ToolRegistry, tool, tool_registry};
use url::Url;

/// The user agent of tool calls, which obey robots.txt.
pub const USER_AGENT_AUTONOMOUS: &str =
    "ModelContextProtocol/1.0 (Autonomous; +https://github.com/modelcontextprotocol/servers)";
/// The user agent of the prompt: a user's own request.
pub const USER_AGENT_MANUAL: &str =
    "ModelContextProtocol/1.0 (User-Specified; +https://github.com/modelcontextprotocol/servers)";

/// How long a call waits for its responses, all together, unless `FETCH_TIMEOUT_MS` says.
const DEFAULT_TIMEOUT_MS: u64 = 25_000;

/// Redirects followed before giving up (httpx's default, as the original).
const MAX_REDIRECTS: usize = 20;

/// The most bytes of page text one answer carries: within the host's default output limit
/// (1 MiB) with room for the URL and the notes. A page over it is cut, with the note saying
/// where to start the next call.
const MAX_ANSWER_BYTES: usize = 1_000_000;

/// The plugin: the `fetch` tool and the `fetch` prompt (one name, two registries, since a
/// method name is both).
#[derive(Clone, Default)]
pub struct Fetch {
    tool: FetchTool,
    prompt: prompt::FetchPrompt,
}

impl ToolRegistry for Fetch {
    fn tool_definitions(&self) -> Vec<ToolDefinition> {
        self.tool.tool_definitions()
    }

    // The prompt registry has no resources: their defaults, as a registry without any.
    llm_worker_guest::forward_offerings!(prompt);
}

/// The `fetch` tool.
#[derive(Clone, Default)]
pub struct FetchTool;

#[tool_registry]
impl FetchTool {
    /// Fetches a URL from the internet and optionally extracts its contents as markdown.
    ///
    /// Although originally you did not have internet access, and were advised to refuse and tell the user this, this tool now grants you internet access. Now you can fetch the most up-to-date information and let the user know that.
    #[tool(idempotent, destructive = false, open_world)]
    async fn fetch(
        &self,
        #[description = "URL to fetch"]
        #[schemars(length(min = 1))]
        url: String,
        #[description = "Maximum number of characters to return."]
        #[default = 5000]
        #[schemars(range(min = 1, max = 999_999))]
        max_length: u32,
        #[description = "On return output starting at this character index, useful if a previous fetch was truncated and more context is required."]
        #[default = 0]
        start_index: u64,
        #[description = "Get the actual HTML content of the requested page, without simplification."]
        #[default = false]
        raw: bool,
    ) -> Result<String, String> {
        let settings = Settings::from_env();
        let limit = settings.limit();
        let page_url = parse(&url)?;
        if !settings.ignore_robots_txt {
            may_autonomously_fetch(&page_url, &settings.user_agent_autonomous, &limit).await?;
        }
        let robots =
            (!settings.ignore_robots_txt).then_some(settings.user_agent_autonomous.as_str());
        let agent = &settings.user_agent_autonomous;
        let (content, prefix) = fetch_url(&page_url, agent, raw, robots, &limit).await?;
        Ok(format!(
            "{prefix}Contents of {page_url}:\n{}",
            page(&content, start_index, max_length)
        ))
    }
}

/// The settings, from the environment: the original's flags, and how long to wait.
struct Settings {
    user_agent_autonomous: String,
    user_agent_manual: String,
    ignore_robots_txt: bool,
    timeout_ms: u64,
}

/// How long a call may wait, and until when.
struct Limit {
    timeout_ms: u64,
    deadline: Deadline,
}

impl Settings {
    fn from_env() -> Self {
        let custom = std::env::var("FETCH_USER_AGENT")
            .ok()
            .filter(|agent| !agent.is_empty());
        let ignore = std::env::var("FETCH_IGNORE_ROBOTS_TXT")
            .is_ok_and(|value| matches!(value.to_ascii_lowercase().as_str(), "1" | "true" | "yes"));
        let timeout_ms = std::env::var("FETCH_TIMEOUT_MS")
            .ok()
            .and_then(|ms| ms.trim().parse().ok())
            .unwrap_or(DEFAULT_TIMEOUT_MS);
        Self {
            user_agent_autonomous: custom
                .clone()
                .unwrap_or_else(|| USER_AGENT_AUTONOMOUS.to_owned()),
            user_agent_manual: custom.unwrap_or_else(|| USER_AGENT_MANUAL.to_owned()),
            ignore_robots_txt: ignore,
            timeout_ms,
        }
    }

    /// The limit of a call starting now.
    fn limit(&self) -> Limit {
        Limit {
            timeout_ms: self.timeout_ms,
            deadline: Deadline::after(self.timeout_ms),
        }
    }
}

/// Whether `url` carries a user name or password.
fn carries_credentials(url: &Url) -> bool {
    !url.username().is_empty() || url.password().is_some()
}

/// The refusal of `url`, which carries a user name or password: named without them.
fn credentials_refused(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    format!(
        "Failed to fetch {shown}: the URL carries a user name or password, which this server \
         does not send; an operator can give the site's credentials as a secret header \
         ([[http.secrets]] in fetch.policy.toml), which the host adds to its requests"
    )
}

/// An absolute `http` or `https` URL.
fn parse(url: &str) -> Result<Url, String> {
    let parsed = Url::parse(url).map_err(|e| format!("Invalid URL {url:?}: {e}"))?;
    if carries_credentials(&parsed) {
        // The request would go without them (the host sends no user information): said,
        // rather than fetched as someone else; and not repeated.
        return Err(credentials_refused(&parsed));
    }
    match parsed.scheme() {
        "http" | "https" if parsed.host().is_some() => Ok(parsed),
        "http" | "https" => Err(format!("Invalid URL {url:?}: it has no host")),
        other => Err(format!(
            "Failed to fetch {parsed}: the scheme {other}: is not fetched; give an http:// or \
             https:// URL"
        )),
    }
}

/// One page of `content`: at most `max_length` characters (and [`MAX_ANSWER_BYTES`] bytes)
/// from `start_index`, with the original's notes.
pub fn page(content: &str, start_index: u64, max_length: u32) -> String {
    let total = content.chars().count() as u64;
    if start_index >= total {
        return "<error>No more content available.</error>".to_owned();
    }
    let start = usize::try_from(start_index).unwrap_or(usize::MAX);
    let mut taken = 0u64;
    let mut bytes = 0usize;
    let mut cut_short = false;
    let mut piece = String::new();
    for ch in content.chars().skip(start) {
        if taken == u64::from(max_length) {
            break;
        }
        if bytes + ch.len_utf8() > MAX_ANSWER_BYTES {
            cut_short = true;
            break;
        }
        bytes += ch.len_utf8();
        taken += 1;
        piece.push(ch);
    }
    let remaining = total - (start_index + taken);
    if (taken == u64::from(max_length) || cut_short) && remaining > 0 {
        let next = start_index + taken;
        piece.push_str(&format!(
            "\n\n<error>Content truncated. Call the fetch tool with a start_index of {next} to \
             get more content.</error>"
        ));
    }
    piece
}

/// What a refused request says: the host would not send it.
fn refusal(url: &Url, failure: &Failure) -> String {
    let (authority, _) = http::target(url);
    match failure {
        Failure::NotPublic => format!(
            "Refused to fetch {url}: {} resolves to an address that is not public. An operator \
             can name the address in [http] allow, or list the rule in [http] allow_private, in \
             fetch.policy.toml.",
            url.host_str().unwrap_or(authority)
        ),
        _ => format!(
            "Refused to fetch {url}: {}://{authority} is not among the hosts this plugin may \
             reach. An operator can grant it in fetch.policy.toml ([http] allow).",
            url.scheme()
        ),
    }
}

/// Where a redirect leads, if `response` is one.
fn redirect(from: &Url, response: &Response) -> Option<Result<Url, String>> {
    if !matches!(response.status, 301 | 302 | 303 | 307 | 308) {
        return None;
    }
    let location = response.location.as_deref()?;
    let to = match from.join(location) {
        Ok(to) => to,
        Err(e) => {
            return Some(Err(format!(
                "Failed to fetch {from}: its redirect to {location:?} is not a URL: {e}"
            )));
        }
    };
    // As the original's client: only to http and https (another scheme's URL, `wss:` or
    // `ftp:`, would otherwise be fetched as plain http on that scheme's host).
    Some(match to.scheme() {
        "http" | "https" if carries_credentials(&to) => Err(credentials_refused(&to)),
        "http" | "https" if to.host().is_some() => Ok(to),
        _ => Err(format!(
            "Failed to fetch {from}: its redirect to {to} is not to an http:// or https:// URL \
             (unsupported protocol)"
        )),
    })
}

/// `url`'s robots.txt: `scheme://host[:port]/robots.txt`.
fn robots_url(url: &Url) -> Url {
    let mut robots = url.clone();
    robots.set_path("/robots.txt");
    robots.set_query(None);
    robots.set_fragment(None);
    robots
}

/// Refuses what `url`'s robots.txt forbids `user_agent`, with the original's messages.
async fn may_autonomously_fetch(url: &Url, user_agent: &str, limit: &Limit) -> Result<(), String> {
    let robots_txt_url = robots_url(url);
    let connection_issue =
        || format!("Failed to fetch robots.txt {robots_txt_url} due to a connection issue");
    let mut at = robots_txt_url.clone();
    let mut hops = 0;
    let response = loop {
        let response = match http::get(&at, user_agent, limit.deadline).await {
            Ok(response) => response,
            // The page's own origin, or where its robots.txt redirects: named as the page.
            Err(failure @ (Failure::NotGranted | Failure::NotPublic)) => {
                return Err(refusal(if hops == 0 { url } else { &at }, &failure));
            }
            Err(_) => return Err(connection_issue()),
        };
        match redirect(&at, &response) {
            Some(Ok(next)) if hops < MAX_REDIRECTS => {
                hops += 1;
                at = next;
            }
            Some(_) => return Err(connection_issue()),
            None => break response,
        }
    };
    match response.status {
        401 | 403 => {
            return Err(format!(
                "When fetching robots.txt ({robots_txt_url}), received status {} so assuming \
                 that autonomous fetching is not allowed, the user can try manually fetching by \
                 using the fetch prompt",
                response.status
            ));
        }
        400..=499 => return Ok(()),
        _ => {}
    }
    let robots_txt = text(&response.body, &response.content_type);
    if robots_allow(&robots_txt, user_agent, url.as_str()) {
        return Ok(());
    }
    Err(format!(
        "The sites robots.txt ({robots_txt_url}), specifies that autonomous fetching of this \
         page is not allowed, <useragent>{user_agent}</useragent>\n<url>{url}</url><robots>\n\
         {robots_txt}\n</robots>\nThe assistant must let the user know that it failed to view \
         the page. The assistant may provide further guidance based on the above \
         information.\nThe assistant can tell the user that they can try manually fetching the \
         page by using the fetch prompt within their UI."
    ))
}

/// Most bytes of a robots.txt line read (see [`robots_allow`]).
const MAX_ROBOTS_LINE_BYTES: usize = 16_000;

/// The lines of `text` as Python's `str.splitlines` gives them: ended by `\n`, `\r\n`, `\r`,
/// and the other breaks Python counts (vertical tab, form feed, the file, group and record
/// separators, U+0085, U+2028, U+2029).
fn python_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some((at, brk)) = rest.char_indices().find(|(_, c)| {
            matches!(
                c,
                '\n' | '\r'
                    | '\u{b}'
                    | '\u{c}'
                    | '\u{1c}'
                    | '\u{1d}'
                    | '\u{1e}'
                    | '\u{85}'
                    | '\u{2028}'
                    | '\u{2029}'
            )
        }) else {
            let line = rest;
            rest = "";
            return Some(line);
        };
        let line = &rest[..at];
        let width = if rest[at..].starts_with("\r\n") {
            2
        } else {
            brk.len_utf8()
        };
        rest = &rest[at + width..];
        Some(line)
    })
}

/// Whether `robots_txt` (its comment lines left out, as the original does) lets `user_agent`
/// fetch `url`: the group of the agent's product token (`ModelContextProtocol`), else `*`.
pub fn robots_allow(robots_txt: &str, user_agent: &str, url: &str) -> bool {
    // The parser (robotstxt 0.3) skips what passes 16,662 bytes of a line by characters but
    // steps by bytes, and then slices the next line inside a character: a panic (a trap) on a
    // long line with letters beyond ASCII. No rule is that long: lines are cut, at a character.
    // Lines as the original splits them (Python's `splitlines`): a file of `\r` endings is
    // many lines, not one cut at its first 16,000 bytes with every rule after them.
    let rules: String = python_lines(robots_txt)
        .filter(|line| !line.trim().starts_with('#'))
        .map(|line| &line[..line.floor_char_boundary(MAX_ROBOTS_LINE_BYTES)])
        .collect::<Vec<_>>()
        .join("\n");
    let token: String = user_agent
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    let rules = unreserved_decoded(&rules);
    // As RFC 9309 compares them; and with every escape decoded too, since many servers decode
    // `%2F` and serve `/private%2Fx` as `/private/x`: refused if either form is.
    [unreserved_decoded(url), path_decoded(url)]
        .iter()
        .all(|url| {
            robotstxt::DefaultMatcher::default().one_agent_allowed_by_robots(&rules, &token, url)
        })
}

/// `url` as a server that decodes the whole path before resolving its dot segments serves it:
/// the path decoded (`%2F` a `/`, `..%2F` a `..` segment), its dot segments resolved, a decoded
/// `?` or `#` kept in the path (written encoded again), the query as it was.
fn path_decoded(url: &str) -> String {
    let Ok(parsed) = Url::parse(url) else {
        return fully_decoded(url);
    };
    let mut segments: Vec<String> = Vec::new();
    let decoded = fully_decoded(parsed.path());
    let parts: Vec<&str> = decoded.split('/').skip(1).collect();
    for (at, segment) in parts.iter().enumerate() {
        match *segment {
            "." | ".." => {
                if *segment == ".." {
                    segments.pop();
                }
                // A dot segment that ends the path leaves it ending in `/` (RFC 3986).
                if at + 1 == parts.len() {
                    segments.push(String::new());
                }
            }
            other => segments.push(other.replace('?', "%3F").replace('#', "%23")),
        }
    }
    let mut out = format!(
        "{}://{}/{}",
        parsed.scheme(),
        parsed.host_str().unwrap_or_default(),
        segments.join("/")
    );
    if let Some(query) = parsed.query() {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// `text` with every percent escape decoded (bytes that are not UTF-8 replaced).
fn fully_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let decoded = (bytes[at] == b'%')
            .then(|| bytes.get(at + 1..at + 3))
            .flatten()
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match decoded {
            Some(byte) => {
                out.push(byte);
                at += 3;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `text` with every percent-encoded unreserved character (letters, digits, `-`, `.`, `_`,
/// `~`) decoded and every other escape's hex digits in upper case: RFC 9309 compares a URL's
/// path with a rule's so (`/%70rivate` is `/private`, which a server serves as such), and the
/// parser does not.
fn unreserved_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(offset) = text[at..].find('%') {
        let escape = at + offset;
        out.push_str(&text[at..escape]);
        let hex = bytes.get(escape + 1..escape + 3);
        let decoded = hex
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match decoded {
            Some(byte) if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) => {
                out.push(char::from(byte));
            }
            Some(byte) => out.push_str(&format!("%{byte:02X}")),
            None => {
                out.push('%');
                at = escape + 1;
                continue;
            }
        }
        at = escape + 3;
    }
    out.push_str(&text[at..]);
    out
}

/// The page at `url` ready for a model, and the prefix saying it is raw: redirects followed
/// (each hop checked against robots.txt for `robots`' agent, if given); an error for a status
/// of 400 or more.
async fn fetch_url(
    page_url: &Url,
    user_agent: &str,
    force_raw: bool,
    robots: Option<&str>,
    limit: &Limit,
) -> Result<(String, String), String> {
    let mut at = page_url.clone();
    let mut hops = 0;
    let response = loop {
        if hops > 0
            && let Some(agent) = robots
        {
            may_autonomously_fetch(&at, agent, limit).await?;
        }
        let response = match http::get(&at, user_agent, limit.deadline).await {
            Ok(response) => response,
            Err(failure @ (Failure::NotGranted | Failure::NotPublic)) => {
                return Err(refusal(&at, &failure));
            }
            Err(Failure::TimedOut) => {
                return Err(format!(
                    "Failed to fetch {page_url}: no complete response within {} ms (the site is \
                     slow, or sends its page slowly); an operator can raise FETCH_TIMEOUT_MS \
                     ([env]) and [limits] timeout_ms in fetch.policy.toml",
                    limit.timeout_ms
                ));
            }
            Err(Failure::CallTimeLimit) => {
                return Err(format!(
                    "Failed to fetch {page_url}: the call's time limit ended before the response \
                     did; an operator can raise [limits] timeout_ms in fetch.policy.toml"
                ));
            }
            Err(Failure::Other(what)) => return Err(format!("Failed to fetch {page_url}: {what}")),
        };
        match redirect(&at, &response) {
            Some(Ok(next)) if hops < MAX_REDIRECTS => {
                hops += 1;
                at = next;
            }
            Some(Ok(_)) => {
                return Err(format!(
                    "Failed to fetch {page_url}: more than {MAX_REDIRECTS} redirects"
                ));
            }
            Some(Err(error)) => return Err(error),
            None => break response,
        }
    };
    if response.status >= 400 {
        return Err(format!(
            "Failed to fetch {page_url} - status code {}",
            response.status
        ));
    }
    let mut page_raw = text(&response.body, &response.content_type);
    let content_type = &response.content_type;
    let head: String = page_raw.chars().take(100).collect();
    let is_page_html =
        head.contains("<html") || content_type.contains("text/html") || content_type.is_empty();
    let cut_note = response.cut.then(|| {
        format!(
            "\n\n<error>The response was longer than {} bytes: only its start was read.</error>",
            http::MAX_BODY_BYTES
        )
    });
    if is_page_html && !force_raw {
        let mut content = markdown::extract(&page_raw);
        content.extend(cut_note);
        return Ok((content, String::new()));
    }
    page_raw.extend(cut_note);
    Ok((
        page_raw,
        format!(
            "Content type {content_type} cannot be simplified to markdown, but here is the raw \
             content:\n"
        ),
    ))
}

/// A body as text: Latin-1 when the content type says so, else UTF-8 (invalid bytes replaced).
fn text(body: &[u8], content_type: &str) -> String {
    let lower = content_type.to_ascii_lowercase();
    if ["iso-8859-1", "latin-1", "latin1", "windows-1252"]
        .iter()
        .any(|name| lower.contains(&format!("charset={name}")))
    {
        return body.iter().map(|&b| char::from(b)).collect();
    }
    String::from_utf8_lossy(body).into_owned()
}

llm_worker_guest::export_plugin!(Fetch);

#[cfg(test)]
mod tests {
    use super::*;

    /// A redirect to another scheme (whose host the `url` crate would keep, without that
    /// scheme's port) is an error, not a plain-http request.
    #[test]
    fn redirects_lead_to_http_and_https_only() {
        let from = Url::parse("https://granted.example/page").expect("URL");
        let to = |location: &str| {
            let response = Response {
                status: 302,
                content_type: String::new(),
                location: Some(location.to_owned()),
                body: Vec::new(),
                cut: false,
            };
            redirect(&from, &response).expect("a redirect")
        };
        assert_eq!(
            to("/next").expect("same site").as_str(),
            "https://granted.example/next"
        );
        assert_eq!(
            to("http://other.example/").expect("http").as_str(),
            "http://other.example/"
        );
        for location in [
            "wss://granted.example/x",
            "ftp://granted.example:2121/",
            "file:///etc/passwd",
        ] {
            let refused = to(location).expect_err(location);
            assert!(refused.contains("unsupported protocol"), "{refused}");
        }
        // A redirect to a URL with credentials: refused as the first URL would be.
        let refused = to("https://admin:secret@granted.example/").expect_err("refused");
        assert!(
            refused.contains("user name or password") && !refused.contains("secret@"),
            "{refused}"
        );
    }

    #[test]
    fn pages_by_characters_with_the_original_notes() {
        let content = "héllo wörld";
        assert_eq!(
            page(content, 0, 5),
            "héllo\n\n<error>Content truncated. Call the fetch tool with a start_index of 5 to \
             get more content.</error>"
        );
        assert_eq!(page(content, 6, 5), "wörld");
        assert_eq!(page(content, 6, 100), "wörld");
        assert_eq!(
            page(content, 11, 5),
            "<error>No more content available.</error>"
        );
        assert_eq!(
            page(content, u64::MAX, 5),
            "<error>No more content available.</error>"
        );
    }

    #[test]
    fn an_answer_stays_within_the_output_budget() {
        let content = "é".repeat(MAX_ANSWER_BYTES);
        let answer = page(&content, 0, 999_999);
        let next = MAX_ANSWER_BYTES / 2;
        assert!(answer.ends_with(&format!(
            "a start_index of {next} to get more content.</error>"
        )));
        assert!(answer.len() < MAX_ANSWER_BYTES + 200);
    }

    #[test]
    fn robots_rules_for_the_autonomous_agent() {
        let robots = "# a comment\nUser-agent: *\nDisallow: /private\n\nUser-agent: \
                      ModelContextProtocol\nDisallow: /no-models\n";
        let allowed = |url| robots_allow(robots, USER_AGENT_AUTONOMOUS, url);
        assert!(allowed("http://a.example/public"));
        assert!(
            allowed("http://a.example/private"),
            "our group replaces *'s"
        );
        assert!(!allowed("http://a.example/no-models/page"));
        // Percent-encoded unreserved characters are the characters (RFC 9309), in the URL and
        // in the rule; other escapes compare whatever the case of their hex digits.
        assert!(!allowed("http://a.example/%6Eo-models/page"));
        assert!(!allowed("http://a.example/no%2dmodels/page"));
        // Lines ended by `\r` alone (old Mac files), past the 16,000 bytes a line is cut at.
        let carriage = format!(
            "User-agent: *\r{}Disallow: /private\r",
            (0..2_000)
                .map(|k| format!("Disallow: /a{k:04}\r"))
                .collect::<String>()
        );
        assert!(!robots_allow(
            &carriage,
            "Other",
            "http://a.example/private"
        ));
        assert!(robots_allow(&carriage, "Other", "http://a.example/public"));
        assert_eq!(
            python_lines("a\r\nb\rc\nd\u{2028}e\u{c}f\n").collect::<Vec<_>>(),
            ["a", "b", "c", "d", "e", "f"]
        );
        assert_eq!(python_lines("\n\nx").collect::<Vec<_>>(), ["", "", "x"]);
        let encoded = "User-agent: *\nDisallow: /%70rivate\nDisallow: /a%2fb\n";
        let others = |url| robots_allow(encoded, "Other", url);
        assert!(!others("http://a.example/private"));
        assert!(!others("http://a.example/a%2Fb"));
        // A server decoding `%2F` serves `/private%2Fx` as `/private/x`: refused as well.
        assert!(!others("http://a.example/private%2Fx"));
        assert!(!others("http://a.example/public/..%2Fprivate/x"));
        // A decoded `?` or `#` does not end the path.
        assert!(!others("http://a.example/public%3F/..%2Fprivate/x"));
        assert!(!others("http://a.example/public%23/..%2Fprivate/x"));
        assert!(others("http://a.example/public/x?q=%2Fprivate"));
        let directory = "User-agent: *\nDisallow: /private/\n";
        for url in [
            "http://a.example/private%2F.",
            "http://a.example/public/..%2Fprivate%2F.",
        ] {
            assert!(!robots_allow(directory, "Other", url), "{url}");
        }
        assert!(robots_allow(directory, "Other", "http://a.example/private"));
        assert!(others("http://a.example/a/b"));
        assert!(others("http://a.example/%"));
        let everyone = "User-agent: *\nDisallow: /\n";
        assert!(!robots_allow(
            everyone,
            USER_AGENT_AUTONOMOUS,
            "http://a.example/x"
        ));
        assert!(robots_allow(
            "",
            USER_AGENT_AUTONOMOUS,
            "http://a.example/x"
        ));
    }

    /// A line past the parser's 16,662 bytes with letters beyond ASCII made it slice the next
    /// line inside a character: a panic on every fetch of the site.
    #[test]
    fn a_hostile_robots_txt_is_read_without_panicking() {
        let robots = format!(
            "User-agent: *\nDisallow: /{}{}\nDisallow: /private\n",
            "A".repeat(16_700),
            "é".repeat(10)
        );
        assert!(!robots_allow(
            &robots,
            USER_AGENT_AUTONOMOUS,
            "https://a.example/private"
        ));
        assert!(robots_allow(
            &robots,
            USER_AGENT_AUTONOMOUS,
            "https://a.example/public"
        ));
    }

    #[test]
    fn robots_txt_is_at_the_root_of_the_origin() {
        let url = Url::parse("http://a.example:8080/x/y?q=1#f").expect("a URL");
        assert_eq!(
            robots_url(&url).as_str(),
            "http://a.example:8080/robots.txt"
        );
    }

    #[test]
    fn only_web_urls_are_fetched() {
        assert!(parse("https://example.com").is_ok());
        assert_eq!(
            parse("https://example.com").map(|u| u.to_string()),
            Ok("https://example.com/".to_owned())
        );
        assert!(parse("not a url").is_err());
        assert!(parse("file:///etc/passwd").is_err());
        // Credentials in the URL are not sent: refused, saying so, rather than fetched as
        // someone else.
        for with_credentials in [
            "https://user:pass@example.com/",
            "https://user@example.com/",
        ] {
            let refused = parse(with_credentials).expect_err("refused");
            assert!(refused.contains("user name or password"), "{refused}");
            assert!(
                !refused.contains("user@") && !refused.contains("pass@"),
                "{refused}"
            );
        }
    }

    #[test]
    fn refusals_say_what_to_grant() {
        let url = Url::parse("http://127.0.0.1:9/x").expect("a URL");
        let text = refusal(&url, &Failure::NotGranted);
        assert!(
            text.contains("http://127.0.0.1:9 is not among the hosts"),
            "{text}"
        );
        let text = refusal(&url, &Failure::NotPublic);
        assert!(text.contains("allow_private"), "{text}");
    }
}
