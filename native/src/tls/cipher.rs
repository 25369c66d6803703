//! Cipher suites, key derivation and record decryption.
//!
//! TLS 1.2 (RFC 5246 5, 6.3; AEAD records RFC 5288, RFC 7905): the key block is
//! PRF(master secret, "key expansion", server random + client random) with the suite's
//! hash; AES-GCM records carry an 8-byte explicit nonce after the 4-byte implicit salt,
//! ChaCha20-Poly1305 records XOR the sequence number into a 12-byte IV.
//! TLS 1.3 (RFC 8446 7.1-7.3): key and IV are HKDF-Expand-Label(traffic secret, "key"/
//! "iv"), the nonce is the IV XOR the sequence number, a KeyUpdate moves the secret on
//! with "traffic upd". The AEADs are ring's, HKDF/HMAC/SHA-2 RustCrypto's; nothing here
//! is hand-rolled beyond the labels and byte layouts the RFCs define.

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey};
use sha2::{Sha256, Sha384};

pub const TAG_LEN: usize = 16;

/// TLS versions as on the wire.
pub const TLS12: u16 = 0x0303;
pub const TLS13: u16 = 0x0304;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aead {
    Aes128Gcm,
    Aes256Gcm,
    ChaCha20Poly1305,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    Sha256,
    Sha384,
}

impl Hash {
    pub fn output_len(self) -> usize {
        match self {
            Hash::Sha256 => 32,
            Hash::Sha384 => 48,
        }
    }
}

/// What decryption needs to know of a negotiated cipher suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suite {
    pub id: u16,
    pub aead: Aead,
    pub hash: Hash,
}

impl Aead {
    fn key_len(self) -> usize {
        match self {
            Aead::Aes128Gcm => 16,
            Aead::Aes256Gcm | Aead::ChaCha20Poly1305 => 32,
        }
    }

    /// TLS 1.2 implicit IV bytes (the GCM salt, or ChaCha's whole IV).
    fn fixed_iv_len(self) -> usize {
        match self {
            Aead::Aes128Gcm | Aead::Aes256Gcm => 4,
            Aead::ChaCha20Poly1305 => 12,
        }
    }

    /// TLS 1.2 explicit nonce bytes at the start of each record.
    pub fn explicit_nonce_len(self) -> usize {
        match self {
            Aead::Aes128Gcm | Aead::Aes256Gcm => 8,
            Aead::ChaCha20Poly1305 => 0,
        }
    }
}

/// The suites we decrypt, by IANA id and negotiated version; None for any other.
pub fn suite(version: u16, id: u16) -> Option<Suite> {
    use Aead::*;
    use Hash::*;
    let (aead, hash) = match (version, id) {
        (TLS13, 0x1301) => (Aes128Gcm, Sha256),
        (TLS13, 0x1302) => (Aes256Gcm, Sha384),
        (TLS13, 0x1303) => (ChaCha20Poly1305, Sha256),
        // ECDHE-ECDSA, ECDHE-RSA, RSA and DHE-RSA key exchange with AES-GCM.
        (TLS12, 0xC02B | 0xC02F | 0x009C | 0x009E) => (Aes128Gcm, Sha256),
        (TLS12, 0xC02C | 0xC030 | 0x009D | 0x009F) => (Aes256Gcm, Sha384),
        // ECDHE-RSA, ECDHE-ECDSA, DHE-RSA with ChaCha20-Poly1305 (RFC 7905).
        (TLS12, 0xCCA8..=0xCCAA) => (ChaCha20Poly1305, Sha256),
        _ => return None,
    };
    Some(Suite { id, aead, hash })
}

/// IANA name of a cipher suite (the report's label), or its hex id.
pub fn suite_name(id: u16) -> String {
    let name = match id {
        0x1301 => "TLS_AES_128_GCM_SHA256",
        0x1302 => "TLS_AES_256_GCM_SHA384",
        0x1303 => "TLS_CHACHA20_POLY1305_SHA256",
        0xC02B => "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        0xC02C => "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        0xC02F => "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        0xC030 => "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        0x009C => "TLS_RSA_WITH_AES_128_GCM_SHA256",
        0x009D => "TLS_RSA_WITH_AES_256_GCM_SHA384",
        0x009E => "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
        0x009F => "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384",
        0xCCA8 => "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        0xCCA9 => "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        0xCCAA => "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        0xC027 => "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
        0xC028 => "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384",
        0xC013 => "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
        0xC014 => "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
        0x002F => "TLS_RSA_WITH_AES_128_CBC_SHA",
        0x0035 => "TLS_RSA_WITH_AES_256_CBC_SHA",
        _ => return format!("0x{id:04X}"),
    };
    name.to_owned()
}

