//! MCP over stdin and stdout, with the answers JSON-RPC requires for lines rmcp would skip in
//! silence: a line that is not JSON gets a parse error (-32700), and `tools/call` with
//! `arguments` that are not an object gets invalid params (-32602).

use rmcp::ServiceExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::McpError;
use super::session::McpSession;

/// Longest line read from the client.
const MAX_LINE_BYTES: u64 = 16 << 20;

/// What to do with a line from the client: pass it on, or answer it here.
fn check_line(line: &[u8]) -> Result<(), Value> {
    let message: Value = match serde_json::from_slice(line) {
        Ok(message) => message,
        Err(error) => {
            return Err(json!({
                "jsonrpc": "2.0", "id": null,
                "error": {"code": -32700, "message": format!("Parse error: {error}")},
            }));
        }
    };
    let arguments = message
        .get("params")
        .and_then(|params| params.get("arguments"));
    if message.get("method").and_then(Value::as_str) == Some("tools/call")
        && arguments.is_some_and(|arguments| !arguments.is_object() && !arguments.is_null())
    {
        return Err(json!({
            "jsonrpc": "2.0", "id": message.get("id").cloned().unwrap_or(Value::Null),
            "error": {
                "code": -32602,
                "message": "Invalid params: `arguments` of tools/call must be a JSON object",
            },
        }));
    }
    Ok(())
}

/// Serves `session` over `input` and `output` (stdin and stdout, or any pair of streams).
pub(crate) async fn serve_lines(
    session: McpSession,
    input: impl AsyncRead + Unpin + Send + 'static,
    mut output: impl AsyncWrite + Unpin + Send + 'static,
) -> Result<(), McpError> {
    // rmcp talks to one end of two pipes; this module stands between them and the client.
    let (rmcp_in, mut to_rmcp) = tokio::io::duplex(64 << 10);
    let (from_rmcp, rmcp_out) = tokio::io::duplex(64 << 10);
    let (lines, mut outgoing) = mpsc::channel::<Vec<u8>>(64);

    // One writer, so that lines from rmcp and answers from here never interleave.
    let writer = tokio::spawn(async move {
        while let Some(mut line) = outgoing.recv().await {
            line.push(b'\n');
            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                return;
            }
        }
    });
    let from_server = lines.clone();
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(from_rmcp);
        let mut line = Vec::new();
        while reader
            .read_until(b'\n', &mut line)
            .await
            .is_ok_and(|read| read > 0)
        {
            let text = line.strip_suffix(b"\n").unwrap_or(&line).to_vec();
            if from_server.send(text).await.is_err() {
                return;
            }
            line.clear();
        }
    });
    let from_client = lines;
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(input);
        loop {
            let mut line = Vec::new();
            let read = (&mut reader)
                .take(MAX_LINE_BYTES + 1)
                .read_until(b'\n', &mut line)
                .await;
            if !read.is_ok_and(|read| read > 0) {
                break;
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            // At most MAX_LINE_BYTES + 1 were read: more than the limit without its newline.
            if text.len() as u64 > MAX_LINE_BYTES {
                tracing::warn!("a line of the client is over {MAX_LINE_BYTES} bytes; closing");
                break;
            }
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match check_line(text) {
                Ok(()) => {
                    if to_rmcp.write_all(&line).await.is_err() {
                        break;
                    }
                    if !line.ends_with(b"\n") && to_rmcp.write_all(b"\n").await.is_err() {
                        break;
                    }
                }
                Err(answer) => {
                    if from_client
                        .send(answer.to_string().into_bytes())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        // The client is gone: rmcp sees the end of its input and ends the session.
        let _ = to_rmcp.shutdown().await;
    });

    let (rmcp_read, _) = tokio::io::split(rmcp_in);
    let (_, rmcp_write) = tokio::io::split(rmcp_out);
    let running = session
        .serve((rmcp_read, rmcp_write))
        .await
        .map_err(|e| McpError::Session(e.to_string()))?;
    let result = running
        .waiting()
        .await
        .map_err(|e| McpError::Session(e.to_string()));
    // The last answers are on their way to the writer; give them a moment to be written.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), writer).await;
    result.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_rmcp_would_skip_get_answers() {
        assert!(check_line(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_ok());
        let answer = check_line(b"{not json").expect_err("parse error");
        assert_eq!(answer["error"]["code"], -32700);
        assert_eq!(answer["id"], Value::Null);
        let answer = check_line(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":[1]}}"#,
        )
        .expect_err("invalid params");
        assert_eq!(answer["error"]["code"], -32602);
        assert_eq!(answer["id"], 7);
        assert!(
            check_line(
                br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"x","arguments":{}}}"#
            )
            .is_ok()
        );
    }
}
