//! The host's imports a running plugin calls: logs (its own and the `log` crate's), progress
//! and the notices that its resources or lists changed.

/// Sends a log message to the host.
pub(crate) fn host_log(level: crate::log::Level, message: &str) {
    use super::bindings::llm_worker::tool::host::{Level, log};
    let level = match level {
        crate::log::Level::Trace => Level::Trace,
        crate::log::Level::Debug => Level::Debug,
        crate::log::Level::Info => Level::Info,
        crate::log::Level::Warn => Level::Warn,
        crate::log::Level::Error => Level::Error,
    };
    log(level, message);
}

/// The `log` crate's logger in a plugin: its records (a plugin's dependencies log through
/// it) go to the host like the SDK's own `log::info!`.
struct HostLogger;

impl ::log::Log for HostLogger {
    fn enabled(&self, _: &::log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &::log::Record<'_>) {
        use crate::log::Level;
        let level = match record.level() {
            ::log::Level::Error => Level::Error,
            ::log::Level::Warn => Level::Warn,
            ::log::Level::Info => Level::Info,
            ::log::Level::Debug => Level::Debug,
            ::log::Level::Trace => Level::Trace,
        };
        match record.args().as_str() {
            Some(text) => crate::report::log(level, text),
            None => crate::report::log(level, &record.args().to_string()),
        }
    }

    fn flush(&self) {}
}

/// Makes [`HostLogger`] the `log` crate's logger, at every level (the host filters). Called by
/// [`export_plugin!`]'s glue before the plugin's value is created; once installed, later calls
/// do nothing, and a logger the plugin installed itself is kept.
pub fn install_logger() {
    static LOGGER: HostLogger = HostLogger;
    if ::log::set_logger(&LOGGER).is_ok() {
        ::log::set_max_level(::log::LevelFilter::Trace);
    }
}

/// Sends a progress report to the host.
pub(crate) fn host_progress(done: f64, total: Option<f64>, message: Option<&str>) {
    super::bindings::llm_worker::tool::host::progress(done, total, message);
}

/// Tells the host that the resource `uri` changed.
pub(crate) fn host_resource_updated(uri: &str) {
    super::bindings::llm_worker::tool::host::resource_updated(uri);
}

/// Tells the host that the plugin's list of resources or prompts changed.
pub(crate) fn host_list_changed(which: crate::report::Listing) {
    use super::bindings::llm_worker::tool::host::{Listing, list_changed};
    list_changed(match which {
        crate::report::Listing::Resources => Listing::Resources,
        crate::report::Listing::Prompts => Listing::Prompts,
    });
}