/// Name of a TLS version as the report shows it.
pub fn version_name(v: u16) -> String {
    match v {
        0x0300 => "SSL 3.0".to_owned(),
        0x0301 => "TLS 1.0".to_owned(),
        0x0302 => "TLS 1.1".to_owned(),
        TLS12 => "TLS 1.2".to_owned(),
        TLS13 => "TLS 1.3".to_owned(),
        _ => format!("0x{v:04X}"),
    }
}

/// The decryption state of one direction: key, IV, and where the sequence number is.
pub struct RecordKey {
    /// ring's AEAD (BoringSSL's assembly: AES-NI/VAES with a stitched GHASH, about three
    /// times RustCrypto's aes-gcm 0.10 on 16 KiB records, the bulk of decryption's cost).
    engine: LessSafeKey,
    iv: [u8; 12],
    fixed_iv_len: usize,
    /// TLS 1.3: nonce from IV and sequence number; AAD is the record header.
    tls13: bool,
    pub seq: u64,
}

impl std::fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecordKey(tls13={}, seq={})", self.tls13, self.seq)
    }
}

/// Why a record could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// Shorter than its nonce and tag.
    Short,
    /// Authentication failed: a wrong key, a wrong sequence number or damaged bytes.
    Auth,
}

impl RecordKey {
    fn new(aead: Aead, key: &[u8], iv: &[u8], tls13: bool) -> Option<Self> {
        let algorithm = match aead {
            Aead::Aes128Gcm => &ring::aead::AES_128_GCM,
            Aead::Aes256Gcm => &ring::aead::AES_256_GCM,
            Aead::ChaCha20Poly1305 => &ring::aead::CHACHA20_POLY1305,
        };
        let engine = LessSafeKey::new(UnboundKey::new(algorithm, key).ok()?);
        let mut fixed = [0u8; 12];
        fixed.get_mut(..iv.len())?.copy_from_slice(iv);
        Some(RecordKey {
            engine,
            iv: fixed,
            fixed_iv_len: iv.len(),
            tls13,
            seq: 0,
        })
    }

    /// Decrypt one record (`header` its 5 bytes, `fragment` what follows) and append the
    /// plaintext to `out`; the sequence number moves on only on success. On failure `out`
    /// is left as it was.
    pub fn open(
        &mut self,
        header: &[u8; 5],
        fragment: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), OpenError> {
        self.open_at(self.seq, header, fragment, out)?;
        self.seq = self.seq.wrapping_add(1);
        Ok(())
    }

    /// Bytes a record's fragment has besides its plaintext (explicit nonce and tag).
    pub fn overhead(&self) -> usize {
        self.explicit_len() + TAG_LEN
    }

    fn explicit_len(&self) -> usize {
        if self.tls13 || self.fixed_iv_len == 12 {
            0
        } else {
            8
        }
    }

