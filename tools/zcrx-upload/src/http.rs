// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! An incremental HTTP/1.1 request parser for uploads: fed the stream's
//! bytes in whatever pieces they arrive (zero-copy records), it reports the
//! request head, the body as ranges of the piece it was given (no copy),
//! and the end of each request. Content-Length and chunked bodies;
//! pipelined requests follow one another. httparse splits the heads and
//! reads the chunk sizes; the checks around it refuse what it would let
//! through (bare LF, controls in chunk extensions, an empty chunk size).

use std::ops::Range;

/// Largest request head accepted (request line + headers).
pub const MAX_HEAD: usize = 64 << 10;

/// A request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    pub target: String,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
    /// The client asked to close after this request (or spoke HTTP/1.0).
    pub close: bool,
    /// Body framing: `Some(n)` for Content-Length, `None` for chunked.
    pub content_length: Option<u64>,
}

/// What a piece of input held, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    Head(Head),
    /// Body bytes: this range of the piece just fed.
    Body(Range<usize>),
    /// The request (head and body) is complete.
    End,
    /// The request is malformed: the status to answer with (then close).
    Bad(u16, &'static str),
}

#[derive(Debug)]
enum State {
    Head(Vec<u8>),
    Fixed(u64),
    ChunkSize(Vec<u8>),
    ChunkData(u64),
    ChunkCrlf(u8),
    /// The current trailer line, and the trailers' bytes so far.
    Trailers(Vec<u8>, usize),
    Failed,
}

/// The parser of one connection.
#[derive(Debug)]
pub struct Parser {
    state: State,
}

impl Default for Parser {
    fn default() -> Self {
        Parser { state: State::Head(Vec::new()) }
    }
}

