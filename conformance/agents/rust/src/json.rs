// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Just enough JSON for the agent protocol: requests are flat objects of strings, numbers, booleans
//! and null (spec/CONFORMANCE.md); replies are written with `Obj`.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Str(String),
}

pub type Request = BTreeMap<String, Value>;

pub fn parse_object(text: &str) -> Result<Request, String> {
    let mut p = Parser { s: text.as_bytes(), i: 0 };
    p.ws();
    p.eat(b'{')?;
    let mut out = BTreeMap::new();
    p.ws();
    if p.peek() == Some(b'}') {
        return Ok(out);
    }
    loop {
        p.ws();
        let key = p.string()?;
        p.ws();
        p.eat(b':')?;
        p.ws();
        let value = p.value()?;
        out.insert(key, value);
        p.ws();
        match p.next() {
            Some(b',') => continue,
            Some(b'}') => break,
            _ => return Err(format!("expected ',' or '}}' at byte {}", p.i)),
        }
    }
    Ok(out)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn next(&mut self) -> Option<u8> {
        let c = self.peek();
        self.i += 1;
        c
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Result<(), String> {
        if self.next() == Some(c) {
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", c as char, self.i - 1))
        }
    }
    fn string(&mut self) -> Result<String, String> {
        self.eat(b'"')?;
        let mut out = String::new();
        loop {
            match self.next() {
                None => return Err("unterminated string".into()),
                Some(b'"') => return Ok(out),
                Some(b'\\') => match self.next() {
                    Some(b'"') => out.push('"'),
                    Some(b'\\') => out.push('\\'),
                    Some(b'/') => out.push('/'),
                    Some(b'n') => out.push('\n'),
                    Some(b't') => out.push('\t'),
                    Some(b'r') => out.push('\r'),
                    Some(b'u') => {
                        let hex = std::str::from_utf8(self.s.get(self.i..self.i + 4).ok_or("short \\u escape")?)
                            .map_err(|_| "bad \\u escape")?;
                        let code = u32::from_str_radix(hex, 16).map_err(|_| "bad \\u escape")?;
                        out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        self.i += 4;
                    }
                    _ => return Err("bad escape".into()),
                },
                Some(_) => {
                    // Copy one UTF-8 sequence.
                    let start = self.i - 1;
                    while self.peek().is_some_and(|c| c & 0xC0 == 0x80) {
                        self.i += 1;
                    }
                    out.push_str(std::str::from_utf8(&self.s[start..self.i]).map_err(|_| "bad UTF-8")?);
                }
            }
        }
    }
    fn value(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b't') if self.s[self.i..].starts_with(b"true") => {
                self.i += 4;
                Ok(Value::Bool(true))
            }
            Some(b'f') if self.s[self.i..].starts_with(b"false") => {
                self.i += 5;
                Ok(Value::Bool(false))
            }
            Some(b'n') if self.s[self.i..].starts_with(b"null") => {
                self.i += 4;
                Ok(Value::Null)
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                self.i += 1;
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                text.parse().map(Value::Int).map_err(|_| format!("bad integer {text}"))
            }
            _ => Err(format!("unsupported value at byte {} (flat objects of scalars only)", self.i)),
        }
    }
}

/// A reply object under construction, fields in insertion order.
#[derive(Default)]
pub struct Obj(Vec<(String, String)>);

impl Obj {
    pub fn new() -> Obj {
        Obj(Vec::new())
    }
    pub fn raw(mut self, key: &str, json: String) -> Obj {
        self.0.push((key.to_string(), json));
        self
    }
    pub fn int(self, key: &str, v: impl Into<i128>) -> Obj {
        self.raw(key, v.into().to_string())
    }
    pub fn bool(self, key: &str, v: bool) -> Obj {
        self.raw(key, v.to_string())
    }
    pub fn str(self, key: &str, v: &str) -> Obj {
        self.raw(key, quote(v))
    }
    pub fn opt_int(self, key: &str, v: Option<impl Into<i128>>) -> Obj {
        match v {
            Some(v) => self.int(key, v),
            None => self.raw(key, "null".into()),
        }
    }
    pub fn extend(mut self, other: Obj) -> Obj {
        self.0.extend(other.0);
        self
    }
    pub fn render(&self) -> String {
        let body: Vec<String> = self.0.iter().map(|(k, v)| format!("{}:{}", quote(k), v)).collect();
        format!("{{{}}}", body.join(","))
    }
}

pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
