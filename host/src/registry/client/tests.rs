//! Unit tests of the client: where credentials go on redirects, and reading challenges.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A one-line HTTP server on loopback: `answer(request head)` is the whole response; every
/// request head is kept.
async fn server(
    answer: impl Fn(&str) -> String + Send + Sync + 'static,
) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).await.unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
            let response = answer(&head);
            if let Ok(mut seen) = kept.lock() {
                seen.push(head);
            }
            let _ = stream.write_all(response.as_bytes()).await;
        }
    });
    (port, seen)
}

/// A registry's answer to a request without credentials: basic ones, please.
const ASK_FOR_BASIC: &str = "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"r\"\r\n\
                             Content-Length: 0\r\nConnection: close\r\n\r\n";

/// Options for a loopback registry over plain HTTP, with credentials to leak.
fn with_credentials() -> super::ClientOptions {
    super::ClientOptions::default()
        .plain_http(true)
        .credentials(super::Credentials::new("user", "hunter2"))
}

#[tokio::test]
async fn credentials_never_follow_a_redirect_to_another_host_and_http_only_to_loopback() {
    let (blob_port, blob_seen) =
        server(|_| "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".into())
            .await;
    let (registry_port, registry_seen) = server(move |head| {
        if !head.contains("authorization:") {
            return ASK_FOR_BASIC.into();
        }
        let target = if head.starts_with("get /v2/acme/away/") {
            "http://registry.example/blob".to_owned()
        } else {
            format!("http://localhost:{blob_port}/blob")
        };
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        )
    })
    .await;
    let options = with_credentials();
    let digest = format!("sha256:{}", crate::digest::sha256_hex(b"hello"));
    let reference =
        super::Reference::parse(&format!("127.0.0.1:{registry_port}/acme/x:1")).expect("ref");
    let client = super::RegistryClient::new(&reference, &options).expect("client");
    let blob = client
        .blob(&digest, 100, "the blob", "")
        .await
        .expect("blob");
    assert_eq!(blob, b"hello");
    let to_registry = registry_seen.lock().expect("seen").join("");
    assert!(
        to_registry.contains("authorization: basic "),
        "{to_registry}"
    );
    let to_blob_host = blob_seen.lock().expect("seen").join("");
    assert!(to_blob_host.contains("get /blob"), "{to_blob_host}");
    assert!(!to_blob_host.contains("authorization"), "{to_blob_host}");

    let reference =
        super::Reference::parse(&format!("127.0.0.1:{registry_port}/acme/away:1")).expect("ref");
    let client = super::RegistryClient::new(&reference, &options).expect("client");
    let error = client
        .blob(&digest, 100, "the blob", "")
        .await
        .expect_err("refused");
    assert!(
        error.to_string().contains("only https is followed"),
        "{error}"
    );

    let remote = super::Reference::parse("registry.example/acme/x:1").expect("ref");
    let error = super::RegistryClient::new(&remote, &options)
        .err()
        .expect("refused");
    assert!(
        error.to_string().contains("plain HTTP is only for"),
        "{error}"
    );
}

/// A digest a manifest names is the last part of a blob's path: one that is not a digest
/// (`sha256:x/../../../anything`) made the request another path on the registry, with the
/// puller's credentials. It is refused before anything is sent.
#[tokio::test]
async fn a_blob_whose_digest_is_not_one_is_never_requested() {
    let (port, seen) = server(|_| ASK_FOR_BASIC.into()).await;
    let reference = super::Reference::parse(&format!("127.0.0.1:{port}/acme/x:1")).expect("ref");
    let client = super::RegistryClient::new(&reference, &with_credentials()).expect("client");
    for digest in [
        "sha256:x/../../../../v2/acme/secret/manifests/latest",
        "sha256:ABCDEF",
        &format!("sha256:{}?x=1", "a".repeat(64)),
    ] {
        let error = client
            .blob(digest, 100, "bundle 1 of acme/x", "")
            .await
            .expect_err("refused");
        let message = error.to_string();
        assert!(
            message.contains("bundle 1 of acme/x") && message.contains("is not a sha256 digest"),
            "{message}"
        );
    }
    assert!(seen.lock().expect("seen").is_empty(), "a request was sent");
}

#[test]
fn challenges_are_read_with_quotes_and_commas() {
    let pairs = super::auth::challenge_parameters(
        r#"realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
    );
    assert_eq!(
        pairs,
        vec![
            ("realm".into(), "https://auth.example/token".into()),
            ("service".into(), "registry.example".into()),
            ("scope".into(), "repository:a/b:pull,push".into()),
        ]
    );
}