/// A decimal number of digits only (no sign, no space: RFC 9112).
fn digits(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// A token (RFC 9110 5.6.2): a method or a header name.
fn token(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A byte no request head may hold: controls other than HTAB (CR and LF
/// only as line ends, checked where lines are split), and DEL. NUL, a bare
/// CR or an escape in a header value is refused, not passed on.
fn bad_head_byte(b: u8) -> bool {
    (b < 0x20 && b != b'\t' && b != b'\r' && b != b'\n') || b == 0x7f
}

/// The status for a request line whose version httparse refused: 505 for
/// a well-formed version this server does not speak (RFC 9110 15.6.6), 400
/// for a malformed one.
fn version_error(raw: &[u8]) -> (u16, &'static str) {
    let text = String::from_utf8_lossy(raw);
    let line = text.trim_start_matches("\r\n").split("\r\n").next().unwrap_or("").to_string();
    // (httparse says Version for `PUT /a b HTTP/1.1` too: not a version)
    if line.split(' ').count() != 3 {
        return (400, "bad request line");
    }
    let b = line.rsplit(' ').next().and_then(|v| v.strip_prefix("HTTP/")).unwrap_or("").as_bytes();
    if b.len() == 3 && b[0].is_ascii_digit() && b[1] == b'.' && b[2].is_ascii_digit() {
        (505, "only HTTP/1.0 and HTTP/1.1")
    } else {
        (400, "bad HTTP version")
    }
}

/// Parses a request head (without its blank line). httparse splits it into
/// the request line and the header fields; what RFC 9112 asks beyond its
/// grammar (one framing, digits-only lengths, no folded lines, no
/// expectation but 100-continue) is checked here, and before it the bytes
/// no head may hold (controls, a bare CR, non-UTF-8; a bare LF is refused
/// as the head arrives, in `Parser::feed`), which httparse would let
/// through in places.
fn parse_head(raw: &[u8]) -> Result<Head, (u16, &'static str)> {
    if raw.iter().any(|&b| bad_head_byte(b)) {
        return Err((400, "control character in the request head"));
    }
    let text = std::str::from_utf8(raw).map_err(|_| (400, "request head is not UTF-8"))?;
    if raw.iter().enumerate().any(|(k, &b)| b == b'\r' && raw.get(k + 1) != Some(&b'\n')) {
        return Err((400, "bare CR in the request head"));
    }
    if text.split("\r\n").skip(1).any(|l| l.starts_with([' ', '\t'])) {
        return Err((400, "obsolete line folding"));
    }
    let mut full = Vec::with_capacity(raw.len() + 4);
    full.extend_from_slice(raw);
    full.extend_from_slice(b"\r\n\r\n");
    // one field per line at most: httparse never runs out of room
    let mut fields = vec![httparse::EMPTY_HEADER; full.iter().filter(|&&b| b == b'\n').count()];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(&full) {
        Ok(httparse::Status::Complete(n)) if n == full.len() => {}
        Ok(_) => return Err((400, "bad request head")),
        Err(httparse::Error::Version) => return Err(version_error(raw)),
        Err(httparse::Error::HeaderName) => return Err((400, "bad header name")),
        Err(httparse::Error::HeaderValue) => return Err((400, "bad header value")),
        Err(httparse::Error::TooManyHeaders) => return Err((431, "too many header fields")),
        Err(_) => return Err((400, "bad request line")),
    }
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err((400, "bad request line"));
    };
    if !token(method) || target.is_empty() || target.bytes().any(|b| b <= b' ' || b >= 0x7f) {
        return Err((400, "bad request line"));
    }
    let mut h =
        Head { method: method.to_string(), target: target.to_string(), expect_continue: false, close: minor == 0, content_length: Some(0) };
    let mut chunked = false;
    let mut length = None;
    for f in req.headers.iter() {
        let (k, v) = (f.name, std::str::from_utf8(f.value).map_err(|_| (400, "bad header value"))?);
        if !token(k) {
            return Err((400, "bad header name"));
        }
        let v = v.trim_matches([' ', '\t']);
        match k.to_ascii_lowercase().as_str() {
            "content-length" => {
                let n = digits(v).ok_or((400, "bad Content-Length"))?;
                if length.is_some_and(|m| m != n) {
                    return Err((400, "conflicting Content-Length"));
                }
                length = Some(n);
            }
            "transfer-encoding" => {
                if !v.eq_ignore_ascii_case("chunked") || chunked {
                    return Err((501, "only one chunked transfer coding"));
                }
                chunked = true;
            }
            "expect" => {
                // the one expectation there is (RFC 9110 10.1.1)
                if !v.eq_ignore_ascii_case("100-continue") {
                    return Err((417, "only Expect: 100-continue"));
                }
                h.expect_continue = true;
            }
            "connection" => h.close |= v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")),
            _ => {}
        }
    }
    if chunked && length.is_some() {
        return Err((400, "both Content-Length and chunked"));
    }
    h.content_length = if chunked { None } else { length.or(Some(0)) };
    Ok(h)
}

/// The reason phrase of a status this server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        201 => "Created",
        400 => "Bad Request",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

impl Parser {
    /// A request is under way (head started, body not complete).
    pub fn mid_request(&self) -> bool {
        !matches!(&self.state, State::Head(b) if b.is_empty())
    }

    /// Feeds the next piece of the stream; returns what it held.
    pub fn feed(&mut self, data: &[u8]) -> Vec<Event> {
        let mut ev = Vec::new();
        let mut i = 0;
        while i < data.len() {
            match &mut self.state {
                State::Failed => break,
                State::Head(buf) => {
                    // Up to and including the blank line, if it is here.
                    let start = buf.len();
                    let take = (data.len() - i).min(MAX_HEAD + 4 - start);
                    buf.extend_from_slice(&data[i..i + take]);
                    let from = start.saturating_sub(3);
                    let end = buf[from..].windows(4).position(|w| w == b"\r\n\r\n").map(|p| from + p + 4);
                    // What cannot become a head is refused at once, not
                    // after MAX_HEAD bytes or never: a byte no head may
                    // hold, or a line ended by a bare LF.
                    let seen = &buf[..end.unwrap_or(buf.len())];
                    let bare_lf =
                        seen.iter().enumerate().skip(start.max(1) - 1).any(|(k, &b)| b == b'\n' && (k == 0 || seen[k - 1] != b'\r'));
                    if bare_lf || seen[start.min(seen.len())..].iter().any(|&b| bad_head_byte(b)) {
                        ev.push(Event::Bad(400, if bare_lf { "line ended by a bare LF" } else { "control character in the request head" }));
                        self.state = State::Failed;
                        continue;
                    }
                    match end.map(|e| e - from - 4) {
                        Some(p) => {
                            let end = from + p + 4;
                            i += end - start;
                            let head = parse_head(&buf[..end - 4]);
                            match head {
                                Ok(h) => {
                                    self.state = match h.content_length {
                                        Some(n) => State::Fixed(n),
                                        None => State::ChunkSize(Vec::new()),
                                    };
                                    ev.push(Event::Head(h));
                                    if matches!(self.state, State::Fixed(0)) {
                                        ev.push(Event::End);
                                        self.state = State::Head(Vec::new());
                                    }
                                }
                                Err((s, m)) => {
                                    ev.push(Event::Bad(s, m));
                                    self.state = State::Failed;
                                }
                            }
                        }
                        None if buf.len() > MAX_HEAD => {
                            ev.push(Event::Bad(431, "request head too large"));
                            self.state = State::Failed;
                        }
                        None => i += take,
                    }
                }
                State::Fixed(left) => {
                    let n = (*left).min((data.len() - i) as u64) as usize;
                    ev.push(Event::Body(i..i + n));
                    i += n;
                    *left -= n as u64;
                    if *left == 0 {
                        ev.push(Event::End);
                        self.state = State::Head(Vec::new());
                    }
                }
                State::ChunkSize(line) => {
                    let b = data[i];
                    i += 1;
                    if b != b'\n' {
                        if line.len() > 1024 {
                            ev.push(Event::Bad(400, "chunk size line too long"));
                            self.state = State::Failed;
                        } else {
                            line.push(b);
                        }
                        continue;
                    }
                    // CRLF and nothing else ends the line: a bare LF, a CR
                    // inside it or a control character is refused (a proxy
                    // in front may split such lines differently: smuggling)
                    let Some(body) = line.strip_suffix(b"\r") else {
                        ev.push(Event::Bad(400, "chunk size line not ended by CRLF"));
                        self.state = State::Failed;
                        continue;
                    };
                    if body.iter().any(|&b| b == b'\r' || bad_head_byte(b) || b >= 0x80) {
                        ev.push(Event::Bad(400, "bad byte in a chunk size line"));
                        self.state = State::Failed;
                        continue;
                    }
                    // (httparse takes an empty size for 0: a digit first)
                    let mut l = body.to_vec();
                    l.extend_from_slice(b"\r\n");
                    let size = match httparse::parse_chunk_size(&l) {
                        Ok(httparse::Status::Complete((_, n))) if body.first().is_some_and(u8::is_ascii_hexdigit) => Some(n),
                        _ => None,
                    };
                    match size.ok_or(()) {
                        Ok(0) => self.state = State::Trailers(Vec::new(), 0),
                        Ok(n) => self.state = State::ChunkData(n),
                        Err(()) => {
                            ev.push(Event::Bad(400, "bad chunk size"));
                            self.state = State::Failed;
                        }
                    }
                }
                State::ChunkData(left) => {
                    let n = (*left).min((data.len() - i) as u64) as usize;
                    ev.push(Event::Body(i..i + n));
                    i += n;
                    *left -= n as u64;
                    if *left == 0 {
                        self.state = State::ChunkCrlf(0);
                    }
                }
                State::ChunkCrlf(seen) => {
                    let want = if *seen == 0 { b'\r' } else { b'\n' };
                    if data[i] != want {
                        ev.push(Event::Bad(400, "chunk not followed by CRLF"));
                        self.state = State::Failed;
                        continue;
                    }
                    i += 1;
                    if *seen == 1 {
                        self.state = State::ChunkSize(Vec::new());
                    } else {
                        *seen = 1;
                    }
                }
                State::Trailers(line, total) => {
                    let b = data[i];
                    i += 1;
                    *total += 1;
                    if *total > MAX_HEAD {
                        ev.push(Event::Bad(431, "trailers too large"));
                        self.state = State::Failed;
                        continue;
                    }
                    if b != b'\n' {
                        line.push(b);
                        continue;
                    }
                    let Some(l) = line.strip_suffix(b"\r") else {
                        ev.push(Event::Bad(400, "trailer line not ended by CRLF"));
                        self.state = State::Failed;
                        continue;
                    };
                    if l.iter().any(|&b| b == b'\r' || bad_head_byte(b)) {
                        ev.push(Event::Bad(400, "control character in a trailer"));
                        self.state = State::Failed;
                        continue;
                    }
                    if l.is_empty() {
                        ev.push(Event::End);
                        self.state = State::Head(Vec::new());
                    } else {
                        line.clear();
                    }
                }
            }
        }
        // Merge adjacent body ranges (one write per piece).
        let mut out: Vec<Event> = Vec::with_capacity(ev.len());
        for e in ev {
            match (out.last_mut(), e) {
                (Some(Event::Body(r)), Event::Body(s)) if r.end == s.start => r.end = s.end,
                (_, Event::Body(s)) if s.is_empty() => {}
                (_, e) => out.push(e),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parsed = (Vec<Head>, Vec<Vec<u8>>, Vec<(u16, &'static str)>);

    /// Feeds `input` in pieces of `step` bytes; returns the heads, the
    /// complete bodies and the errors.
    fn run(input: &[u8], step: usize) -> Parsed {
        let mut p = Parser::default();
        let (mut heads, mut bodies, mut bad) = (Vec::new(), Vec::new(), Vec::new());
        let mut cur = Vec::new();
        for piece in input.chunks(step) {
            for e in p.feed(piece) {
                match e {
                    Event::Head(h) => heads.push(h),
                    Event::Body(r) => cur.extend_from_slice(&piece[r]),
                    Event::End => bodies.push(std::mem::take(&mut cur)),
                    Event::Bad(s, m) => bad.push((s, m)),
                }
            }
        }
        (heads, bodies, bad)
    }

    #[test]
    fn heads_through_httparse_and_the_checks_after_it() {
        let status = |head: &[u8]| run(head, head.len()).2.first().map(|b| b.0);
        // well-formed: empty lines first, many fields, HTTP/1.0 closes
        let many: String = (0..300).map(|i| format!("X-{i}: v\r\n")).collect();
        let (h, _, bad) = run(format!("\r\nPUT /m HTTP/1.0\r\n{many}Content-Length: 0\r\n\r\n").as_bytes(), 7);
        assert!(bad.is_empty() && h.len() == 1 && h[0].close, "{bad:?}");
        for (head, want) in [
            (&b"PUT /a HTTP/1.9\r\n\r\n"[..], 505),
            (&b"PUT /a HTTP/2.0\r\n\r\n"[..], 505),
            (&b"PUT /a HTTP/1.x\r\n\r\n"[..], 400),
            (&b"PUT /a HTP/1.1\r\n\r\n"[..], 400),
            (&b"PUT  /a HTTP/1.1\r\n\r\n"[..], 400),
            (&b"PUT /a  HTTP/1.1\r\n\r\n"[..], 400),
            (&b"PUT /a b HTTP/1.1\r\n\r\n"[..], 400),
            (&b"PUT /a HTTP/1.1\r\nHost : a\r\n\r\n"[..], 400),
            (&b"PUT /a HTTP/1.1\r\nNoColon\r\n\r\n"[..], 400),
            (&b"PUT /a HTTP/1.1\r\nX: a\rb\r\n\r\n"[..], 400),
            (&b"PUT /a HTTP/1.1\r\nX: \xff\r\n\r\n"[..], 400),
            (&b"PUT /a HTTP/1.1\r\nContent-Length: +5\r\n\r\n"[..], 400),
            (&b"P(T /a HTTP/1.1\r\n\r\n"[..], 400),
        ] {
            assert_eq!(status(head), Some(want), "{:?}", String::from_utf8_lossy(head));
        }
        // chunk sizes: httparse reads them once the line passed our checks
        let chunked = |line: &[u8]| {
            let mut r = b"PUT /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            r.extend_from_slice(line);
            r.extend_from_slice(b"abc\r\n0\r\n\r\n");
            run(&r, 5)
        };
        for ok in [&b"3\r\n"[..], b"03;name=value\r\n", b"3 ;x\r\n", b"0000000000000003\r\n"] {
            let (_, b, bad) = chunked(ok);
            assert!(bad.is_empty() && b == vec![b"abc".to_vec()], "{:?}: {bad:?}", String::from_utf8_lossy(ok));
        }
        for no in [&b";x\r\n"[..], b"\r\n", b" 3\r\n", b"3 3\r\n", b"00000000000000003\r\n", b"3;\x01\r\n"] {
            let (_, _, bad) = chunked(no);
            assert_eq!(bad.first().map(|b| b.0), Some(400), "{:?}", String::from_utf8_lossy(no));
        }
    }

    #[test]
    fn content_length_and_chunked_pipelined_in_any_pieces() {
        let mut req = b"PUT /a.bin HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\nhello world".to_vec();
        req.extend_from_slice(
            b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-T: 1\r\n\r\n",
        );
        for step in [1, 2, 3, 7, 16, 1000] {
            let (heads, bodies, bad) = run(&req, step);
            assert!(bad.is_empty(), "step {step}: {bad:?}");
            assert_eq!(heads.len(), 2, "step {step}");
            assert_eq!(heads[0].target, "/a.bin");
            assert!(heads[0].expect_continue && !heads[0].close);
            assert_eq!(heads[1].content_length, None);
            assert!(heads[1].close);
            assert_eq!(bodies, vec![b"hello world".to_vec(), b"hello world".to_vec()], "step {step}");
        }
    }

    #[test]
    fn empty_body_and_errors() {
        let (h, b, bad) = run(b"PUT /e HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 5);
        assert_eq!((h.len(), b, bad.len()), (1, vec![Vec::new()], 0));
        let (_, _, bad) = run(b"PUT /e HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 4);
        assert_eq!(bad[0].0, 501);
        let (_, _, bad) = run(b"PUT /e HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 3);
        assert_eq!(bad[0].0, 400);
        let (_, _, bad) = run(b"PUT /e HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc", 3);
        assert_eq!(bad[0].0, 400);
        let (_, _, bad) = run(b"PUT /e HTTP/1.1\r\nContent-Length : 3\r\n\r\nabc", 3);
        assert_eq!(bad[0].0, 400);
        let (_, _, bad) = run(b"PUT /e HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 3);
        assert_eq!(bad[0].0, 400);
        let (_, _, bad) = run(b"PUT /e HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n+3\r\nabc\r\n0\r\n\r\n", 3);
        assert_eq!(bad[0].0, 400);
        let (h, b, bad) = run(b"\r\nPUT /e HTTP/1.1\r\nContent-Length: 1\r\n\r\nz", 3);
        assert_eq!((h.len(), b, bad.len()), (1, vec![b"z".to_vec()], 0));
        let (_, _, bad) = run(b"PUT /e SPDY/3\r\n\r\n", 3);
        assert_eq!(bad[0].0, 400);
        let (_, _, bad) = run(b"PUT /e HTTP/1.9\r\n\r\n", 3);
        assert_eq!(bad[0], (505, "only HTTP/1.0 and HTTP/1.1"));
        let big = vec![b'a'; MAX_HEAD + 10];
        let (_, _, bad) = run(&big, 4096);
        assert_eq!(bad[0].0, 431);
    }

    /// What a hostile client sends is refused as soon as it shows, with
    /// the status RFC 9110/9112 give it, whatever the pieces.
    #[test]
    fn hostile_heads_refused_at_once() {
        // Feeds `input` and returns the first error and how many bytes
        // had been fed when it came.
        let first_bad = |input: &[u8], step: usize| -> Option<(u16, usize)> {
            let mut p = Parser::default();
            let mut fed = 0;
            for piece in input.chunks(step) {
                fed += piece.len();
                if let Some(Event::Bad(s, _)) = p.feed(piece).into_iter().find(|e| matches!(e, Event::Bad(..))) {
                    return Some((s, fed));
                }
            }
            None
        };
        for step in [1, 7, 4096] {
            // random bytes: a NUL (or another control) in the first few
            let mut junk: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
            junk[40] = 0;
            let (s, at) = first_bad(&junk, step).expect("junk refused");
            assert!(s == 400 && at <= 41usize.div_ceil(step) * step, "step {step}: {s} after {at}");
            // a head with bare LF line ends: refused at the first LF
            let lf = b"PUT /x HTTP/1.1\nHost: a\nContent-Length: 1\n\nz";
            assert_eq!(first_bad(lf, step).map(|b| b.0), Some(400), "step {step}");
            assert!(first_bad(lf, step).unwrap().1 <= 16usize.div_ceil(step) * step);
        }
        for (head, status) in [
            (&b"PUT /x HTTP/1.1\r\nX: a\0b\r\n\r\n"[..], 400),
            (b"PUT /x HTTP/1.1\r\nX: a\rb\r\n\r\n", 400),
            (b"PUT /x HTTP/1.1\r\nX: a\x1bb\r\n\r\n", 400),
            (b"PUT /x HTTP/1.1\r\nBad Name: a\r\n\r\n", 400),
            (b"P@T /x HTTP/1.1\r\n\r\n", 400),
            (b"PUT /x HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 417),
            (b"PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
            (b"PUT /x HTTP/2.0\r\n\r\n", 505),
        ] {
            let (_, _, bad) = run(head, 5);
            assert_eq!(bad.first().map(|b| b.0), Some(status), "{:?}", String::from_utf8_lossy(head));
        }
    }

    /// Chunk-size and trailer lines end with CRLF and nothing else: a
    /// proxy in front that split them otherwise would see other requests
    /// (smuggling).
    #[test]
    fn chunk_lines_strict() {
        let te = b"PUT /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for body in
            [&b"5\nhello\r\n0\r\n\r\n"[..], b"5\r\r\nhello\r\n0\r\n\r\n", b"5;a\rb\r\nhello\r\n0\r\n\r\n", b"5\r\nhello\r\n0\r\nX: 1\n\r\n"]
        {
            let mut req = te.clone();
            req.extend_from_slice(body);
            for step in [1, 3, 100] {
                let (_, b, bad) = run(&req, step);
                assert!(b.is_empty() && bad.first().map(|x| x.0) == Some(400), "{:?} step {step}: {bad:?}", String::from_utf8_lossy(body));
            }
        }
        // trailers are bounded in all, not per line
        let mut req = te.clone();
        req.extend_from_slice(b"0\r\n");
        for _ in 0..(MAX_HEAD / 8 + 1) {
            req.extend_from_slice(b"X: 123\r\n");
        }
        let (_, _, bad) = run(&req, 4096);
        assert_eq!(bad.first().map(|b| b.0), Some(431));
    }
}
