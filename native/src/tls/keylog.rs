//! NSS key log files (`SSLKEYLOGFILE`): the secrets a TLS endpoint wrote down, by the
//! connection they belong to.
//!
//! Every line form Wireshark's TLS dissector reads for the versions we decrypt:
//!
//! - `CLIENT_RANDOM <client random> <master secret>` (TLS 1.2, OpenSSL, NSS, Go, Python)
//! - `RSA Session-ID:<session id> Master-Key:<master secret>` (TLS 1.2, keyed by the
//!   session id; what the `extract-tls-secrets` Java agent writes)
//! - `PMS_CLIENT_RANDOM <client random> <pre-master secret>` (TLS 1.2, any key exchange)
//! - `RSA <first 8 bytes of the encrypted pre-master secret> <pre-master secret>` (TLS 1.2
//!   RSA key exchange, matched on the ClientKeyExchange)
//! - `CLIENT_HANDSHAKE_TRAFFIC_SECRET`, `SERVER_HANDSHAKE_TRAFFIC_SECRET`,
//!   `CLIENT_TRAFFIC_SECRET_0`, `SERVER_TRAFFIC_SECRET_0` `<client random> <secret>` (TLS 1.3)
//!
//! The master secret of a pre-master line is derived when the connection's handshake is
//! read (`conn`: RFC 5246 8.1, or the extended master secret of RFC 7627). Other labels
//! (`EXPORTER_SECRET`, `EARLY_EXPORTER_SECRET`: not record keys; `CLIENT_EARLY_TRAFFIC_SECRET`:
//! 0-RTT data, which Kafka clients do not send; `CLIENT_TRAFFIC_SECRET_N`,
//! `SERVER_TRAFFIC_SECRET_N`: the secret after a KeyUpdate, which OpenSSL 3 logs on each
//! one without saying which generation it is, and which `conn` derives from the first one
//! anyway) are read and left unused; lines that fit no form are counted, never fatal. Text is read incrementally (`KeyLogTail`) so that a
//! live run can pick up lines a client appends while the capture runs.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// Longest secret of a line form we use: TLS 1.2 master secrets are 48 bytes, TLS 1.3
/// traffic secrets the hash length (32 or 48).
const MAX_SECRET: usize = 48;
/// Longest TLS session id (RFC 5246 7.4.1.2).
const MAX_SESSION_ID: usize = 32;
/// Longest pre-master secret: a finite-field Diffie-Hellman shared secret of a 4096-bit
/// group (ECDHE's are 32 to 66 bytes, RSA's 48).
const MAX_PRE_MASTER: usize = 512;
/// A key log line is about 200 characters (a 4096-bit DHE pre-master line 1,100); a
/// longer one is not a key log line (and a file without newlines must not be held whole
/// while waiting for one).
const MAX_LINE: usize = 2048;

/// One secret, at most 48 bytes, kept inline (a key log may hold millions).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Secret {
    len: u8,
    bytes: [u8; MAX_SECRET],
}

