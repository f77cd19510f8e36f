//! An HTTP server for the tests to point plugins at: on 127.0.0.1 (or an address given), on
//! the test's own tokio runtime, stopped when dropped (and with the runtime, at the end of the
//! test). It counts the connections it accepts and keeps the head of every request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::io::AsyncReadExt;

/// What the server does with each connection.
#[derive(Clone)]
enum Behaviour {
    /// Answers every request with 200 and this body.
    Answer(&'static str),
    /// Answers every request with 200 and this body once `delay` has passed since it came and
    /// the gate is open.
    Later {
        body: &'static str,
        delay: std::time::Duration,
        gate: tokio::sync::watch::Receiver<bool>,
    },
    /// Reads what the client sends until it closes the connection, and never answers.
    Silent,
    /// Answers every request with 200, an empty body and `count` headers of `size` bytes.
    Headers { count: usize, size: usize },
    /// Answers the first request with 200 and a `Content-Length` of twice this body's length,
    /// sends the body, and closes the connection: a body that breaks off.
    Truncated(&'static str),
}

/// The head of a request the server received.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    /// Its method.
    pub method: http::Method,
    /// Its target.
    pub uri: http::Uri,
    /// Its headers.
    pub headers: http::HeaderMap,
}

#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    closed: AtomicUsize,
    requests: Mutex<Vec<SeenRequest>>,
    /// Told of each request received.
    arrivals: tokio::sync::Notify,
}

/// A running test server; see the module's documentation.
pub struct TestServer {
    address: SocketAddr,
    seen: Arc<Seen>,
    task: tokio::task::AbortHandle,
}

impl TestServer {
    /// A server on 127.0.0.1 that answers every request with 200, an empty body and `count`
    /// headers (`x-pad-0` …) of `size` bytes each.
    ///
    /// # Panics
    ///
    /// If it cannot listen, or outside a tokio runtime.
    pub fn answering_with_headers(count: usize, size: usize) -> Self {
        Self::start("127.0.0.1:0", Behaviour::Headers { count, size })
            .unwrap_or_else(|e| panic!("listen: {e}"))
    }

    /// A server on 127.0.0.1 that answers every request with 200 and `body`.
    ///
    /// # Panics
    ///
    /// If it cannot listen, or outside a tokio runtime.
    pub fn answering(body: &'static str) -> Self {
        Self::answering_on("127.0.0.1:0", body).unwrap_or_else(|e| panic!("listen: {e}"))
    }

    /// Like [`answering`](Self::answering), on `address` (`"[::1]:0"`, say); an error if it
    /// cannot listen there.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn answering_on(address: &str, body: &'static str) -> std::io::Result<Self> {
        Self::start(address, Behaviour::Answer(body))
    }

    /// A server on 127.0.0.1 whose answers break off: 200, a `Content-Length` of twice
    /// `body`'s length, `body`, and the connection closed.
    ///
    /// # Panics
    ///
    /// If it cannot listen, or outside a tokio runtime.
    pub fn truncated(body: &'static str) -> Self {
        Self::start("127.0.0.1:0", Behaviour::Truncated(body))
            .unwrap_or_else(|e| panic!("listen: {e}"))
    }

    /// A server on 127.0.0.1 that accepts connections, reads what comes and never answers;
    /// it counts the connections their client closed ([`closed`](Self::closed)).
    ///
    /// # Panics
    ///
    /// If it cannot listen, or outside a tokio runtime.
    pub fn silent() -> Self {
        Self::start("127.0.0.1:0", Behaviour::Silent).unwrap_or_else(|e| panic!("listen: {e}"))
    }

    /// A server on 127.0.0.1 that answers every request with 200 and `body`, `delay` after the
    /// request came.
    ///
    /// # Panics
    ///
    /// If it cannot listen, or outside a tokio runtime.
    pub fn delayed(body: &'static str, delay: std::time::Duration) -> Self {
        let (_open, gate) = tokio::sync::watch::channel(true);
        Self::start("127.0.0.1:0", Behaviour::Later { body, delay, gate })
            .unwrap_or_else(|e| panic!("listen: {e}"))
    }

    /// A server on 127.0.0.1 that holds every request until the test opens the [`Gate`], then
    /// answers it with 200 and `body`.
    ///
    /// # Panics
    ///
    /// If it cannot listen, or outside a tokio runtime.
    pub fn held(body: &'static str) -> (Self, Gate) {
        let (open, gate) = tokio::sync::watch::channel(false);
        let delay = std::time::Duration::ZERO;
        let server = Self::start("127.0.0.1:0", Behaviour::Later { body, delay, gate })
            .unwrap_or_else(|e| panic!("listen: {e}"));
        (server, Gate(open))
    }

    fn start(address: &str, behaviour: Behaviour) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(address)?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let address = listener.local_addr()?;
        let seen = Arc::new(Seen::default());
        let task = tokio::spawn(serve(listener, behaviour, Arc::clone(&seen))).abort_handle();
        Ok(Self {
            address,
            seen,
            task,
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// The connections it accepted so far.
    pub fn connections(&self) -> usize {
        self.seen.connections.load(Ordering::SeqCst)
    }

    /// The connections their client closed so far (a silent server's; an answering server
    /// does not count them).
    pub fn closed(&self) -> usize {
        self.seen.closed.load(Ordering::SeqCst)
    }

    /// The requests it received so far, in order.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until it has received a request (at once if it has one already).
    pub async fn arrived(&self) {
        loop {
            let arrival = self.seen.arrivals.notified();
            let mut arrival = std::pin::pin!(arrival);
            arrival.as_mut().enable();
            if !self.requests().is_empty() {
                return;
            }
            arrival.await;
        }
    }

    /// The value of the header `name` in each request received, in order (`None` where a
    /// request had none).
    pub fn header(&self, name: &str) -> Vec<Option<String>> {
        self.requests()
            .iter()
            .map(|request| {
                request
                    .headers
                    .get(name)
                    .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
            })
            .collect()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // The listener and every connection go with the task.
        self.task.abort();
    }
}

/// Accepts connections until the server is dropped; each connection's task is held here, so
/// that it ends with the server.
async fn serve(listener: tokio::net::TcpListener, behaviour: Behaviour, seen: Arc<Seen>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        seen.connections.fetch_add(1, Ordering::SeqCst);
        while connections.try_join_next().is_some() {}
        connections.spawn(connection(stream, behaviour.clone(), Arc::clone(&seen)));
    }
}

