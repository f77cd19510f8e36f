//! MCP over stdin and stdout as an rmcp [`Transport`]: one JSON-RPC message per line, each line
//! parsed once, with the answers JSON-RPC requires for lines rmcp's own line codec would skip in
//! silence: a line that is not JSON gets a parse error (-32700), a request that is not a valid
//! MCP request gets invalid request (-32600), and `tools/call` with `arguments` that are not an
//! object gets invalid params (-32602).

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage, RequestId,
    ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// Longest line read from the client.
const MAX_LINE_BYTES: u64 = 16 << 20;

/// Most memory a line may take once parsed, as [`crate::json_weight::parsed_json_bytes`]
/// estimates it before it is parsed (what `serve --http` allows a request of its default body
/// limit): 16 MiB of `[{"":0},…]` would be about 1.6 GB of JSON values.
const MAX_LINE_WEIGHT: usize = 64 << 20;

/// Most answers and notifications made and not yet written: past these, no more lines are
/// read until some are written. A client that writes requests and never reads its answers
/// (the pipe to it full) otherwise had every answer kept in memory, without bound (a page of
/// tools is kilobytes for a 50-byte request).
const MAX_PENDING_WRITES: usize = 64;

/// Most requests in progress (read, not yet answered): past these, a request is answered at
/// once with an error, and the lines go on being read (so that the client can still cancel).
/// Without a bound, requests waiting on a busy plugin each held their arguments, without end.
const MAX_REQUESTS_IN_PROGRESS: usize = 64;

/// Most memory the requests in progress may take once parsed, as their lines were weighed.
const MAX_WEIGHT_IN_PROGRESS: usize = 256 << 20;

/// How long the client may leave every answer waiting to be written (it reads nothing) before
/// the session ends: a client that writes its requests and reads only once it has written them
/// all would otherwise wait on the server, and the server on it, for ever.
const STALLED_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The requests in progress: each one's weight, by id.
#[derive(Default)]
struct InProgress {
    requests: std::collections::HashMap<RequestId, usize>,
    weight: usize,
}

impl InProgress {
    fn end(&mut self, id: &RequestId) {
        if let Some(weight) = self.requests.remove(id) {
            self.weight -= weight;
        }
    }
}

/// JSON-RPC messages as lines of a byte stream, in both directions.
pub(crate) struct LineTransport<R, W> {
    reader: BufReader<R>,
    /// Shared by the sends rmcp runs concurrently and the answers given here: one line at a
    /// time.
    writer: Arc<tokio::sync::Mutex<W>>,
    line: Vec<u8>,
    /// A place for each line made and not yet written ([`MAX_PENDING_WRITES`]).
    pending: Arc<tokio::sync::Semaphore>,
    /// The answer to a line rmcp could not take, waiting for a place to be written from.
    unanswered: Option<Value>,
    /// The requests read and not answered yet.
    in_progress: Arc<std::sync::Mutex<InProgress>>,
    /// [`STALLED_AFTER`] (shorter in tests).
    stalled_after: std::time::Duration,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub(crate) fn new(input: R, output: W) -> Self {
        Self {
            reader: BufReader::new(input),
            writer: Arc::new(tokio::sync::Mutex::new(output)),
            line: Vec::new(),
            pending: Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_WRITES)),
            unanswered: None,
            in_progress: Arc::default(),
            stalled_after: STALLED_AFTER,
        }
    }

    /// Writes one line.
    async fn write_line(writer: &tokio::sync::Mutex<W>, mut line: Vec<u8>) -> std::io::Result<()> {
        line.push(b'\n');
        let mut writer = writer.lock().await;
        writer.write_all(&line).await?;
        writer.flush().await
    }
}

/// Methods of the protocol whose requests rmcp reads into typed parameters: one that reaches
/// it as a custom request had parameters of the wrong shape.
const TYPED_METHODS: [&str; 8] = [
    "initialize",
    "ping",
    "tools/",
    "resources/",
    "prompts/",
    "completion/",
    "logging/",
    "server/",
];

