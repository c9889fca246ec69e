//! The daemons' one HTTP/1.1 server, small on purpose: it serves the Prometheus metrics
//! (`metrics_listen`) and the dashboard (`dashboard`), both read-only views of a status
//! document, so it needs one request per connection and nothing else of HTTP.
//!
//! A connection is accepted by the daemon's own loop (which builds what the answer needs
//! from the state it owns), then handed to [`HttpListener::serve`]: a local task reads the
//! request head, parses it ([`parse_request`]), asks the route for the answer and writes it.
//!
//! Invariants: a head is read to at most [`MAX_HEAD`] bytes within [`READ_TIMEOUT`], and
//! at most [`MAX_CONNECTIONS`] connections are served at once (more are closed unread), so
//! a slow or hostile client costs bounded memory and never blocks the data path; only GET
//! and HEAD are answered (anything else is 405): nothing served here changes state;
//! every answer closes its connection.

use anyhow::{Context, Result};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Longest request head read (request line and headers); a longer one is refused.
pub const MAX_HEAD: usize = 8192;
/// Time a client has to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections served at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 32;

/// A request line, borrowed from the head it was parsed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// `GET`, `HEAD`, … (upper-case letters only).
    pub method: &'a str,
    /// The target's path, starting with `/`.
    pub path: &'a str,
    /// The target's query, after `?`, if it had one.
    pub query: Option<&'a str>,
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: &'a str,
}

/// Why a head is not (yet) a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The request line is not complete yet.
    #[error("incomplete request line")]
    Incomplete,
    /// It never will be a request this server answers.
    #[error("malformed request: {0}")]
    Malformed(&'static str),
}

/// Parses the request line at the start of `head` (headers after it are not needed: every
/// answer depends only on the method and the target). Origin-form targets only.
pub fn parse_request(head: &[u8]) -> Result<Request<'_>, ParseError> {
    let Some(end) = head.iter().position(|&b| b == b'\n') else {
        return Err(if head.len() >= MAX_HEAD {
            ParseError::Malformed("request line too long")
        } else {
            ParseError::Incomplete
        });
    };
    let line = head[..end].strip_suffix(b"\r").unwrap_or(&head[..end]);
    let line = std::str::from_utf8(line).map_err(|_| ParseError::Malformed("not UTF-8"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ParseError::Malformed("not `METHOD TARGET VERSION`"));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(ParseError::Malformed("bad method"));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(ParseError::Malformed("not HTTP/1.x"));
    }
    if !target.starts_with('/') || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ParseError::Malformed("bad target"));
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    Ok(Request {
        method,
        path,
        query,
        version,
    })
}

/// Whether `head` holds the whole head (it ends at the first empty line).
fn head_complete(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code (200, 404, …).
    pub status: u16,
    /// Content-Type.
    pub content_type: &'static str,
    /// The body.
    pub body: std::borrow::Cow<'static, [u8]>,
    /// Extra header lines, each ending in CRLF (e.g. a Content-Security-Policy).
    pub headers: &'static str,
}

impl Response {
    /// 200 with `body`.
    pub fn ok(
        content_type: &'static str,
        body: impl Into<std::borrow::Cow<'static, [u8]>>,
    ) -> Self {
        Response {
            status: 200,
            content_type,
            body: body.into(),
            headers: "",
        }
    }