impl Secret {
    pub fn new(b: &[u8]) -> Option<Self> {
        if b.is_empty() || b.len() > MAX_SECRET {
            return None;
        }
        let mut bytes = [0u8; MAX_SECRET];
        bytes[..b.len()].copy_from_slice(b);
        Some(Secret {
            len: b.len() as u8,
            bytes,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets are not printed in debug output.
        write!(f, "Secret({} bytes)", self.len)
    }
}

/// The secrets known for one client random.
#[derive(Debug, Default, Clone, Copy)]
pub struct Secrets {
    pub master: Option<Secret>,
    pub client_handshake: Option<Secret>,
    pub server_handshake: Option<Secret>,
    pub client_traffic: Option<Secret>,
    pub server_traffic: Option<Secret>,
}

/// A TLS 1.2 pre-master secret (its master secret depends on the handshake).
#[derive(Clone, PartialEq, Eq)]
pub struct PreMaster(Box<[u8]>);

impl PreMaster {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for PreMaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PreMaster({} bytes)", self.0.len())
    }
}

/// What a key log holds, and what it could not use.
#[derive(Debug, Default, Clone)]
pub struct KeyLog {
    by_random: HashMap<[u8; 32], Secrets>,
    by_session: HashMap<Vec<u8>, Secret>,
    /// `PMS_CLIENT_RANDOM` lines, by client random.
    pre_master_by_random: HashMap<[u8; 32], PreMaster>,
    /// `RSA` pre-master lines, by the first 8 bytes of the encrypted pre-master secret.
    pre_master_by_rsa: HashMap<[u8; 8], PreMaster>,
    /// Lines that fit no form (or carry bad hex).
    pub bad_lines: u64,
    /// Lines of forms read but not used (pre-master secrets, exporter, early data).
    pub unused_lines: u64,
}

/// A parsed line.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    Random(Label, [u8; 32], Secret),
    Session(Vec<u8>, Secret),
    PreMasterRandom([u8; 32], PreMaster),
    PreMasterRsa([u8; 8], PreMaster),
    Unused,
    Blank,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Master,
    ClientHandshake,
    ServerHandshake,
    ClientTraffic,
    ServerTraffic,
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Hex text -> bytes (an even number of digits, at most `max` bytes).
fn hex(text: &str, max: usize) -> Option<Vec<u8>> {
    let t = text.as_bytes();
    if t.is_empty() || !t.len().is_multiple_of(2) || t.len() / 2 > max {
        return None;
    }
    t.chunks(2)
        .map(|p| Some(hex_value(p[0])? << 4 | hex_value(p[1])?))
        .collect()
}

fn random(text: &str) -> Option<[u8; 32]> {
    hex(text, 32)?.try_into().ok()
}

fn parse_line(line: &str) -> Option<Line> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Some(Line::Blank);
    }
    let mut words = line.split_ascii_whitespace();
    let label = words.next()?;
    if label == "RSA" {
        let first = words.next()?;
        if let Some(sid) = first.strip_prefix("Session-ID:") {
            let key = words.next()?.strip_prefix("Master-Key:")?;
            let sid = hex(sid, MAX_SESSION_ID)?;
            let master = Secret::new(&hex(key, MAX_SECRET)?)?;
            return (!sid.is_empty() && master.len == 48).then_some(Line::Session(sid, master));
        }
        // `RSA <first 8 bytes of the encrypted pre-master> <pre-master>`: an RSA key
        // exchange's pre-master secret is 48 bytes (RFC 5246 7.4.7.1).
        let prefix: [u8; 8] = hex(first, 8)?.try_into().ok()?;
        let pms = hex(words.next()?, 48)?;
        return (pms.len() == 48).then(|| Line::PreMasterRsa(prefix, PreMaster(pms.into())));
    }
    let label = match label {
        "CLIENT_RANDOM" => Label::Master,
        "CLIENT_HANDSHAKE_TRAFFIC_SECRET" => Label::ClientHandshake,
        "SERVER_HANDSHAKE_TRAFFIC_SECRET" => Label::ServerHandshake,
        "CLIENT_TRAFFIC_SECRET_0" => Label::ClientTraffic,
        "SERVER_TRAFFIC_SECRET_0" => Label::ServerTraffic,
        "PMS_CLIENT_RANDOM" => {
            let cr = random(words.next()?)?;
            let pms = hex(words.next()?, MAX_PRE_MASTER)?;
            return Some(Line::PreMasterRandom(cr, PreMaster(pms.into())));
        }
        "EXPORTER_SECRET"
        | "CLIENT_EARLY_TRAFFIC_SECRET"
        | "EARLY_EXPORTER_SECRET"
        | "CLIENT_TRAFFIC_SECRET_N"
        | "SERVER_TRAFFIC_SECRET_N" => {
            random(words.next()?)?;
            hex(words.next()?, MAX_SECRET)?;
            return Some(Line::Unused);
        }
        _ => return None,
    };
    let cr = random(words.next()?)?;
    let secret = Secret::new(&hex(words.next()?, MAX_SECRET)?)?;
    if label == Label::Master && secret.len != 48 {
        return None;
    }
    Some(Line::Random(label, cr, secret))
}

impl KeyLog {
    /// Parse the lines of a key log (any mix of forms and of line ends).
    pub fn parse(text: &str) -> Self {
        let mut log = KeyLog::default();
        log.add_text(text);
        log
    }