#[tokio::test]
async fn credentials_never_go_to_an_upload_location_on_another_host() {
    let (storage_port, storage_seen) =
        server(|_| "HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into())
            .await;
    let (registry_port, registry_seen) = server(move |head| {
        if !head.contains("authorization:") {
            return ASK_FOR_BASIC.into();
        }
        if head.starts_with("head ") {
            return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                .into();
        }
        format!(
            "HTTP/1.1 202 Accepted\r\nLocation: http://localhost:{storage_port}/upload/1\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
    })
    .await;
    let options = with_credentials();
    let reference =
        super::Reference::parse(&format!("127.0.0.1:{registry_port}/acme/x:1")).expect("ref");
    let client = super::RegistryClient::new(&reference, &options).expect("client");
    let digest = client.put_blob(b"hello").await.expect("upload");
    assert_eq!(
        digest,
        format!("sha256:{}", crate::digest::sha256_hex(b"hello"))
    );
    let to_registry = registry_seen.lock().expect("seen").join("");
    assert!(
        to_registry.contains("post /v2/acme/x/blobs/uploads/"),
        "{to_registry}"
    );
    assert!(
        to_registry.contains("authorization: basic "),
        "{to_registry}"
    );
    let to_storage = storage_seen.lock().expect("seen").join("");
    assert!(
        to_storage.contains("put /upload/1?digest=sha256%3a"),
        "{to_storage}"
    );
    assert!(!to_storage.contains("authorization"), "{to_storage}");
}

#[tokio::test]
async fn credentials_never_answer_a_challenge_from_a_host_the_registry_redirected_to() {
    let (token_port, token_seen) = server(|_| {
        let body = r#"{"token":"stolen"}"#;
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
    })
    .await;
    // Another host, which the registry redirects to: its 401 names a token realm of its own.
    let (elsewhere_port, elsewhere_seen) = server(move |_| {
        format!(
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer \
             realm=\"http://127.0.0.1:{token_port}/token\",service=\"elsewhere\"\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
    })
    .await;
    let (registry_port, registry_seen) = server(move |_| {
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://localhost:{elsewhere_port}/blob\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
    })
    .await;
    let reference =
        super::Reference::parse(&format!("127.0.0.1:{registry_port}/acme/x:1")).expect("ref");
    let client = super::RegistryClient::new(&reference, &with_credentials()).expect("client");
    let digest = format!("sha256:{}", crate::digest::sha256_hex(b"hello"));
    let error = client
        .blob(&digest, 100, "the blob", "")
        .await
        .expect_err("a challenge from elsewhere is not answered");
    let to_token = token_seen.lock().expect("seen").join("");
    assert!(
        to_token.is_empty(),
        "the token realm was asked for a token: {to_token}"
    );
    let message = error.to_string();
    assert!(
        message.contains("401")
            && message.contains(&format!("redirected to http://localhost:{elsewhere_port}"))
            && message.contains("none were sent"),
        "{message}"
    );
    let to_elsewhere = elsewhere_seen.lock().expect("seen").join("");
    assert!(to_elsewhere.contains("get /blob"), "{to_elsewhere}");
    assert!(!to_elsewhere.contains("authorization"), "{to_elsewhere}");
    let to_registry = registry_seen.lock().expect("seen").join("");
    assert!(!to_registry.contains("authorization"), "{to_registry}");
}

/// The attack: registries answer a blob's request with a redirect to a storage URL whose query
/// is its signature (a read of the private blob for anyone holding it, for minutes). A body
/// cut short, or a redirect refused, put that URL whole in the error the command prints; and a
/// redirect's URL of hundreds of kilobytes made an error line of as many. Now the URL is shown
/// without its query, and cut.
#[tokio::test]
async fn a_storage_urls_signature_never_reaches_an_error() {
    let (blob_port, _) = server(|_| {
        // Promises 100 bytes, sends 5, and closes.
        "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nhello".into()
    })
    .await;
    let long = "p".repeat(300_000);
    let (registry_port, _) = server(move |head| {
        let target = if head.starts_with("get /v2/acme/away/") {
            format!("http://registry.example/{long}?sig=SECRET-SIGNATURE")
        } else {
            format!("http://localhost:{blob_port}/blob?sig=SECRET-SIGNATURE&se=2099")
        };
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        )
    })
    .await;
    let options = super::ClientOptions::default().plain_http(true);
    let digest = format!("sha256:{}", crate::digest::sha256_hex(b"hello"));
    for repository in ["x", "away"] {
        let reference =
            super::Reference::parse(&format!("127.0.0.1:{registry_port}/acme/{repository}:1"))
                .expect("ref");
        let client = super::RegistryClient::new(&reference, &options).expect("client");
        let error = client
            .blob(&digest, 1000, "the blob", "")
            .await
            .expect_err("refused")
            .to_string();
        assert!(!error.contains("SECRET"), "{error}");
        assert!(error.len() < 4_000, "{}", &error[..4_000]);
    }
}