    /// A plain-text error.
    pub fn error(status: u16, text: &'static str) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: text.as_bytes().into(),
            headers: "",
        }
    }

    /// Status line, headers and (unless `head_only`) body.
    pub fn encode(&self, head_only: bool) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            _ => "Error",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
             Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n{}{}\
             Connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len(),
            if self.status == 405 {
                "Allow: GET, HEAD\r\n"
            } else {
                ""
            },
            self.headers,
        )
        .into_bytes();
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// The answer to a head: 400 if it is not a request, 405 unless GET or HEAD, else the
/// route's; and whether the body is left out (HEAD).
pub fn answer(head: &[u8], route: impl FnOnce(&Request<'_>) -> Response) -> (Response, bool) {
    match parse_request(head) {
        Err(_) => (Response::error(400, "bad request\n"), false),
        Ok(r) if r.method != "GET" && r.method != "HEAD" => (
            Response::error(405, "read-only: only GET and HEAD are served\n"),
            r.method == "HEAD",
        ),
        Ok(r) => (route(&r), r.method == "HEAD"),
    }
}

/// A listening socket and the count of connections being served.
pub struct HttpListener {
    listener: TcpListener,
    in_flight: Rc<Cell<usize>>,
}

impl HttpListener {
    /// Binds `addr`; `what` names the config key in the error.
    pub async fn bind(addr: SocketAddr, what: &str) -> Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("{what} {addr}"))?;
        Ok(HttpListener {
            listener,
            in_flight: Rc::new(Cell::new(0)),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Waits for the next connection.
    pub async fn accept(&self) -> std::io::Result<TcpStream> {
        self.listener.accept().await.map(|(s, _)| s)
    }

    /// Serves one connection in a local task: reads its head, answers with `route`.
    /// Beyond [`MAX_CONNECTIONS`] the connection is closed at once.
    pub fn serve<F>(&self, mut stream: TcpStream, route: F)
    where
        F: FnOnce(&Request<'_>) -> Response + 'static,
    {
        if self.in_flight.get() >= MAX_CONNECTIONS {
            return;
        }
        let guard = InFlight::new(self.in_flight.clone());
        tokio::task::spawn_local(async move {
            let _guard = guard;
            let Ok(Some(head)) = tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await
            else {
                return;
            };
            let (resp, head_only) = answer(&head, route);
            let _ = stream.write_all(&resp.encode(head_only)).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Counts a connection while it is served.
struct InFlight(Rc<Cell<usize>>);

impl InFlight {
    fn new(c: Rc<Cell<usize>>) -> Self {
        c.set(c.get() + 1);
        InFlight(c)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// Reads until the head is complete or [`MAX_HEAD`] bytes; `None` if the peer closed first.
async fn read_head(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head_complete(&head) && head.len() < MAX_HEAD {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return (!head.is_empty()).then_some(head);
        }
        head.extend_from_slice(&buf[..n.min(MAX_HEAD - head.len())]);
    }
    Some(head)
}

/// A blocking `GET path` to `addr` (`multihome status --url`): the status code and body.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<(u16, Vec<u8>)> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply)
        .with_context(|| format!("reading the answer of {addr}"))?;
    let split = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("the answer has no end of head")?;
    let status_line = String::from_utf8_lossy(&reply[..split]);
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("the answer has no status code")?;
    Ok((status, reply[split + 4..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        let r = parse_request(b"GET /api/history?since=5 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(
            r,
            Request {
                method: "GET",
                path: "/api/history",
                query: Some("since=5"),
                version: "HTTP/1.1"
            }
        );
        assert_eq!(parse_request(b"GET / HTTP/1.0\n\n").unwrap().path, "/");
        assert_eq!(
            parse_request(b"GET / HTTP/1.1"),
            Err(ParseError::Incomplete)
        );
        for bad in [
            &b"GET /  HTTP/1.1\r\n"[..],
            b"get / HTTP/1.1\r\n",
            b"GET http://x/ HTTP/1.1\r\n",
            b"GET / HTTP/2\r\n",
            b"GET /\xff HTTP/1.1\r\n",
            b"\r\n",
        ] {
            assert!(
                matches!(parse_request(bad), Err(ParseError::Malformed(_))),
                "{bad:?}"
            );
        }
        let long = vec![b'a'; MAX_HEAD];
        assert_eq!(
            parse_request(&long),
            Err(ParseError::Malformed("request line too long"))
        );
    }

    #[test]
    fn answers_are_read_only() {
        let route = |_: &Request<'_>| Response::ok("text/plain", &b"hi"[..]);
        let (r, head_only) = answer(b"POST / HTTP/1.1\r\n\r\n", route);
        assert_eq!((r.status, head_only), (405, false));
        assert!(String::from_utf8(r.encode(false))
            .unwrap()
            .contains("Allow: GET, HEAD\r\n"));
        let (r, head_only) = answer(b"HEAD / HTTP/1.1\r\n\r\n", route);
        let text = String::from_utf8(r.encode(head_only)).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("Content-Length: 2\r\n") && text.ends_with("\r\n\r\n"));
        assert_eq!(answer(b"nonsense\r\n\r\n", route).0.status, 400);
        assert!(head_complete(b"GET / HTTP/1.1\r\nA: b\r\n\r\n"));
        assert!(!head_complete(b"GET / HTTP/1.1\r\nA: b\r\n"));
    }

    /// A real listener answering a real client (the blocking [`get`] of `status --url`).
    #[test]
    fn serves_over_tcp() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let l = HttpListener::bind("127.0.0.1:0".parse().unwrap(), "test")
                .await
                .unwrap();
            let addr = l.local_addr().unwrap();
            let client = tokio::task::spawn_blocking(move || {
                get(addr, "/x?y", Duration::from_secs(5)).unwrap()
            });
            let s = l.accept().await.unwrap();
            l.serve(s, |r| {
                let body = format!("{} {:?}", r.path, r.query);
                Response::ok("text/plain", body.into_bytes())
            });
            let (status, body) = client.await.unwrap();
            assert_eq!((status, body.as_slice()), (200, &b"/x Some(\"y\")"[..]));
        });
    }
}