    /// `open` as record number `seq`, the key's own sequence number left as it is (a
    /// record after a capture hole is tried at each number the hole may have skipped).
    pub fn open_at(
        &self,
        seq: u64,
        header: &[u8; 5],
        fragment: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), OpenError> {
        let explicit = self.explicit_len();
        if fragment.len() < explicit + TAG_LEN {
            return Err(OpenError::Short);
        }
        let mut nonce = [0u8; 12];
        if explicit == 8 {
            // TLS 1.2 GCM: salt || explicit nonce from the record.
            nonce[..4].copy_from_slice(&self.iv[..4]);
            nonce[4..].copy_from_slice(&fragment[..8]);
        } else {
            nonce = self.iv;
            for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
                *n ^= s;
            }
        }
        let body = &fragment[explicit..fragment.len() - TAG_LEN];
        let tag = &fragment[fragment.len() - TAG_LEN..];
        let mut aad13 = [0u8; 5];
        let mut aad12 = [0u8; 13];
        let aad: &[u8] = if self.tls13 {
            aad13.copy_from_slice(header);
            &aad13
        } else {
            aad12[..8].copy_from_slice(&seq.to_be_bytes());
            aad12[8..11].copy_from_slice(&header[..3]);
            aad12[11..].copy_from_slice(&(body.len() as u16).to_be_bytes());
            &aad12
        };
        let start = out.len();
        out.extend_from_slice(body);
        let buf = &mut out[start..];
        let ok = Tag::try_from(tag).ok().and_then(|tag| {
            // Each record's nonce is fresh by construction (sequence number or the
            // record's explicit nonce): decryption never reuses one for sealing.
            let nonce = Nonce::assume_unique_for_key(nonce);
            self.engine
                .open_in_place_separate_tag(nonce, Aad::from(aad), tag, buf, 0..)
                .ok()
        });
        if ok.is_none() {
            out.truncate(start);
            return Err(OpenError::Auth);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- TLS 1.2

fn p_hash<M: Mac + KeyInit + Clone>(secret: &[u8], seed: &[u8], out: &mut [u8]) -> Option<()> {
    let base = <M as Mac>::new_from_slice(secret).ok()?;
    // A(1) = HMAC(secret, seed); each block HMAC(secret, A(i) + seed).
    let mut a = {
        let mut m = base.clone();
        m.update(seed);
        m.finalize().into_bytes()
    };
    let mut filled = 0;
    while filled < out.len() {
        let mut m = base.clone();
        m.update(&a);
        m.update(seed);
        let block = m.finalize().into_bytes();
        let n = block.len().min(out.len() - filled);
        out[filled..filled + n].copy_from_slice(&block[..n]);
        filled += n;
        let mut m = base.clone();
        m.update(&a);
        a = m.finalize().into_bytes();
    }
    Some(())
}

/// The hash of the concatenated `parts`.
pub fn digest(hash: Hash, parts: &[&Vec<u8>]) -> Vec<u8> {
    use sha2::Digest;
    fn run<D: Digest>(parts: &[&Vec<u8>]) -> Vec<u8> {
        let mut d = D::new();
        for p in parts {
            d.update(p);
        }
        d.finalize().to_vec()
    }
    match hash {
        Hash::Sha256 => run::<Sha256>(parts),
        Hash::Sha384 => run::<Sha384>(parts),
    }
}

/// A TLS 1.2 suite whose pre-master secret the client sends RSA-encrypted.
pub fn rsa_key_exchange(id: u16) -> bool {
    matches!(id, 0x009C | 0x009D)
}

/// The TLS 1.2 PRF (RFC 5246 5) with the suite's hash.
pub fn prf12(hash: Hash, secret: &[u8], label: &[u8], seed: &[u8], out: &mut [u8]) -> Option<()> {
    let mut full = Vec::with_capacity(label.len() + seed.len());
    full.extend_from_slice(label);
    full.extend_from_slice(seed);
    match hash {
        Hash::Sha256 => p_hash::<Hmac<Sha256>>(secret, &full, out),
        Hash::Sha384 => p_hash::<Hmac<Sha384>>(secret, &full, out),
    }
}

/// The two directions' record keys of a TLS 1.2 connection: (client -> server, server
/// -> client).
pub fn keys12(
    suite: Suite,
    master: &[u8],
    client_random: &[u8; 32],
    server_random: &[u8; 32],
) -> Option<(RecordKey, RecordKey)> {
    let kl = suite.aead.key_len();
    let il = suite.aead.fixed_iv_len();
    let mut seed = [0u8; 64];
    seed[..32].copy_from_slice(server_random);
    seed[32..].copy_from_slice(client_random);
    // AEAD suites have no MAC keys: client key, server key, client IV, server IV.
    let mut block = vec![0u8; 2 * (kl + il)];
    prf12(suite.hash, master, b"key expansion", &seed, &mut block)?;
    let (ck, rest) = block.split_at(kl);
    let (sk, rest) = rest.split_at(kl);
    let (civ, siv) = rest.split_at(il);
    Some((
        RecordKey::new(suite.aead, ck, civ, false)?,
        RecordKey::new(suite.aead, sk, siv, false)?,
    ))
}

// ---------------------------------------------------------------- TLS 1.3

/// HKDF-Expand-Label(secret, label, "", len) (RFC 8446 7.1).
pub fn expand_label(hash: Hash, secret: &[u8], label: &[u8], out: &mut [u8]) -> Option<()> {
    let mut info = Vec::with_capacity(4 + 6 + label.len());
    info.extend_from_slice(&(out.len() as u16).to_be_bytes());
    info.push((6 + label.len()) as u8);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label);
    info.push(0); // empty context
    match hash {
        Hash::Sha256 => hkdf::Hkdf::<Sha256>::from_prk(secret)
            .ok()?
            .expand(&info, out)
            .ok(),
        Hash::Sha384 => hkdf::Hkdf::<Sha384>::from_prk(secret)
            .ok()?
            .expand(&info, out)
            .ok(),
    }
}

/// The record key of a TLS 1.3 traffic secret.
pub fn key13(suite: Suite, secret: &[u8]) -> Option<RecordKey> {
    if secret.len() != suite.hash.output_len() {
        return None;
    }
    let mut key = [0u8; 32];
    let key = &mut key[..suite.aead.key_len()];
    let mut iv = [0u8; 12];
    expand_label(suite.hash, secret, b"key", key)?;
    expand_label(suite.hash, secret, b"iv", &mut iv)?;
    RecordKey::new(suite.aead, key, &iv, true)
}

/// The traffic secret after a KeyUpdate.
pub fn next_secret13(hash: Hash, secret: &[u8]) -> Option<Vec<u8>> {
    let mut next = vec![0u8; hash.output_len()];
    expand_label(hash, secret, b"traffic upd", &mut next)?;
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    // The peer's side sealed by another implementation (RustCrypto), opened by ring.
    use aes_gcm::aead::AeadInPlace;
    use aes_gcm::Aes128Gcm;

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 8448 3 (simple 1-RTT handshake): the server handshake traffic secret and the
    /// key and IV the RFC derives from it.
    #[test]
    fn tls13_keys_follow_rfc8448() {
        let secret = unhex(
            "b6 7b 7d 69 0c c1 6c 4e 75 e5 42 13 cb 2d 37 b4 e9 c9 12 bc de d9 10 5d 42 be fd 59 d3 91 ad 38",
        );
        let mut key = [0u8; 16];
        let mut iv = [0u8; 12];
        expand_label(Hash::Sha256, &secret, b"key", &mut key).unwrap();
        expand_label(Hash::Sha256, &secret, b"iv", &mut iv).unwrap();
        assert_eq!(
            key.to_vec(),
            unhex("3f ce 51 60 09 c2 17 27 d0 f2 e4 e8 6e e4 03 bc")
        );
        assert_eq!(iv.to_vec(), unhex("5d 31 3e b2 67 12 76 ee 13 00 0b 30"));
    }

    /// The TLS 1.2 PRF test vector for SHA-256 published with the IETF TLS WG mails
    /// (also in Go's and Wireshark's test suites): 100 bytes of output.
    #[test]
    fn tls12_prf_sha256_vector() {
        let secret = unhex("9b be 43 6b a9 40 f0 17 b1 76 52 84 9a 71 db 35");
        let seed = unhex("a0 ba 9f 93 6c da 31 18 27 a6 f7 96 ff d5 19 8c");
        let mut out = [0u8; 100];
        prf12(Hash::Sha256, &secret, b"test label", &seed, &mut out).unwrap();
        let want = unhex(
            "e3 f2 29 ba 72 7b e1 7b 8d 12 26 20 55 7c d4 53 c2 aa b2 1d 07 c3 d4 95 32 9b 52 d4 e6 1e db 5a
             6b 30 17 91 e9 0d 35 c9 c9 a4 6b 4e 14 ba f9 af 0f a0 22 f7 07 7d ef 17 ab fd 37 97 c0 56 4b ab
             4f bc 91 66 6e 9d ef 9b 97 fc e3 4f 79 67 89 ba a4 80 82 d1 22 ee 42 c5 a7 2e 5a 51 10 ff f7 01
             87 34 7b 66",
        );
        assert_eq!(out.to_vec(), want);
    }

    #[test]
    fn a_record_sealed_by_the_peer_opens_once_in_order() {
        let suite = suite(TLS13, 0x1301).unwrap();
        let secret = [7u8; 32];
        let mut opener = key13(suite, &secret).unwrap();
        // Seal with the AEAD directly, as a peer would.
        let mut key = [0u8; 16];
        let mut iv = [0u8; 12];
        expand_label(Hash::Sha256, &secret, b"key", &mut key).unwrap();
        expand_label(Hash::Sha256, &secret, b"iv", &mut iv).unwrap();
        let c = Aes128Gcm::new_from_slice(&key).unwrap();
        let mut body = b"hello\x17".to_vec();
        let header = [0x17, 3, 3, 0, (body.len() + TAG_LEN) as u8];
        let tag = c
            .encrypt_in_place_detached((&iv).into(), &header, &mut body)
            .unwrap();
        body.extend_from_slice(&tag);
        let mut out = Vec::new();
        opener.open(&header, &body, &mut out).unwrap();
        assert_eq!(out, b"hello\x17");
        assert_eq!(opener.seq, 1);
        // The same record again is the wrong sequence number: refused, out untouched.
        assert_eq!(opener.open(&header, &body, &mut out), Err(OpenError::Auth));
        assert_eq!(out, b"hello\x17");
    }
}
