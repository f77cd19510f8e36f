//! The behaviour hints a plugin's tool may claim. The two the sandbox policy decides
//! (`openWorldHint`, `readOnlyHint`) are kept only as far as the policy makes them true; the
//! two it cannot check (`destructiveHint`, `idempotentHint`) are the author's word, passed on
//! as such.
//!
//! | hint | passed on |
//! |---|---|
//! | `openWorldHint` | `false` whenever the tool has no HTTP grant (whatever the author said); with a grant, the author's `true`, and a claimed `false` is dropped |
//! | `readOnlyHint` | `true` only when the author says so **and** the plugin has no read-write directory and the tool no HTTP grant; a claim the grants contradict is dropped; the author's `false` is kept |
//! | `destructiveHint`, `idempotentHint` | as the author says: the host cannot check them |

use crate::ToolAnnotations;
use crate::policy::SandboxPolicy;

/// Whether `tool` may send HTTP requests under `policy`.
fn has_http(policy: &SandboxPolicy, tool: &str) -> bool {
    match policy.tool_http.get(tool) {
        Some(grants) => !grants.is_empty(),
        None => !policy.http.is_empty(),
    }
}

/// The hints the host passes on for `tool`, and a warning for each claim it dropped.
pub(crate) fn vouched(
    policy: &SandboxPolicy,
    tool: &str,
    claimed: ToolAnnotations,
) -> (ToolAnnotations, Vec<String>) {
    let http = has_http(policy, tool);
    let writable = policy.dirs.iter().find(|dir| dir.writable);
    let mut warnings = Vec::new();
    let open_world = if http {
        match claimed.open_world {
            Some(false) => {
                warnings.push(format!(
                    "tool '{tool}' claims it does not reach the outside world, but its policy \
                     grants HTTP; the claim is dropped"
                ));
                None
            }
            other => other,
        }
    } else {
        Some(false)
    };
    let read_only = match claimed.read_only {
        Some(true) if http || writable.is_some() => {
            let grant = match writable {
                Some(dir) => format!("the read-write directory {}", dir.host.display()),
                None => "HTTP".to_owned(),
            };
            warnings.push(format!(
                "tool '{tool}' claims to be read-only, but its policy grants {grant}; the \
                 claim is dropped"
            ));
            None
        }
        other => other,
    };
    (
        ToolAnnotations {
            read_only,
            destructive: claimed.destructive,
            idempotent: claimed.idempotent,
            open_world,
        },
        warnings,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DirGrant, HttpGrant};

    fn claims(read_only: Option<bool>, open_world: Option<bool>) -> ToolAnnotations {
        ToolAnnotations {
            read_only,
            destructive: Some(false),
            idempotent: Some(true),
            open_world,
        }
    }

    fn policy(http: bool, writable: Option<bool>) -> SandboxPolicy {
        let mut policy = SandboxPolicy::default();
        if http {
            policy.http.push(
                HttpGrant::parse("https://api.example.com").unwrap_or_else(|e| panic!("{e}")),
            );
        }
        if let Some(writable) = writable {
            policy.dirs.push(DirGrant {
                host: std::env::temp_dir(),
                guest: "/data".into(),
                writable,
            });
        }
        policy
    }

    /// Every combination of grants (none, read-only dir, read-write dir, HTTP, HTTP and a
    /// read-write dir) against every claim of the two hints the host can check.
    #[test]
    fn each_grant_combination_keeps_only_what_it_makes_true() {
        let claims_each = [None, Some(true), Some(false)];
        for (http, dir) in [
            (false, None),
            (false, Some(false)),
            (false, Some(true)),
            (true, None),
            (true, Some(true)),
        ] {
            let policy = policy(http, dir);
            let writable = dir == Some(true);
            for read_only in claims_each {
                for open_world in claims_each {
                    let (got, warnings) = vouched(&policy, "t", claims(read_only, open_world));
                    let case =
                        format!("http={http} dir={dir:?} ro={read_only:?} ow={open_world:?}");
                    // Never claims more than the grants allow.
                    if http {
                        assert_ne!(got.open_world, Some(false), "{case}");
                        assert_eq!(got.open_world, open_world.filter(|&v| v), "{case}");
                    } else {
                        assert_eq!(got.open_world, Some(false), "{case}");
                    }
                    let expect_ro = match read_only {
                        Some(true) if http || writable => None,
                        other => other,
                    };
                    assert_eq!(got.read_only, expect_ro, "{case}");
                    // The hints the host cannot check pass through.
                    assert_eq!(got.destructive, Some(false), "{case}");
                    assert_eq!(got.idempotent, Some(true), "{case}");
                    let dropped = usize::from(http && open_world == Some(false))
                        + usize::from(read_only == Some(true) && (http || writable));
                    assert_eq!(warnings.len(), dropped, "{case}: {warnings:?}");
                }
            }
        }
    }

    #[test]
    fn a_tool_narrowed_to_no_http_is_closed_world() {
        let mut policy = policy(true, None);
        policy.tool_http.insert("local".into(), Vec::new());
        let (got, warnings) = vouched(&policy, "local", claims(Some(true), None));
        assert_eq!(got.open_world, Some(false));
        assert_eq!(got.read_only, Some(true));
        assert!(warnings.is_empty());
        let (got, _) = vouched(&policy, "other", claims(Some(true), None));
        assert_eq!(got.read_only, None);
    }
}