/// The invalid-params answer to a request of a protocol method whose parameters rmcp could
/// not read (it then takes it for a custom request), if it is one.
fn invalid_params(message: &ClientJsonRpcMessage) -> Option<Value> {
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    let ClientRequest::CustomRequest(custom) = &request.request else {
        return None;
    };
    let method = custom.method.as_str();
    if !TYPED_METHODS
        .iter()
        .any(|known| method == *known || (known.ends_with('/') && method.starts_with(known)))
    {
        return None;
    }
    let text = if method == "tools/call" {
        "Invalid params: `arguments` of tools/call must be a JSON object".to_owned()
    } else {
        format!("Invalid params: the parameters of {method} are not of its shape")
    };
    // A long string id is not echoed.
    let id = if super::is_long_id(&request.id) {
        Value::Null
    } else {
        json!(request.id)
    };
    Some(json!({
        "jsonrpc": "2.0", "id": id,
        "error": {"code": -32602, "message": text},
    }))
}

/// Most bytes of a string id echoed in an answer to a line rmcp could not read, and of the id
/// of a request taken at all.
const MAX_ECHOED_ID_BYTES: usize = super::MAX_ID_BYTES;

/// How long closing waits for a write in progress (a client that does not read).
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The answer to a line that is not a message rmcp can take, if JSON-RPC wants one (a
/// notification gets none).
fn answer_for(line: &[u8], error: &serde_json::Error) -> Option<Value> {
    let message: Value = match serde_json::from_slice(line) {
        Ok(message) => message,
        Err(error) => {
            return Some(json!({
                "jsonrpc": "2.0", "id": null,
                "error": {"code": -32700, "message": format!("Parse error: {error}")},
            }));
        }
    };
    // The id echoed only as JSON-RPC has one (a number, or a short string): a client that
    // does not read its answers must not have megabytes of its own copied into each.
    let id = match message.get("id")? {
        Value::Number(number) => Value::Number(number.clone()),
        Value::String(text) if text.len() <= MAX_ECHOED_ID_BYTES => Value::String(text.clone()),
        _ => Value::Null,
    };
    let arguments = message
        .get("params")
        .and_then(|params| params.get("arguments"));
    let (code, text) = if message.get("method").and_then(Value::as_str) == Some("tools/call")
        && arguments.is_some_and(|arguments| !arguments.is_object() && !arguments.is_null())
    {
        (
            -32602,
            "Invalid params: `arguments` of tools/call must be a JSON object".to_owned(),
        )
    } else {
        (-32600, format!("Invalid request: {error}"))
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": text}}))
}

impl<R: AsyncRead + Unpin, W> LineTransport<R, W> {
    /// A place for a line to be written, once one is free; `None` (the session ends) when the
    /// client has read none of the lines waiting for it for [`STALLED_AFTER`] while it has
    /// more of its own to send: it writes and does not read, and so would the server.
    /// Cancel-safe.
    async fn place(&mut self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        loop {
            let pending = Arc::clone(&self.pending);
            match tokio::time::timeout(self.stalled_after, pending.acquire_owned()).await {
                Ok(place) => return place.ok(),
                Err(_) => {
                    // A client that reads nothing while it sends nothing either (it waits) is
                    // waited for.
                    let sending =
                        tokio::time::timeout(std::time::Duration::ZERO, self.reader.fill_buf())
                            .await
                            .is_ok_and(|read| read.is_ok_and(|buffered| !buffered.is_empty()));
                    if sending {
                        tracing::warn!(
                            "the client has read none of the {MAX_PENDING_WRITES} lines waiting \
                             for it for {:?} while it goes on writing; closing",
                            self.stalled_after
                        );
                        return None;
                    }
                }
            }
        }
    }
}

impl<R, W> LineTransport<R, W> {
    /// Counts `message` (of `weight` parsed) among the requests in progress, or ends one the
    /// client cancels; the answer refusing it, if it is a request over the bounds (or one
    /// whose id is in progress already: its answer would go to the other).
    fn admit(&self, message: &ClientJsonRpcMessage, weight: usize) -> Option<Value> {
        let mut in_progress = self
            .in_progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let request = match message {
            JsonRpcMessage::Request(request) => request,
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    in_progress.end(id);
                }
                return None;
            }
            _ => return None,
        };
        // A reused id is not echoed: the client would take the refusal for the answer to the
        // request of that id in progress. Nor is a long string id: every answer to it would
        // copy it (rmcp takes a string id of any length), and answers waiting for a client that
        // does not read would hold megabytes each.
        let (code, id, refusal) = if super::is_long_id(&request.id) {
            (
                -32600,
                Value::Null,
                format!("Invalid request: a string id is at most {MAX_ECHOED_ID_BYTES} bytes here"),
            )
        } else if in_progress.requests.contains_key(&request.id) {
            (
                -32600,
                Value::Null,
                "Invalid request: a request of this id is in progress".to_owned(),
            )
        } else if in_progress.requests.len() >= MAX_REQUESTS_IN_PROGRESS
            || in_progress.weight.saturating_add(weight) > MAX_WEIGHT_IN_PROGRESS
        {
            (
                -32000,
                json!(request.id),
                format!(
                    "Server busy: this connection has {} requests in progress (at most \
                     {MAX_REQUESTS_IN_PROGRESS}, or {} MiB of them); wait for their answers, \
                     or cancel some",
                    in_progress.requests.len(),
                    MAX_WEIGHT_IN_PROGRESS >> 20
                ),
            )
        } else {
            in_progress.requests.insert(request.id.clone(), weight);
            in_progress.weight += weight;
            return None;
        };
        Some(json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": code, "message": refusal},
        }))
    }
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let (writer, pending) = (Arc::clone(&self.writer), Arc::clone(&self.pending));
        let answered = match &item {
            JsonRpcMessage::Response(response) => Some(response.id.clone()),
            JsonRpcMessage::Error(error) => error.id.clone(),
            _ => None,
        };
        if let Some(id) = answered {
            self.in_progress
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .end(&id);
        }
        async move {
            // Never closed: a place always comes once a write ends.
            let _place = pending
                .acquire_owned()
                .await
                .map_err(std::io::Error::other)?;
            let line = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            Self::write_line(&writer, line).await
        }
    }

    /// Cancel-safe: rmcp drops a pending `receive` whenever it has something to send, so a
    /// line read in part stays in `self.line` for the next call, an answer waiting for a place
    /// in `self.unanswered`, and answers given here are written by a task of their own (never
    /// half a line). No line is read while [`MAX_PENDING_WRITES`] lines wait to be written.
    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if self.unanswered.is_some() {
                let place = self.place().await?;
                let answer = self.unanswered.take()?;
                let writer = Arc::clone(&self.writer);
                tokio::spawn(async move {
                    let _place = place;
                    let _ = Self::write_line(&writer, answer.to_string().into_bytes()).await;
                });
            }
            // Nothing more is read while the client does not read what it was sent.
            drop(self.place().await?);
            if !self.line.ends_with(b"\n") {
                let room = (MAX_LINE_BYTES + 1).saturating_sub(self.line.len() as u64);
                let read = (&mut self.reader)
                    .take(room)
                    .read_until(b'\n', &mut self.line)
                    .await;
                match read {
                    Err(_) => return None,
                    // The end of the input: a last line without its newline is still a line.
                    Ok(0) if self.line.is_empty() => return None,
                    Ok(0) => {}
                    Ok(_) if self.line.ends_with(b"\n") => {}
                    // At most MAX_LINE_BYTES + 1 were taken: more than the limit without a
                    // newline.
                    Ok(_) if self.line.len() as u64 > MAX_LINE_BYTES => {
                        tracing::warn!(
                            "a line of the client is over {MAX_LINE_BYTES} bytes; closing"
                        );
                        return None;
                    }
                    // The input ended without a newline: the next read says so.
                    Ok(_) => continue,
                }
            }
            let line = std::mem::take(&mut self.line);
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let weight = crate::json_weight::parsed_json_bytes(text);
            if weight > MAX_LINE_WEIGHT {
                self.unanswered = Some(json!({
                    "jsonrpc": "2.0", "id": null,
                    "error": {"code": -32600, "message": format!(
                        "Invalid request: its JSON would take about {} MiB of the server's \
                         memory once parsed, over {} MiB: it is made of very many small \
                         values; send fewer, larger ones",
                        weight >> 20,
                        MAX_LINE_WEIGHT >> 20
                    )},
                }));
                continue;
            }
            let answer = match serde_json::from_slice::<ClientJsonRpcMessage>(text) {
                Ok(message) => match invalid_params(&message) {
                    None => match self.admit(&message, weight) {
                        None => return Some(message),
                        Some(answer) => answer,
                    },
                    Some(answer) => answer,
                },
                Err(error) => match answer_for(text, &error) {
                    Some(answer) => answer,
                    None => {
                        tracing::debug!("ignored a notification rmcp cannot read: {error}");
                        continue;
                    }
                },
            };
            self.unanswered = Some(answer);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // A client that stopped reading holds a write (and the writer) for ever: the session
        // ends without flushing rather than never.
        match tokio::time::timeout(CLOSE_WAIT, self.writer.lock()).await {
            Ok(mut writer) => writer.shutdown().await,
            Err(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &[u8]) -> Option<Value> {
        match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
            Ok(message) => invalid_params(&message),
            Err(error) => answer_for(line, &error),
        }
    }

    #[tokio::test]
    async fn a_receive_dropped_half_way_through_a_line_loses_nothing() {
        use tokio::io::AsyncWriteExt as _;
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut transport = LineTransport::new(server, tokio::io::sink());
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"x","arguments":{{"pad":"{}"}}}}}}"#,
            "y".repeat(100_000)
        );
        let (first, rest) = line.as_bytes().split_at(50_000);
        client.write_all(first).await.expect("write");
        // rmcp drops a pending receive whenever it has something to send.
        let pending = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            Transport::<RoleServer>::receive(&mut transport),
        )
        .await;
        assert!(pending.is_err(), "half a line is not a message");
        client.write_all(rest).await.expect("write");
        client.write_all(b"\n").await.expect("write");
        let message = Transport::<RoleServer>::receive(&mut transport)
            .await
            .expect("the whole line, once complete");
        assert!(matches!(message, ClientJsonRpcMessage::Request(_)));
    }

    /// A client that writes requests and never reads its answers: once the answers waiting to
    /// be written fill their places, the server reads no more, so the client's writes are held
    /// back (the pipe full) instead of the server keeping every answer (a page of tools for a
    /// 50-byte request) in memory.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_does_not_read_its_answers_is_not_read_either() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::AsyncWriteExt as _;
        struct Echo;
        #[async_trait::async_trait]
        impl crate::Tool for Echo {
            async fn execute(&self, input: &str) -> Result<String, crate::ToolError> {
                Ok(input.to_owned())
            }
        }
        let group = crate::mcp::ToolGroup::new("native", 1, || {
            let definition: crate::ToolDefinition = Arc::new(|| {
                let meta = crate::ToolMeta::new("echo")
                    .description("An echo. ".repeat(400))
                    .input_schema(json!({"type": "object"}));
                (meta, Arc::new(Echo) as Arc<dyn crate::Tool>)
            });
            vec![definition]
        });
        let catalog = crate::mcp::ToolCatalog::new([group]);
        let server = crate::mcp::McpServer::new(&catalog, crate::mcp::McpOptions::new("t", "1"));
        let (client, server_end) = tokio::io::duplex(64 << 10);
        let (input, output) = tokio::io::split(server_end);
        let (_unread, mut requests) = tokio::io::split(client);
        let served = tokio::spawn(server.serve(
            LineTransport::new(input, output),
            std::future::pending::<()>(),
        ));
        requests
            .write_all(concat!(
                r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
                "\n",
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                "\n"
            ).as_bytes())
            .await
            .expect("write");
        const LINES: usize = 100_000;
        let written = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&written);
        let writing = tokio::spawn(async move {
            for id in 1..=LINES {
                let line =
                    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/list\"}}\n");
                if requests.write_all(line.as_bytes()).await.is_err() {
                    return;
                }
                counter.fetch_add(1, Ordering::Relaxed);
            }
        });
        // Until the client's writes stop moving (held back), or it wrote them all.
        let mut last = 0;
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            let now = written.load(Ordering::Relaxed);
            if now == last || writing.is_finished() {
                break;
            }
            last = now;
        }
        let now = written.load(Ordering::Relaxed);
        assert!(
            !writing.is_finished() && now < 10_000,
            "the server read {now} of {LINES} requests whose answers no one read"
        );
        writing.abort();
        served.abort();
    }

    /// A client that goes on writing and reads none of the lines waiting for it for the stall
    /// time (60 s; a second here) is disconnected: it would wait on the server, and the
    /// server on it, for ever. One that waits without writing is waited for.
    #[tokio::test]
    async fn a_client_writing_and_never_reading_is_disconnected_after_the_stall_time() {
        use tokio::io::AsyncWriteExt as _;
        let (mut client, server) = tokio::io::duplex(1 << 20);
        // An output no one reads: every write waits.
        let (_unread, output) = tokio::io::duplex(1);
        let mut transport = LineTransport::new(server, output);
        transport.stalled_after = std::time::Duration::from_secs(1);
        // Every place taken by a line waiting to be written.
        let places: Vec<_> = (0..MAX_PENDING_WRITES)
            .map(|_| {
                Arc::clone(&transport.pending)
                    .try_acquire_owned()
                    .expect("a place")
            })
            .collect();
        // Waiting without writing: still waited for after the stall time.
        let waiting = tokio::time::timeout(
            std::time::Duration::from_millis(1500),
            Transport::<RoleServer>::receive(&mut transport),
        )
        .await;
        assert!(waiting.is_err(), "a client that only waits is waited for");
        // Writing while it reads nothing: the session ends.
        client
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
            .await
            .expect("write");
        let ended = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            Transport::<RoleServer>::receive(&mut transport),
        )
        .await;
        assert!(
            matches!(ended, Ok(None)),
            "the session should end: {ended:?}"
        );
        drop(places);
    }

    /// Requests in progress are bounded (each holds its arguments while it waits, on a busy
    /// plugin for instance): past 64, a request is answered at once with an error, and the
    /// lines go on being read; an answer sent, or a request the client cancels, frees its place.
    #[tokio::test]
    async fn requests_in_progress_are_bounded_and_freed_by_answers_and_cancels() {
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (answers, output) = tokio::io::duplex(1 << 20);
        let mut answers = tokio::io::BufReader::new(answers);
        let mut transport = LineTransport::new(server, output);
        let ping = |id: usize| format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n");
        let receive = async |transport: &mut LineTransport<_, _>| {
            Transport::<RoleServer>::receive(transport)
                .await
                .expect("a message")
        };
        for id in 1..=MAX_REQUESTS_IN_PROGRESS {
            client.write_all(ping(id).as_bytes()).await.expect("write");
            assert!(matches!(
                receive(&mut transport).await,
                JsonRpcMessage::Request(_)
            ));
        }
        // One more is refused (answered here), and the next line is still read.
        let cancel =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#;
        client
            .write_all(format!("{}{cancel}\n{}", ping(1000), ping(1001)).as_bytes())
            .await
            .expect("write");
        assert!(matches!(
            receive(&mut transport).await,
            JsonRpcMessage::Notification(_)
        ));
        let mut refused = String::new();
        answers.read_line(&mut refused).await.expect("the refusal");
        assert!(
            refused.contains("\"id\":1000") && refused.contains("requests in progress"),
            "{refused}"
        );
        // The cancel freed a place.
        assert!(matches!(
            receive(&mut transport).await,
            JsonRpcMessage::Request(_)
        ));
        // An answer frees one too.
        let answer: ServerJsonRpcMessage = serde_json::from_value(json!({
            "jsonrpc": "2.0", "id": 2, "result": {}
        }))
        .expect("an answer");
        Transport::<RoleServer>::send(&mut transport, answer)
            .await
            .expect("sent");
        client
            .write_all(ping(1002).as_bytes())
            .await
            .expect("write");
        assert!(matches!(
            receive(&mut transport).await,
            JsonRpcMessage::Request(_)
        ));
        // An id in progress is refused.
        client.write_all(ping(3).as_bytes()).await.expect("write");
        client
            .write_all(ping(1003).as_bytes())
            .await
            .expect("write");
        // A notification after them: once it is received, both were answered.
        client
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .await
            .expect("write");
        assert!(matches!(
            receive(&mut transport).await,
            JsonRpcMessage::Notification(_)
        ));
        let mut lines = String::new();
        while !lines.contains("in progress\"") {
            answers.read_line(&mut lines).await.expect("an answer");
        }
        assert!(
            lines.contains("a request of this id is in progress"),
            "{lines}"
        );
    }

    /// The attack: requests whose string ids are megabytes long, each answer copying its id,
    /// answers a client that does not read holding them all. Such a request is refused, its
    /// id not echoed; a short one is taken.
    #[tokio::test]
    async fn a_request_of_a_long_string_id_is_refused_unechoed() {
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (answers, output) = tokio::io::duplex(1 << 20);
        let mut answers = tokio::io::BufReader::new(answers);
        let mut transport = LineTransport::new(server, output);
        let long = "A".repeat(100_000);
        let lines = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"{long}\",\"method\":\"ping\"}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":\"{long}\",\"method\":\"tools/call\",\
             \"params\":{{\"name\":\"x\",\"arguments\":[1]}}}}\n\
             {{\"jsonrpc\":\"2.0\",\"id\":\"short\",\"method\":\"ping\"}}\n"
        );
        client.write_all(lines.as_bytes()).await.expect("write");
        let taken = Transport::<RoleServer>::receive(&mut transport)
            .await
            .expect("a message");
        assert!(
            matches!(&taken, JsonRpcMessage::Request(request)
                if request.id == rmcp::model::NumberOrString::String("short".into())),
            "{taken:?}"
        );
        for _ in 0..2 {
            let mut refused = String::new();
            answers.read_line(&mut refused).await.expect("a refusal");
            assert!(
                refused.len() < 300,
                "the id was echoed: {} bytes",
                refused.len()
            );
            let refused: Value = serde_json::from_str(&refused).expect("JSON");
            assert_eq!(refused["id"], Value::Null, "{refused}");
            assert!(refused["error"]["code"].is_i64(), "{refused}");
        }
    }

    /// A line whose JSON would take far more memory parsed than its text (many tiny values) is
    /// refused before it is parsed.
    #[tokio::test]
    async fn a_line_too_heavy_to_parse_is_refused_unparsed() {
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let (answers, output) = tokio::io::duplex(1 << 20);
        let mut transport = LineTransport::new(server, output);
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"x","arguments":{{"a":[{}]}}}}}}"#,
            vec![r#"{"":0}"#; 1 << 20].join(",")
        );
        let writing = tokio::spawn(async move {
            client.write_all(line.as_bytes()).await.expect("write");
            client
                .write_all(b"\n{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}\n")
                .await
                .expect("write");
            client
        });
        let next = Transport::<RoleServer>::receive(&mut transport)
            .await
            .expect("the next line");
        assert!(
            matches!(&next, ClientJsonRpcMessage::Request(request) if request.id == rmcp::model::NumberOrString::Number(6)),
            "{next:?}"
        );
        let mut answer = String::new();
        tokio::io::BufReader::new(answers)
            .read_line(&mut answer)
            .await
            .expect("the answer");
        assert!(
            answer.contains("-32600") && answer.contains("once parsed"),
            "{answer}"
        );
        drop(writing.await);
    }

    #[test]
    fn lines_rmcp_cannot_take_get_answers() {
        assert!(answer(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_none());
        let parse = answer(b"{not json").expect("parse error");
        assert_eq!(parse["error"]["code"], -32700);
        assert_eq!(parse["id"], Value::Null);
        let params = answer(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":[1]}}"#,
        )
        .expect("invalid params");
        assert_eq!(params["error"]["code"], -32602);
        assert_eq!(params["id"], 7);
        assert!(
            answer(
                br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"x","arguments":{}}}"#
            )
            .is_none()
        );
        let invalid = answer(br#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":7}"#)
            .expect("invalid");
        assert!(invalid["error"]["code"] == -32602 || invalid["error"]["code"] == -32600);
        assert_eq!(invalid["id"], 9);
        let request = answer(br#"{"jsonrpc":"2.0","id":10,"params":{}}"#).expect("no method");
        assert_eq!(request["error"]["code"], -32600);
        // A custom method is the handler's to answer.
        assert!(answer(br#"{"jsonrpc":"2.0","id":11,"method":"x/y","params":{"a":1}}"#).is_none());
        // A notification gets no answer, whatever is wrong with it.
        assert!(answer(br#"{"jsonrpc":"2.0","method":"tools/call","params":7}"#).is_none());
        // An id that is no JSON-RPC id, or a string of a megabyte, is not echoed.
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":"{}","params":{{}}}}"#,
            "x".repeat(1 << 20)
        );
        for line in [
            long.as_bytes(),
            br#"{"jsonrpc":"2.0","id":{"a":[1,2]},"params":{}}"#,
        ] {
            let request = answer(line).expect("no method");
            assert_eq!(request["id"], Value::Null);
        }
    }
}
