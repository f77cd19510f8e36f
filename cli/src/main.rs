//! The `llm-worker` command: run, review and serve the tool plugins of a directory; write,
//! approve and share them.
// The server's futures (wasmtime's concurrent calls inside rmcp's handlers) nest deeper
// than the default limit of 128 lets the compiler lay them out.
#![recursion_limit = "256"]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use llm_worker_rules::tool::Visible;

mod new;
mod serve;
mod traces;

/// Appends a line to the command's output (written to stdout once, at the end).
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

mod args;
mod call;
mod check;
mod list;
mod load;
mod lock;
mod registry;
mod schema;

use args::{Cli, Command};
use call::call;
use check::check;
use list::list;
use load::loader;
use lock::lock;
use schema::schema;

fn init_logging(cli: &Cli) {
    // `call` prints a failure as its error: a warning logging the same would say it twice.
    let quiet = cli.quiet || (cli.verbose == 0 && matches!(cli.command, Command::Call { .. }));
    let level = match (quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    // wasmtime-wasi-http warns of every failed request itself (a reset, a TLS failure) without
    // naming the plugin, as often as a plugin makes its granted server fail: at the default
    // level, only its errors (the gate logs what it denies, a few times a call); `-v` shows all.
    // rmcp logs every request and answer whole at `debug` (a tool's arguments, what a user typed
    // into a form, request states, results): only with `-vv`, never with `-v` alone.
    let default = match cli.verbose {
        0 => format!("{level},wasmtime_wasi_http=error"),
        1 => format!("{level},rmcp=info"),
        _ => level.to_owned(),
    };
    let mut invalid = None;
    let filter = match std::env::var("RUST_LOG") {
        Ok(value) if !value.trim().is_empty() => tracing_subscriber::EnvFilter::try_new(&value)
            .unwrap_or_else(|error| {
                invalid = Some((value, error));
                tracing_subscriber::EnvFilter::new(&default)
            }),
        _ => tracing_subscriber::EnvFilter::new(&default),
    };
    // Colours only for a person at a terminal: MCP clients and log files capture stderr.
    use std::io::IsTerminal;
    // Every field as `LogText` shows it: a plugin's text (a name, a pattern, a message quoted
    // in a warning) cannot clear the screen, reorder text or forge a log line of its own.
    use tracing_subscriber::field::MakeExt;
    let fields = tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let text = log_field(value);
        if field.name() == "message" {
            write!(writer, "{}", LogText(&text))
        } else {
            write!(writer, "{}={}", field.name(), LogText(&text))
        }
    })
    .delimited(" ");
    tracing_subscriber::fmt()
        .fmt_fields(fields)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
    if let Some((value, error)) = invalid {
        tracing::error!("RUST_LOG={value:?} is not a valid filter ({error}); logging at {level}");
    }
}

/// Longest log field, in bytes: a field holding a client's text (rmcp logs every failed
/// request's id and error at `warn`, and an error may quote what the client sent) is cut
/// there, so that no request makes the log take megabytes.
const MAX_LOG_FIELD_BYTES: usize = 4096;

/// `value` as a log field: its `Debug` text, cut after [`MAX_LOG_FIELD_BYTES`] (formatting
/// stops there: the rest is never made).
fn log_field(value: &dyn std::fmt::Debug) -> String {
    /// Takes text until the cap, then refuses more (which ends the formatting).
    struct Capped {
        text: String,
        cut: bool,
    }
    impl std::fmt::Write for Capped {
        fn write_str(&mut self, more: &str) -> std::fmt::Result {
            if self.cut {
                return Err(std::fmt::Error);
            }
            let room = MAX_LOG_FIELD_BYTES.saturating_sub(self.text.len());
            if more.len() <= room {
                self.text.push_str(more);
                return Ok(());
            }
            let mut end = room;
            while !more.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&more[..end]);
            self.cut = true;
            Err(std::fmt::Error)
        }
    }
    let mut capped = Capped {
        text: String::new(),
        cut: false,
    };
    let _ = std::fmt::write(&mut capped, format_args!("{value:?}"));
    if capped.cut {
        capped.text.push_str(" … [cut: longer than 4096 bytes]");
    }
    capped.text
}

/// A log field as the log shows it: the characters of `is_hidden_char` escaped ([`Visible`]),
/// and each line after the first indented, so that no line of it reads as a log line.
struct LogText<'a>(&'a str);

impl std::fmt::Display for LogText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, line) in self.0.split('\n').enumerate() {
            if index > 0 {
                f.write_str("\n    ")?;
            }
            write!(f, "{}", Visible(line))?;
        }
        Ok(())
    }
}

/// Prints `message` as the command's error; the exit code.
fn exit_with(message: String) -> u8 {
    eprintln!("error: {}", Visible(&message));
    1
}

