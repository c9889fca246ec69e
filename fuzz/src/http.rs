//! Target of the daemons' HTTP request parser (`multihome_runtime::http`): anyone who can
//! reach a `metrics_listen` or `dashboard` address sends it bytes.

use multihome_runtime::http::{answer, parse_request, ParseError, Response, MAX_HEAD};

/// Fuzz body: the input is a request head.
///
/// Checks: no panic; a head that parses has a method of upper-case letters, a target path
/// starting with `/`, and `METHOD PATH[?QUERY] VERSION` is exactly its first line; only a
/// line not yet ended (and shorter than `MAX_HEAD`) is incomplete; the answer is the
/// route's (200) only for GET and HEAD, else 405, and 400 for anything that does not parse.
/// Returns whether the head parsed.
pub fn http_request(data: &[u8]) -> bool {
    let parsed = parse_request(data);
    match parsed {
        Ok(r) => {
            let end = data
                .iter()
                .position(|&b| b == b'\n')
                .expect("a parsed line ends");
            let line = data[..end].strip_suffix(b"\r").unwrap_or(&data[..end]);
            let query = r.query.map(|q| format!("?{q}")).unwrap_or_default();
            let again = format!("{} {}{query} {}", r.method, r.path, r.version);
            assert_eq!(again.as_bytes(), line, "the parts are not the line");
            assert!(r.path.starts_with('/'));
            assert!(r.method.bytes().all(|b| b.is_ascii_uppercase()) && !r.method.is_empty());
        }
        Err(ParseError::Incomplete) => {
            assert!(!data.contains(&b'\n') && data.len() < MAX_HEAD);
        }
        Err(ParseError::Malformed(_)) => {}
    }
    let (resp, head_only) = answer(data, |_| Response::ok("text/plain", &b"route"[..]));
    let expected = match parsed {
        Ok(r) if r.method == "GET" || r.method == "HEAD" => 200,
        Ok(_) => 405,
        Err(_) => 400,
    };
    assert_eq!(resp.status, expected);
    let encoded = resp.encode(head_only);
    assert!(encoded.starts_with(b"HTTP/1.1 "));
    parsed.is_ok()
}
