// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! An incremental HTTP/1.1 request parser for uploads: fed the stream's
//! bytes in whatever pieces they arrive (zero-copy records), it reports the
//! request head, the body as ranges of the piece it was given (no copy),
//! and the end of each request. Content-Length and chunked bodies;
//! pipelined requests follow one another.

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
    Trailers(Vec<u8>),
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

fn parse_head(raw: &[u8]) -> Result<Head, (u16, &'static str)> {
    let text = std::str::from_utf8(raw).map_err(|_| (400, "request head is not UTF-8"))?;
    // Empty lines before the request line are ignored (RFC 9112 2.2).
    let text = text.trim_start_matches("\r\n");
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err((400, "bad request line"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err((505, "only HTTP/1.x"));
    }
    let mut h = Head {
        method: method.to_string(),
        target: target.to_string(),
        expect_continue: false,
        close: version == "HTTP/1.0",
        content_length: Some(0),
    };
    let mut chunked = false;
    let mut length = None;
    for l in lines {
        if l.starts_with([' ', '\t']) {
            return Err((400, "obsolete line folding"));
        }
        let Some((k, v)) = l.split_once(':') else {
            return Err((400, "bad header line"));
        };
        if k.is_empty() || k.ends_with([' ', '\t']) {
            return Err((400, "whitespace before a header's colon"));
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
                if !v.eq_ignore_ascii_case("chunked") {
                    return Err((501, "only chunked transfer coding"));
                }
                chunked = true;
            }
            "expect" => h.expect_continue = v.eq_ignore_ascii_case("100-continue"),
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
                    match buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
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
                    let l = String::from_utf8_lossy(line).into_owned();
                    let hex = l.trim_end_matches('\r').split(';').next().unwrap_or("").trim_end_matches([' ', '\t']);
                    let size = Some(hex)
                        .filter(|h| !h.is_empty() && h.len() <= 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                        .and_then(|h| u64::from_str_radix(h, 16).ok());
                    match size.ok_or(()) {
                        Ok(0) => self.state = State::Trailers(Vec::new()),
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
                State::Trailers(line) => {
                    let b = data[i];
                    i += 1;
                    if b != b'\n' {
                        if line.len() > MAX_HEAD {
                            ev.push(Event::Bad(431, "trailers too large"));
                            self.state = State::Failed;
                        } else {
                            line.push(b);
                        }
                        continue;
                    }
                    if line.is_empty() || line == b"\r" {
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
        assert_eq!(bad[0].0, 505);
        let big = vec![b'a'; MAX_HEAD + 10];
        let (_, _, bad) = run(&big, 4096);
        assert_eq!(bad[0].0, 431);
    }
}