/// An error's message followed by its causes, `"outer: cause: root"`. A library error often
/// says its cause in its own message already (`cannot read plugin x.wasm: permission
/// denied`); a cause whose text the message so far ends with is not repeated.
fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let line = cause.to_string();
        if text.is_empty() {
            text = line;
        } else if !line.is_empty() && !text.ends_with(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
    }
    // Plugins write parts of it (their messages, their stderr): shown, never acted on.
    Visible(&text).to_string()
}

/// Raises the soft limit of open files to the hard limit, where the system allows: the host
/// lets its plugins hold half of the soft limit (`PluginHostBuilder::max_open_files`), and the
/// usual soft default (1,024) would leave them little. A library leaves this to its program.
#[cfg(unix)]
fn raise_open_file_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return;
    }
    let raised = Rlimit {
        current: limit.maximum,
        ..limit
    };
    if let Err(error) = setrlimit(Resource::Nofile, raised) {
        tracing::debug!(
            "cannot raise the open-file limit from {:?} to {:?}: {error}",
            limit.current,
            limit.maximum
        );
    }
}

#[cfg(not(unix))]
fn raise_open_file_limit() {}

fn main() -> ExitCode {
    // The server's request futures nest deep (rmcp's dispatch, the call pipeline, a plugin's
    // event loop): unoptimised builds need more than Tokio's default 2 MiB of stack per worker.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(8 << 20)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(error) => {
            eprintln!("llm-worker: cannot start the Tokio runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    raise_open_file_limit();
    let mut out = String::new();
    if let Command::New { name, sdk } = &cli.command {
        let created = new::Sdk::find(sdk.as_deref(), new::built_from())
            .and_then(|sdk| new::scaffold(Path::new("."), name, sdk));
        return match created {
            Ok(created) => {
                let steps: String = new::next_steps(name)
                    .lines()
                    .map(|line| format!("  {line}\n"))
                    .collect();
                print!(
                    "created {}, a plugin crate on the SDK in {}\n\
                     Its rust-toolchain.toml names Rust {} and the wasm32-wasip2 target: rustup \
                     installs them on first use (or run `rustup toolchain install` in it). \
                     Next:\n  cd {name}\n{steps}",
                    created.dir.display(),
                    created.sdk.dir.display(),
                    created.channel,
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {}", error_text(&error));
                ExitCode::FAILURE
            }
        };
    }
    if let Command::GenerateKeyPair { output_key_prefix } = &cli.command {
        return match registry::generate_key_pair(output_key_prefix) {
            Ok(said) => {
                print!("{said}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {}", error_text(&error));
                ExitCode::FAILURE
            }
        };
    }
    let loader = match &cli.command {
        Command::List { host, .. }
        | Command::Call { host, .. }
        | Command::Check { host, .. }
        | Command::Schema { host, .. } => loader(host),
        Command::Serve {
            host,
            token_file,
            oauth_introspection_secret_file,
            request_state_key_file,
            audit_log,
            ..
        } => {
            // What serve reads or writes that no plugin may (the audit log's `-` is stderr).
            let secrets: Vec<PathBuf> = [
                token_file,
                oauth_introspection_secret_file,
                request_state_key_file,
            ]
            .into_iter()
            .flatten()
            .chain(audit_log.iter().filter(|path| path.as_os_str() != "-"))
            .cloned()
            .collect();
            load::serving_loader(host, &secrets)
        }
        Command::Lock {
            plugins, dir_args, ..
        } => load::loader_with(plugins, dir_args, None, false, &[]),
        Command::Pull { plugins, .. } | Command::Push { plugins, .. } => {
            load::loader_with(plugins, &args::DirArgs::default(), None, false, &[])
        }
        Command::New { .. } | Command::GenerateKeyPair { .. } => {
            Err(anyhow::anyhow!("nothing to load"))
        }
    };
    if let Command::Push {
        file,
        reference,
        sign,
        plain_http,
        timeout_secs,
        ..
    } = &cli.command
    {
        let result = async {
            registry::push_file(
                &mut out,
                &loader?.host,
                file,
                reference,
                sign.as_deref(),
                *plain_http,
                *timeout_secs,
            )
            .await
        }
        .await;
        print!("{out}");
        return result.unwrap_or_else(|error| {
            eprintln!("error: {}", error_text(&error));
            ExitCode::FAILURE
        });
    }
    let result = match loader {
        Err(error) => Err(error),
        Ok(loader) => match &cli.command {
            Command::List { dir, json, .. } => list(&mut out, &loader, dir, *json),
            Command::Call {
                dir, tool, json, ..
            } => call(&mut out, &loader, dir, tool, json.clone()).await,
            Command::Check { dir, .. } => check(&mut out, &loader, dir),
            Command::Lock {
                dir,
                check,
                replace_unreadable,
                ..
            } => lock(&mut out, &loader, dir, *check, *replace_unreadable),
            Command::Pull {
                reference,
                dir,
                name,
                update,
                approve_names,
                allow_unsigned,
                plain_http,
                timeout_secs,
                ..
            } => {
                let args = registry::PullArgs {
                    reference,
                    dir,
                    name: name.clone(),
                    update: *update,
                    approve_names: *approve_names,
                    allow_unsigned: *allow_unsigned,
                    plain_http: *plain_http,
                    timeout_secs: *timeout_secs,
                };
                registry::pull(&mut out, &loader, args).await
            }
            Command::Schema {
                dir,
                format,
                strict,
                ..
            } => schema(&mut out, &loader, dir, *format, *strict),
            Command::Serve {
                dir,
                watch,
                http,
                token_file,
                no_auth,
                oauth_issuer,
                oauth_resource,
                oauth_scope,
                oauth_untyped_tokens,
                oauth_client_identities,
                oauth_introspection,
                oauth_introspection_client,
                oauth_introspection_secret_file,
                max_sessions,
                idle_timeout,
                max_body_kib,
                request_memory_mib,
                allowed_host,
                allowed_origin,
                session_prefix,
                task_ttl,
                request_state_key_file,
                audit_log,
                audit_inputs,
                metrics,
                otlp_endpoint,
                host: serve_host,
            } => {
                let timeout_ms = serve_host.plugins.timeout_ms;
                if http.is_some() && idle_timeout.saturating_mul(1000) < timeout_ms {
                    return ExitCode::from(exit_with(format!(
                        "--idle-timeout {idle_timeout} s is shorter than --timeout-ms {timeout_ms} ms: a \
                         session would expire during a long call; raise --idle-timeout"
                    )));
                }
                if request_memory_mib.saturating_mul(1024) < max_body_kib.saturating_mul(4) {
                    return ExitCode::from(exit_with(format!(
                        "--request-memory-mib {request_memory_mib} is less than four times \
                         --max-body-kib {max_body_kib}: a few requests of the largest size \
                         could not be in progress at once; raise --request-memory-mib"
                    )));
                }
                let options = serve::ServeOptions {
                    watch: *watch,
                    http: http.clone(),
                    token_file: token_file.clone(),
                    no_auth: *no_auth,
                    oauth: oauth_resource.as_ref().map(|resource| serve::OAuthArgs {
                        issuers: oauth_issuer.clone(),
                        resource: resource.clone(),
                        scopes: oauth_scope.clone(),
                        untyped_tokens: *oauth_untyped_tokens,
                        client_identities: *oauth_client_identities,
                        introspection: oauth_introspection.clone().map(|endpoint| {
                            (
                                endpoint,
                                oauth_introspection_client.clone().unwrap_or_default(),
                                oauth_introspection_secret_file.clone().unwrap_or_default(),
                            )
                        }),
                    }),
                    max_sessions: usize::try_from(*max_sessions).unwrap_or(usize::MAX),
                    idle_timeout: Duration::from_secs(*idle_timeout),
                    max_body_bytes: usize::try_from(max_body_kib * 1024).unwrap_or(usize::MAX),
                    max_request_memory: usize::try_from(request_memory_mib << 20)
                        .unwrap_or(usize::MAX),
                    allowed_hosts: allowed_host.clone(),
                    allowed_origins: allowed_origin.clone(),
                    session_prefix: session_prefix.clone(),
                    task_ttl: Duration::from_secs(*task_ttl),
                    request_state_key_file: request_state_key_file.clone(),
                    audit_log: audit_log.clone(),
                    audit_inputs: *audit_inputs,
                    metrics: metrics.clone(),
                    otlp_endpoint: otlp_endpoint.clone(),
                };
                serve::serve(loader, dir.clone(), options)
                    .await
                    .map(|()| ExitCode::SUCCESS)
            }
            Command::New { .. } | Command::Push { .. } | Command::GenerateKeyPair { .. } => {
                Ok(ExitCode::SUCCESS)
            }
        },
    };
    // At a terminal, what plugins wrote (descriptions, results) is shown, never acted on; a
    // pipe gets it as it is.
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        out = Visible(&out).to_string();
    }
    // A reader that stops early (`| head`) is not an error.
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        && error.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("error: cannot write to stdout: {error}");
        return ExitCode::FAILURE;
    }
    result.unwrap_or_else(|error| {
        eprintln!("error: {}", error_text(&error));
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field is cut at the cap, at a character's boundary, and says so; a short one is
    /// whole.
    #[test]
    fn a_log_field_is_cut_at_its_cap() {
        assert_eq!(log_field(&"short"), "\"short\"");
        let long = "é".repeat(10_000);
        let field = log_field(&long);
        assert!(
            field.len() <= MAX_LOG_FIELD_BYTES + 40
                && field.ends_with("[cut: longer than 4096 bytes]"),
            "{}",
            field.len()
        );
    }
}
