//! The web server the fetch comparisons (and the benchmark) point both fetch servers at, on
//! 127.0.0.1: a page, its robots.txt (which refuses `/private` to every agent), a long text,
//! redirects, a response over every limit and slow drips.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The article of the test site's page.
pub const PAGE: &str = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Reference page</title>\
<style>p { color: black }</style></head><body>\
<article><h1>The reference page</h1>\
<p>This page is served to both servers by the test. It has a paragraph with <strong>bold \
words</strong>, <em>emphasis</em> and <a href=\"/other\">a link to another page</a>, so \
that the conversion to Markdown has something to convert.</p>\
<h2>A section</h2><p>A second paragraph follows the heading of the section, long enough to \
be taken for the content of an article by a readability algorithm, which looks for text.</p>\
<ul><li>First item</li><li>Second item</li></ul>\
<p>The last paragraph ends the article.</p></article>\
<script>console.log('not content')</script></body></html>";

/// The robots.txt of the test site: `/private` is refused to every agent.
pub const ROBOTS: &str = "# The test site\nUser-agent: *\nDisallow: /private\n";

/// The bytes of `/big`: well over the output limit and our plugin's body cap.
pub const BIG: usize = 8 << 20;

/// A line of `/long`, repeated.
pub fn long_text() -> String {
    (0..400)
        .map(|n| format!("Line {n} of a long text, with ünïcödé to count by characters.\n"))
        .collect()
}

/// One web server on 127.0.0.1, stopped when dropped. It counts the connections it accepted
/// and keeps each request's path.
pub struct Site {
    /// The port it listens on.
    pub port: u16,
    connections: Arc<AtomicUsize>,
    paths: Arc<Mutex<Vec<String>>>,
    task: tokio::task::AbortHandle,
}

impl Site {
    /// Serves the routes below; `/away` redirects to `elsewhere`'s port.
    ///
    /// # Panics
    ///
    /// If it cannot listen, or outside a tokio runtime.
    pub async fn start(elsewhere: Option<u16>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listen on 127.0.0.1");
        let port = listener.local_addr().expect("address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (Arc::clone(&connections), Arc::clone(&paths));
        let task = tokio::spawn(async move {
            let mut running = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                count.fetch_add(1, Ordering::SeqCst);
                while running.try_join_next().is_some() {}
                running.spawn(answer(stream, port, elsewhere, Arc::clone(&seen)));
            }
        })
        .abort_handle();
        Self {
            port,
            connections,
            paths,
            task,
        }
    }

    /// The URL of `path` on it (`""`: its origin, `http://127.0.0.1:PORT`).
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The connections it accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The path of each request it received so far, in order.
    pub fn paths(&self) -> Vec<String> {
        self.paths
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request's head and answers it (HTTP/1.1, one request per connection).
async fn answer(
    mut stream: tokio::net::TcpStream,
    port: u16,
    elsewhere: Option<u16>,
    seen: Arc<Mutex<Vec<String>>>,
) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(path.clone());
    let reply = |status: &str, headers: &str, body: &[u8]| {
        let mut bytes = format!(
            "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        bytes.extend_from_slice(body);
        bytes
    };
    let html = "Content-Type: text/html; charset=utf-8\r\n";
    let plain = "Content-Type: text/plain; charset=utf-8\r\n";
    let bytes = match path.as_str() {
        "/robots.txt" => reply("200 OK", plain, ROBOTS.as_bytes()),
        "/page" | "/private/page" => reply("200 OK", html, PAGE.as_bytes()),
        "/long" => reply("200 OK", plain, long_text().as_bytes()),
        "/redirect" => reply("302 Found", "Location: /page\r\n", b""),
        "/away" => reply(
            "302 Found",
            &format!(
                "Location: http://127.0.0.1:{}/page\r\n",
                elsewhere.unwrap_or(port)
            ),
            b"",
        ),
        "/big" => {
            let head = format!(
                "HTTP/1.1 200 OK\r\n{plain}Content-Length: {BIG}\r\nConnection: close\r\n\r\n"
            );
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let chunk = vec![b'x'; 64 << 10];
            for _ in 0..BIG / chunk.len() {
                if stream.write_all(&chunk).await.is_err() {
                    return;
                }
            }
            return;
        }
        // A byte every 100 ms: forever (until the client goes), or 30 of them.
        "/drip" | "/drip30" => {
            let head = format!("HTTP/1.1 200 OK\r\n{plain}Connection: close\r\n\r\n");
            if stream.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let mut sent = 0;
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
            while path == "/drip" || sent < 30 {
                tick.tick().await;
                if stream.write_all(b"x").await.is_err() || stream.flush().await.is_err() {
                    return;
                }
                sent += 1;
            }
            return;
        }
        _ => reply("404 Not Found", plain, b"not found"),
    };
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
}