async fn connection(mut stream: tokio::net::TcpStream, behaviour: Behaviour, seen: Arc<Seen>) {
    match behaviour {
        Behaviour::Answer(_) | Behaviour::Later { .. } | Behaviour::Headers { .. } => {
            let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
                let (head, body) = request.into_parts();
                seen.requests
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(SeenRequest {
                        method: head.method,
                        uri: head.uri,
                        headers: head.headers,
                    });
                seen.arrivals.notify_waiters();
                let behaviour = behaviour.clone();
                async move {
                    // The request's body is read to its end before the answer: a server that
                    // answers and closes with some of it unread resets the connection, and the
                    // client may lose the answer (a body's last chunk often comes after its head,
                    // in a write of its own).
                    let _ = http_body_util::BodyExt::collect(body).await;
                    let mut padded = Vec::new();
                    let body = match behaviour {
                        Behaviour::Later {
                            body,
                            delay,
                            mut gate,
                        } => {
                            tokio::time::sleep(delay).await;
                            let _ = gate.wait_for(|open| *open).await;
                            body
                        }
                        Behaviour::Answer(body) => body,
                        Behaviour::Headers { count, size } => {
                            padded = (0..count)
                                .map(|i| (format!("x-pad-{i}"), "a".repeat(size)))
                                .collect();
                            ""
                        }
                        Behaviour::Silent | Behaviour::Truncated(_) => "",
                    };
                    let mut response =
                        http::Response::new(Full::new(Bytes::from_static(body.as_bytes())));
                    for (name, value) in padded {
                        if let (Ok(name), Ok(value)) = (
                            http::HeaderName::try_from(name),
                            http::HeaderValue::try_from(value),
                        ) {
                            response.headers_mut().insert(name, value);
                        }
                    }
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        }
        Behaviour::Truncated(body) => {
            use tokio::io::AsyncWriteExt;
            // The request's head, then the answer, cut short.
            let mut head = Vec::new();
            let mut buffer = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(read) => head.extend_from_slice(&buffer[..read]),
                }
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len() * 2
            );
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
        Behaviour::Silent => {
            let mut buffer = [0u8; 4096];
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) => {
                        seen.closed.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
    }
}

/// Opens a [`TestServer::held`] server: the requests it holds, and those to come, are answered.
pub struct Gate(tokio::sync::watch::Sender<bool>);

impl Gate {
    /// Lets the requests through.
    pub fn open(&self) {
        self.0.send_replace(true);
    }
}