    pub fn add_text(&mut self, text: &str) {
        for line in text.lines() {
            self.add_line(line);
        }
    }

    fn add_line(&mut self, line: &str) {
        match parse_line(line) {
            None => self.bad_lines += 1,
            Some(Line::Blank) => {}
            Some(Line::Unused) => self.unused_lines += 1,
            Some(Line::Session(sid, master)) => {
                self.by_session.insert(sid, master);
            }
            Some(Line::PreMasterRandom(cr, pms)) => {
                self.pre_master_by_random.insert(cr, pms);
            }
            Some(Line::PreMasterRsa(prefix, pms)) => {
                self.pre_master_by_rsa.insert(prefix, pms);
            }
            Some(Line::Random(label, cr, secret)) => {
                let s = self.by_random.entry(cr).or_default();
                let slot = match label {
                    Label::Master => &mut s.master,
                    Label::ClientHandshake => &mut s.client_handshake,
                    Label::ServerHandshake => &mut s.server_handshake,
                    Label::ClientTraffic => &mut s.client_traffic,
                    Label::ServerTraffic => &mut s.server_traffic,
                };
                *slot = Some(secret);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries() == 0
    }

    /// Client randoms, session ids and encrypted pre-master secrets with secrets.
    pub fn entries(&self) -> usize {
        self.by_random.len()
            + self.by_session.len()
            + self.pre_master_by_random.len()
            + self.pre_master_by_rsa.len()
    }

    pub fn pre_master_by_random(&self, client_random: &[u8; 32]) -> Option<&PreMaster> {
        self.pre_master_by_random.get(client_random)
    }

    pub fn pre_master_by_rsa(&self, encrypted_prefix: &[u8; 8]) -> Option<&PreMaster> {
        self.pre_master_by_rsa.get(encrypted_prefix)
    }

    pub fn by_random(&self, client_random: &[u8; 32]) -> Option<&Secrets> {
        self.by_random.get(client_random)
    }

    pub fn by_session(&self, session_id: &[u8]) -> Option<&Secret> {
        self.by_session.get(session_id)
    }

    /// Take another log's entries (a later source wins for the same key).
    pub fn merge(&mut self, other: &KeyLog) {
        for (cr, s) in &other.by_random {
            let mine = self.by_random.entry(*cr).or_default();
            mine.master = s.master.or(mine.master);
            mine.client_handshake = s.client_handshake.or(mine.client_handshake);
            mine.server_handshake = s.server_handshake.or(mine.server_handshake);
            mine.client_traffic = s.client_traffic.or(mine.client_traffic);
            mine.server_traffic = s.server_traffic.or(mine.server_traffic);
        }
        for (sid, m) in &other.by_session {
            self.by_session.insert(sid.clone(), *m);
        }
        for (cr, pms) in &other.pre_master_by_random {
            self.pre_master_by_random.insert(*cr, pms.clone());
        }
        for (prefix, pms) in &other.pre_master_by_rsa {
            self.pre_master_by_rsa.insert(*prefix, pms.clone());
        }
        self.bad_lines += other.bad_lines;
        self.unused_lines += other.unused_lines;
    }
}

/// A key log file read so far, to be read on as it grows (a client appends a line per
/// handshake). Only whole lines are taken; a line still being written waits.
#[derive(Debug)]
pub struct KeyLogTail {
    pub path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl KeyLogTail {
    pub fn new(path: PathBuf) -> Self {
        KeyLogTail {
            path,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// Read what was appended since the last call into `log`. A file that shrank was
    /// replaced or truncated: it is read again from its start.
    pub fn read_new(&mut self, log: &mut KeyLog) -> std::io::Result<()> {
        let mut file = File::open(&self.path)?;
        let len = file.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        if len == self.offset {
            return Ok(());
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut fresh = Vec::new();
        file.take(len - self.offset).read_to_end(&mut fresh)?;
        self.offset += fresh.len() as u64;
        let mut start = 0;
        for (i, b) in fresh.iter().enumerate() {
            if *b == b'\n' {
                self.partial.extend_from_slice(&fresh[start..i]);
                log.add_line(&String::from_utf8_lossy(&self.partial));
                self.partial.clear();
                start = i + 1;
            }
        }
        self.partial.extend_from_slice(&fresh[start..]);
        if self.partial.len() > MAX_LINE {
            log.bad_lines += 1;
            self.partial.clear();
        }
        Ok(())
    }

    /// The end of the file: a last line without a newline is taken too.
    pub fn finish(&mut self, log: &mut KeyLog) {
        if !self.partial.is_empty() {
            log.add_line(&String::from_utf8_lossy(&self.partial));
            self.partial.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CR: &str = "f8e4d0c1b2a39485766758493a2b1c0d0e0f101112131415161718191a1b1c1d";

    #[test]
    fn every_line_form_is_read() {
        let master = "ab".repeat(48);
        let sid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let text = format!(
            "# a comment\n\nCLIENT_RANDOM {CR} {master}\r\n\
             RSA Session-ID:{sid} Master-Key:{master}\n\
             CLIENT_HANDSHAKE_TRAFFIC_SECRET {CR} {a}\n\
             SERVER_HANDSHAKE_TRAFFIC_SECRET {CR} {b}\n\
             CLIENT_TRAFFIC_SECRET_0 {CR} {c}\n\
             SERVER_TRAFFIC_SECRET_0 {CR} {d}\n\
             EXPORTER_SECRET {CR} {d}\n\
             CLIENT_TRAFFIC_SECRET_N {CR} {a}\n\
             SERVER_TRAFFIC_SECRET_N {CR} {b}\n\
             PMS_CLIENT_RANDOM {CR} {e}\n\
             RSA 0102030405060708 {f}\n\
             RSA 01020304 {f}\n\
             NONSENSE 12 34\nCLIENT_RANDOM zz {master}\n",
            a = "01".repeat(32),
            b = "02".repeat(32),
            c = "03".repeat(48),
            d = "04".repeat(32),
            e = "05".repeat(66),
            f = "06".repeat(48),
        );
        let log = KeyLog::parse(&text);
        let cr: [u8; 32] = hex(CR, 32).unwrap().try_into().unwrap();
        let s = log.by_random(&cr).unwrap();
        assert_eq!(s.master.unwrap().as_bytes(), &[0xab; 48]);
        assert_eq!(s.client_handshake.unwrap().as_bytes(), &[1; 32]);
        assert_eq!(s.server_handshake.unwrap().as_bytes(), &[2; 32]);
        assert_eq!(s.client_traffic.unwrap().as_bytes(), &[3; 48]);
        assert_eq!(s.server_traffic.unwrap().as_bytes(), &[4; 32]);
        let sid = hex(sid, 32).unwrap();
        assert_eq!(log.by_session(&sid).unwrap().as_bytes(), &[0xab; 48]);
        assert_eq!(log.pre_master_by_random(&cr).unwrap().as_bytes(), &[5; 66]);
        let prefix = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(log.pre_master_by_rsa(&prefix).unwrap().as_bytes(), &[6; 48]);
        // the RSA line with a 4-byte prefix fits no form
        assert_eq!(log.bad_lines, 3);
        // EXPORTER_SECRET and OpenSSL's secrets after a KeyUpdate: known, not used (the
        // first traffic secrets stay those of the _0 lines)
        assert_eq!(log.unused_lines, 3);
        assert_eq!(log.entries(), 4);
    }

    #[test]
    fn a_growing_file_is_read_line_by_line() {
        let dir = std::env::temp_dir().join(format!("keylog-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("keys.log");
        let master = "cd".repeat(48);
        std::fs::write(&path, format!("CLIENT_RANDOM {CR} {}", &master[..10])).unwrap();
        let mut log = KeyLog::default();
        let mut tail = KeyLogTail::new(path.clone());
        tail.read_new(&mut log).unwrap();
        assert!(log.is_empty(), "half a line is not taken");
        std::fs::write(&path, format!("CLIENT_RANDOM {CR} {master}\n")).unwrap();
        tail.read_new(&mut log).unwrap();
        assert_eq!(log.entries(), 1);
        assert_eq!(log.bad_lines, 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
