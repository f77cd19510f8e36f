//! Serving [`McpHttpService`] behind its own listener: a connection cap, header timeouts and a
//! graceful shutdown.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;

use super::{HttpOptions, McpHttpService};
use crate::mcp::{McpError, McpOptions, ToolCatalog};

/// Most connections open at once.
pub(super) const MAX_CONNECTIONS: usize = 1024;

/// The largest read buffer of a connection (its request headers must fit).
const READ_BUFFER_BYTES: usize = 64 << 10;

/// Serves `catalog` over streamable HTTP on `listener` until the listener fails: see
/// [`McpHttpService`]. [`HttpOptions::tokens`] must not be empty, unless
/// [`HttpOptions::no_auth`] is set on a loopback address. TLS is left to a reverse proxy in
/// front.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    catalog: ToolCatalog,
    options: McpOptions,
    http: HttpOptions,
) -> Result<(), McpError> {
    serve_http_with_shutdown(listener, catalog, options, http, std::future::pending()).await
}

/// Connections refused at [`MAX_CONNECTIONS`], and when that was last said.
#[derive(Default)]
struct Refused {
    unsaid: u64,
    said: Option<std::time::Instant>,
}

impl Refused {
    /// How often refusals are said.
    const EVERY: Duration = Duration::from_secs(60);

    fn one(&mut self) {
        self.unsaid += 1;
        if self.said.is_some_and(|said| said.elapsed() < Self::EVERY) {
            return;
        }
        tracing::warn!(
            "{MAX_CONNECTIONS} connections are open: refused {} more since this was last said \
             (a reverse proxy limiting connections per client keeps one client from taking them)",
            self.unsaid
        );
        self.unsaid = 0;
        self.said = Some(std::time::Instant::now());
    }
}

/// How long a shutdown waits for open connections to finish their requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// [`serve_http`] until `shutdown` completes (as axum's `with_graceful_shutdown`): then it
/// stops accepting connections, ends every session (dropping their instances) and response
/// stream, lets requests in progress finish for a few seconds, and returns.
pub async fn serve_http_with_shutdown(
    listener: tokio::net::TcpListener,
    catalog: ToolCatalog,
    options: McpOptions,
    http: HttpOptions,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), McpError> {
    let address: SocketAddr = listener.local_addr()?;
    let service = McpHttpService::build(catalog, options, http, Some(address))?;
    tracing::info!("serving MCP on http://{address}/");
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    // Connections refused at the cap: said at once, then at most once a minute with how many,
    // not a line for each (a client reconnecting in a loop would fill the log).
    let mut refused = Refused::default();
    loop {
        // A failed accept (out of file descriptors, a connection reset while queued) must not
        // end the server: wait a moment and go on.
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!("cannot accept a connection: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            refused.one();
            drop(stream);
            continue;
        };
        let service = service.clone();
        let handler = hyper::service::service_fn(move |request| {
            let service = service.clone();
            async move { Ok::<_, Infallible>(service.handle(request).await) }
        });
        // A client that never finishes its request headers is dropped after 30 s; its
        // read buffer holds at most 64 KiB (hyper's default is ~400 KiB: a thousand
        // connections sending long headers would pin 400 MiB).
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(Duration::from_secs(30))
            .max_buf_size(READ_BUFFER_BYTES)
            .serve_connection(TokioIo::new(stream), handler);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(error) = connection.await {
                tracing::debug!("HTTP connection ended: {error}");
            }
        });
    }
    drop(listener);
    // Sessions and their streams end (a stream held open would keep its connection busy).
    service.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("connections still open after {SHUTDOWN_GRACE:?}: closing them");
    }
    tracing::info!("stopped serving MCP on http://{address}/");
    Ok(())
}
