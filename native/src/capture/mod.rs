//! Stage 1: capture files (pcap, pcapng, gzip-compressed either) and link frames -> TCP packets.
//! Its Python twin, the test oracle, is `tests/oracle/capture.py`.
//!
//! Contract:
//! * `PacketReader::new(source)` sniffs the magic (gzip, pcap either byte order / us / ns,
//!   pcapng) of any `Read`, and `next_packet` yields TCP packets in capture order,
//!   counting everything else (non-IP, non-TCP, fragments, truncation, bad timestamps...)
//!   with the Python stage's counter names. Memory is bounded by one read buffer.
//! * `decode_link` turns one link-layer frame into a TCP packet (live capture uses it).
//!
//! Counter names are those of `tests/oracle/capture.py` (see its module docstring), plus the
//! hostile-input ones the Python stage does not have:
//! `bad_timestamp` (pcapng time outside i64 nanoseconds: that packet is skipped, still
//! numbered), `bad_pcapng_option` (an IDB option cut by the block end: ignored),
//! `bad_ip_length` (IP length beyond what the frame had on the wire: captured bytes
//! used, nothing counted missing), `pcapng_interface_limit` (more IDBs in one section
//! than `MAX_INTERFACES`: the extra ones are ignored).
//! `bad_record` also ends a run of `MAX_EMPTY_RUN` records in a row that deliver no
//! packet bytes (a zero-filled tail, a decompression bomb): the rest is not inflated.

pub mod defrag;
pub mod pcap;
pub mod pcapwrite;

use std::io::{Cursor, ErrorKind, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::capture::defrag::{Datagram, Defrag, FragKey, Fragment, TIMEOUT_V4_NS, TIMEOUT_V6_NS};
use crate::counter::Counter;
use crate::cursor::{self, be_u16};
use crate::types::{Counters, Packet, Ts};

/// The file is not a capture we can read (bad magic, unreadable header).
#[derive(Debug)]
pub struct CaptureError(pub String);

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CaptureError {}

// Link types (tcpdump.org LINKTYPE_* values as stored in files).
const LINKTYPE_NULL: u32 = 0;
const LINKTYPE_ETHERNET: u32 = 1;
const LINKTYPE_RAW_BSD12: u32 = 12; // DLT_RAW on some BSDs, seen in files
const LINKTYPE_RAW_BSD14: u32 = 14; // DLT_RAW on OpenBSD, seen in files
const LINKTYPE_RAW: u32 = 101;
const LINKTYPE_LOOP: u32 = 108; // OpenBSD loopback: like NULL but always big-endian
const LINKTYPE_LINUX_SLL: u32 = 113;
const LINKTYPE_IPV4: u32 = 228;
const LINKTYPE_IPV6: u32 = 229;
const LINKTYPE_LINUX_SLL2: u32 = 276;

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86DD;
const ETH_TEB: u16 = 0x6558; // transparent Ethernet bridging: an Ethernet frame inside
const ETH_MPLS_UC: u16 = 0x8847;
const ETH_MPLS_MC: u16 = 0x8848;
const ETH_ERSPAN_2: u16 = 0x88BE; // ERSPAN type I (no header) and II, over GRE
const ETH_ERSPAN_3: u16 = 0x22EB;
// BSD loopback address families meaning IPv6 differ by OS: NetBSD/OpenBSD 24,
// FreeBSD 28, macOS 30.
const NULL_AF_INET: u32 = 2;

const IP_PROTO_IPIP: u8 = 4;
const IP_PROTO_TCP: u8 = 6;
const IP_PROTO_UDP: u8 = 17;
const IP_PROTO_IPV6: u8 = 41;
const IP_PROTO_GRE: u8 = 47;
const UDP_VXLAN: u16 = 4789;
const UDP_GENEVE: u16 = 6081;
/// Encapsulation layers opened in one frame at most (mirror tunnels nest two or three).
pub const MAX_ENCAP_DEPTH: u32 = 8;
const IPV6_FRAGMENT: u8 = 44;
const IPV6_AH: u8 = 51; // length counts 4-byte units, minus 2

/// A larger "captured length" means a corrupt file.
const MAX_RECORD: usize = 64 * 1024 * 1024;
const CHUNK: usize = 1 << 20;
/// Hot counters are kept in fields and published this often.
const COUNT_FLUSH: u64 = 4096;
/// Records in a row without a packet byte, in a gzip-compressed capture, before the
/// rest is judged not a capture: an inflating bomb of empty records does at once (16
/// MiB of zero-length pcap records). An uncompressed file's size bounds the work, so
/// there any number of empty records and blocks is read.
pub const MAX_EMPTY_RUN: u64 = 1 << 20;
/// IDBs kept per pcapng section: EPB interface ids beyond it are unknown interfaces.
pub const MAX_INTERFACES: usize = 1 << 16;

const PCAPNG_SHB: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];
const BOM_LE: [u8; 4] = [0x4D, 0x3C, 0x2B, 0x1A];
const BOM_BE: [u8; 4] = [0x1A, 0x2B, 0x3C, 0x4D];
const GZIP_MAGIC: [u8; 2] = [0x1F, 0x8B];

const BT_IDB: u32 = 1;
const BT_PB: u32 = 2; // obsolete Packet Block
const BT_SPB: u32 = 3;
const BT_EPB: u32 = 6;
const BT_SHB: u32 = 0x0A0D0D0A;
/// Decryption Secrets Block, and its secrets type for a TLS key log ("TLSK").
const BT_DSB: u32 = 0x0A;
const DSB_TLS_KEY_LOG: u32 = 0x544C_534B;
/// Key log text kept from Decryption Secrets Blocks not taken yet.
const MAX_SECRETS_BYTES: usize = 64 << 20;

/// Key log texts of Decryption Secrets Blocks (`PacketReader::take_secrets`).
#[derive(Debug, Default)]
struct Secrets(Vec<String>);
const OPT_IF_TSRESOL: u16 = 9;
const OPT_IF_TSOFFSET: u16 = 14;

const NS_PER_S: i128 = 1_000_000_000;

// ---------------------------------------------------------------------------
// Byte helpers: every read of wire data goes through the bounds-checked `Cursor`; a
// capture file's own fields are in the byte order its header declares (`big`).

#[inline]
fn rd16(d: &[u8], at: usize, big: bool) -> Option<u16> {
    let mut c = cursor::Cursor::new(d, at);
    if big { c.u16() } else { c.u16_le() }.ok()
}

#[inline]
fn rd32(d: &[u8], at: usize, big: bool) -> Option<u32> {
    let mut c = cursor::Cursor::new(d, at);
    if big { c.u32() } else { c.u32_le() }.ok()
}

#[inline]
fn rd64(d: &[u8], at: usize, big: bool) -> Option<u64> {
    let mut c = cursor::Cursor::new(d, at);
    if big { c.u64() } else { c.u64_le() }.ok()
}

// ---------------------------------------------------------------------------
// Frame decoding: link layer -> IP -> TCP

/// A decoded TCP segment whose payload is a range of the frame (or of the datagram
/// reassembled from fragments), so the file reader can decode inside its own buffer and
/// lend the bytes out afterwards.
#[derive(Debug, Clone, Copy)]
struct Segment {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    start: usize,
    end: usize,
    missing: u32,
    /// The payload lies in `LinkDecoder::datagram`, not in the frame.
    reassembled: bool,
}

/// An Ethernet header at `off` -> (ethertype, offset of what it carries), its VLAN tags
/// walked, or None (counted).
fn ethernet(data: &[u8], off: usize, counters: &mut Counters) -> Option<(u16, usize)> {
    match be_u16(data, off + 12) {
        Some(e) => vlan_tags(data, e, off + 14, counters),
        None => {
            counters.inc(Counter::BadLinkHeader);
            None
        }
    }
}

/// 802.1Q / QinQ tags, however many the frame carries (each costs 4 bytes: bounded).
fn vlan_tags(
    data: &[u8],
    mut etype: u16,
    mut off: usize,
    counters: &mut Counters,
) -> Option<(u16, usize)> {
    while matches!(etype, 0x8100 | 0x88A8 | 0x9100 | 0x9200) {
        match be_u16(data, off + 2) {
            Some(inner) => {
                etype = inner;
                off += 4;
            }
            None => {
                counters.inc(Counter::BadLinkHeader);
                return None;
            }
        }
    }
    Some((etype, off))
}

/// Link header -> (ethertype, offset of the network header), or None (counted).
fn link_layer(linktype: u32, data: &[u8], counters: &mut Counters) -> Option<(u16, usize)> {
    let (etype, off) = match linktype {
        LINKTYPE_ETHERNET => return ethernet(data, 0, counters),
        LINKTYPE_LINUX_SLL | LINKTYPE_LINUX_SLL2 => {
            let (off, ppos) = if linktype == LINKTYPE_LINUX_SLL {
                (16, 14)
            } else {
                (20, 0)
            };
            match be_u16(data, ppos) {
                Some(e) if data.len() >= off => (e, off),
                _ => {
                    counters.inc(Counter::BadLinkHeader);
                    return None;
                }
            }
        }
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            let Some(head) = data.get(..4) else {
                counters.inc(Counter::BadLinkHeader);
                return None;
            };
            let head: [u8; 4] = head.try_into().ok()?;
            let family = if linktype == LINKTYPE_LOOP {
                u32::from_be_bytes(head)
            } else {
                // Written in the capturing host's byte order, which the file does not record.
                let le = u32::from_le_bytes(head);
                if le > 0xFFFF {
                    u32::from_be_bytes(head)
                } else {
                    le
                }
            };
            match family {
                NULL_AF_INET => (ETH_IPV4, 4),
                24 | 28 | 30 => (ETH_IPV6, 4),
                _ => {
                    counters.inc(Counter::NonIp);
                    return None;
                }
            }
        }
        LINKTYPE_RAW | LINKTYPE_RAW_BSD12 | LINKTYPE_RAW_BSD14 | LINKTYPE_IPV4 | LINKTYPE_IPV6 => {
            // The version nibble tells IPv4 from IPv6 (228/229 promise one, we still check).
            match ip_version(data, 0) {
                Some(found) => found,
                None => {
                    counters.inc(Counter::BadIpHeader);
                    return None;
                }
            }
        }
        _ => {
            counters.inc(Counter::UnknownLinktype);
            return None;
        }
    };
    vlan_tags(data, etype, off, counters)
}

/// The IP version nibble at `off` -> (ethertype, off).
fn ip_version(data: &[u8], off: usize) -> Option<(u16, usize)> {
    match data.get(off).map(|b| b >> 4) {
        Some(4) => Some((ETH_IPV4, off)),
        Some(6) => Some((ETH_IPV6, off)),
        _ => None,
    }
}

/// A fragment's place in its datagram.
#[derive(Debug, Clone, Copy)]
struct FragInfo {
    id: u32,
    offset: usize,
    more: bool,
    v6: bool,
}

/// An IP header: addresses, what follows it and where (`l4..end`, `end` as the IP
/// length says, possibly past the captured bytes).
#[derive(Debug, Clone, Copy)]
struct IpLayer {
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    l4: usize,
    end: usize,
    frag: Option<FragInfo>,
}

/// IPv4 header at `off`, or None (counted).
fn ipv4(data: &[u8], off: usize, counters: &mut Counters) -> Option<IpLayer> {
    let n = data.len();
    let Some(head) = data.get(off..off + 20) else {
        counters.inc(Counter::BadIpHeader);
        return None;
    };
    let vihl = head[0];
    let mut total = u16::from_be_bytes([head[2], head[3]]) as usize;
    let frag = u16::from_be_bytes([head[6], head[7]]);
    let ihl = (vihl & 0x0F) as usize * 4;
    if total == 0 && ihl >= 20 {
        // TCP segmentation offload captured before segmentation.
        counters.inc(Counter::IpTotalLengthZero);
        total = n - off;
    }
    if vihl >> 4 != 4 || ihl < 20 || n - off < ihl || total < ihl {
        counters.inc(Counter::BadIpHeader);
        return None;
    }
    // More-fragments or an offset: a piece of a datagram (DF alone is not).
    let frag = (frag & 0x3FFF != 0).then(|| FragInfo {
        id: u32::from(u16::from_be_bytes([head[4], head[5]])),
        offset: usize::from(frag & 0x1FFF) * 8,
        more: frag & 0x2000 != 0,
        v6: false,
    });
    Some(IpLayer {
        src: IpAddr::V4(Ipv4Addr::new(head[12], head[13], head[14], head[15])),
        dst: IpAddr::V4(Ipv4Addr::new(head[16], head[17], head[18], head[19])),
        proto: head[9],
        l4: off + ihl,
        end: off + total,
        frag,
    })
}

/// IPv6 extension headers from `l4` (next header `nh`) up to the first that is not one
/// (or a fragment header) -> (next header, its offset, fragment), or None (counted).
fn ipv6_ext(
    data: &[u8],
    mut l4: usize,
    mut nh: u8,
    end: usize,
    counters: &mut Counters,
) -> Option<(u8, usize, Option<FragInfo>)> {
    let n = data.len();
    // Each step moves l4 forward by at least 8 and stops past `end`: bounded.
    loop {
        match nh {
            0 | 43 | 60 | IPV6_AH => {
                let (Some(&next), Some(&len)) = (data.get(l4), data.get(l4 + 1)) else {
                    counters.inc(Counter::BadIpHeader);
                    return None;
                };
                let hlen = if nh == IPV6_AH {
                    (len as usize + 2) * 4
                } else {
                    (len as usize + 1) * 8
                };
                nh = next;
                l4 += hlen;
            }
            IPV6_FRAGMENT => {
                let (Some(&next), Some(offm), Some(id)) =
                    (data.get(l4), be_u16(data, l4 + 2), rd32(data, l4 + 4, true))
                else {
                    counters.inc(Counter::BadIpHeader);
                    return None;
                };
                if l4 + 8 > n {
                    counters.inc(Counter::BadIpHeader);
                    return None;
                }
                nh = next;
                l4 += 8;
                // An "atomic" fragment (offset 0, no more fragments) is a whole packet.
                if offm & 0xFFF9 != 0 {
                    let frag = FragInfo {
                        id,
                        offset: usize::from(offm & 0xFFF8),
                        more: offm & 1 != 0,
                        v6: true,
                    };
                    return Some((nh, l4, Some(frag)));
                }
            }
            _ => return Some((nh, l4, None)),
        }
        if l4 > end {
            counters.inc(Counter::BadIpHeader);
            return None;
        }
    }
}

/// IPv6 header at `off` and its extension headers, or None (counted).
fn ipv6(data: &[u8], off: usize, counters: &mut Counters) -> Option<IpLayer> {
    let n = data.len();
    let head = match data.get(off..off + 40) {
        Some(h) if h[0] >> 4 == 6 => h,
        _ => {
            counters.inc(Counter::BadIpHeader);
            return None;
        }
    };
    let plen = u16::from_be_bytes([head[4], head[5]]) as usize;
    let l4 = off + 40;
    let end = if plen == 0 { n } else { l4 + plen }; // 0: jumbogram or TSO, take the frame
    let src: [u8; 16] = head[8..24].try_into().ok()?;
    let dst: [u8; 16] = head[24..40].try_into().ok()?;
    let (proto, l4, frag) = ipv6_ext(data, l4, head[6], end, counters)?;
    Some(IpLayer {
        src: IpAddr::V6(Ipv6Addr::from(src)),
        dst: IpAddr::V6(Ipv6Addr::from(dst)),
        proto,
        l4,
        end,
        frag,
    })
}

/// A GRE header at `off` (RFC 2784/2890; ERSPAN types I-III ride on it) -> what it
/// carries, or None (counted).
fn gre(data: &[u8], off: usize, counters: &mut Counters) -> Option<(u16, usize)> {
    let (Some(flags), Some(proto)) = (be_u16(data, off), be_u16(data, off + 2)) else {
        counters.inc(Counter::BadTunnelHeader);
        return None;
    };
    if flags & 0x0007 != 0 || flags & 0x4000 != 0 {
        // Version 1 is PPTP's enhanced GRE (PPP inside); source routing is obsolete.
        counters.inc(Counter::NonTcp);
        return None;
    }
    let mut at = off + 4;
    for bit in [0x8000u16, 0x2000, 0x1000] {
        // checksum (+ reserved), key, sequence number: 4 bytes each when present
        if flags & bit != 0 {
            at += 4;
        }
    }
    let seq = flags & 0x1000 != 0;
    match proto {
        ETH_ERSPAN_2 => {
            counters.inc(Counter::TunnelErspan);
            // Type II has an 8-byte header and a sequence number; type I neither.
            ethernet(data, if seq { at + 8 } else { at }, counters)
        }
        ETH_ERSPAN_3 => {
            counters.inc(Counter::TunnelErspan);
            let Some(&last) = data.get(at + 11) else {
                counters.inc(Counter::BadTunnelHeader);
                return None;
            };
            // The O flag announces an 8-byte platform-specific subheader.
            let sub = if last & 1 != 0 { 8 } else { 0 };
            ethernet(data, at + 12 + sub, counters)
        }
        ETH_TEB => {
            counters.inc(Counter::TunnelGre);
            ethernet(data, at, counters)
        }
        _ => {
            counters.inc(Counter::TunnelGre);
            Some((proto, at))
        }
    }
}

/// A UDP datagram at `off`: the payload of a VXLAN or GENEVE tunnel, or None (counted;
/// other UDP is not TCP).
fn udp_tunnel(data: &[u8], off: usize, counters: &mut Counters) -> Option<(u16, usize)> {
    let at = off + 8;
    match be_u16(data, off + 2) {
        Some(UDP_VXLAN) => {
            // RFC 7348: 8 bytes (flags, VNI), then the inner Ethernet frame.
            counters.inc(Counter::TunnelVxlan);
            ethernet(data, at + 8, counters)
        }
        Some(UDP_GENEVE) => {
            // RFC 8926: version, option length in 4-byte words, protocol type, VNI.
            counters.inc(Counter::TunnelGeneve);
            let (Some(&vo), Some(ptype)) = (data.get(at), be_u16(data, at + 2)) else {
                counters.inc(Counter::BadTunnelHeader);
                return None;
            };
            if vo >> 6 != 0 {
                counters.inc(Counter::BadTunnelHeader);
                return None;
            }
            let inner = at + 8 + usize::from(vo & 0x3F) * 4;
            if ptype == ETH_TEB {
                ethernet(data, inner, counters)
            } else {
                Some((ptype, inner))
            }
        }
        _ => {
            counters.inc(Counter::NonTcp);
            None
        }
    }
}

/// An MPLS label stack at `off` -> what its bottom label carries, told by the first
/// nibble as Wireshark does (4: IPv4, 6: IPv6, 0: a pseudowire control word before an
/// Ethernet frame), or None (counted).
fn mpls(data: &[u8], mut off: usize, counters: &mut Counters) -> Option<(u16, usize)> {
    counters.inc(Counter::TunnelMpls);
    // Each label costs 4 bytes: bounded by the frame.
    loop {
        let Some(&bottom) = data.get(off + 2) else {
            counters.inc(Counter::BadTunnelHeader);
            return None;
        };
        off += 4;
        if bottom & 1 != 0 {
            break;
        }
    }
    match data.get(off).map(|b| b >> 4) {
        Some(0) => ethernet(data, off + 4, counters),
        _ => ip_version(data, off).or_else(|| {
            counters.inc(Counter::NonIp);
            None
        }),
    }
}

/// The TCP header at `l4` of an IP packet ending at `end` -> its segment, or None
/// (counted).
///
/// `wire_len` is the frame's length on the wire when the capture records it. It tells
/// a snaplen cut (the IP length fits the wire length: the rest is `missing`) from an IP
/// header that lies (`bad_ip_length`: the captured bytes are all there is). Without it
/// (live frames) every shortfall is taken for a snaplen cut, as `tests/oracle/capture.py` does.
fn tcp_segment(
    data: &[u8],
    ip: &IpLayer,
    l4: usize,
    mut end: usize,
    wire_len: Option<u32>,
    counters: &mut Counters,
) -> Option<Segment> {
    let n = data.len();
    let Some(tcp) = data.get(l4..l4 + 20).filter(|_| end >= l4 + 20) else {
        counters.inc(Counter::BadTcpHeader);
        return None;
    };
    let doff = (tcp[12] >> 4) as usize * 4;
    let start = l4 + doff;
    if doff < 20 || start > end {
        counters.inc(Counter::BadTcpHeader);
        return None;
    }
    let mut missing = 0usize;
    if end > n {
        if wire_len.is_some_and(|w| end > w as usize) {
            // The frame never had these bytes: not a loss, a wrong length field.
            counters.inc(Counter::BadIpLength);
        } else {
            counters.inc(Counter::SnaplenTruncated);
            // Options cut off too: the segment's place in the stream is still known.
            missing = if start > n { end - start } else { end - n };
        }
        end = n;
    }
    let start = start.min(end);
    Some(Segment {
        src: ip.src,
        dst: ip.dst,
        sport: u16::from_be_bytes([tcp[0], tcp[1]]),
        dport: u16::from_be_bytes([tcp[2], tcp[3]]),
        seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
        ack: u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]]),
        flags: tcp[13],
        start,
        end,
        missing: u32::try_from(missing).unwrap_or(u32::MAX),
        reassembled: false,
    })
}

/// Link frames -> TCP segments, through tunnels and IP fragments: the state a capture
/// needs beyond one frame (fragments waiting for the rest of their datagram).
#[derive(Debug, Default)]
pub struct LinkDecoder {
    defrag: Defrag,
    /// The latest datagram reassembled from fragments: its segment's payload lies here.
    datagram: Vec<u8>,
}

impl LinkDecoder {
    /// One link-layer frame -> TCP segment, or None (counted). Tunnels are opened
    /// (VXLAN, GENEVE, GRE with ERSPAN and Ethernet bridging, IP in IP, MPLS) up to
    /// `MAX_ENCAP_DEPTH` layers; the segment has the innermost addresses.
    fn decode(
        &mut self,
        linktype: u32,
        frame: &[u8],
        wire_len: Option<u32>,
        ts: Ts,
        counters: &mut Counters,
    ) -> Option<Segment> {
        let (mut etype, mut off) = link_layer(linktype, frame, counters)?;
        let mut reassembled = false;
        let mut depth = 0;
        // The end of the enclosing packet: an inner one cannot reach past it.
        let mut bound = usize::MAX;
        loop {
            let buf: &[u8] = if reassembled { &self.datagram } else { frame };
            let ip = match etype {
                ETH_IPV4 => ipv4(buf, off, counters)?,
                ETH_IPV6 => ipv6(buf, off, counters)?,
                ETH_MPLS_UC | ETH_MPLS_MC => {
                    (etype, off) = mpls(buf, off, counters)?;
                    depth = self.deeper(depth, counters)?;
                    continue;
                }
                _ => {
                    counters.inc(Counter::NonIp);
                    return None;
                }
            };
            let (mut proto, mut l4, mut end) = (ip.proto, ip.l4, ip.end.min(bound));
            if let Some(frag) = ip.frag {
                let dg = fragment(&mut self.defrag, buf, &ip, frag, end, ts, counters)?;
                self.datagram = dg.payload;
                reassembled = true;
                (proto, l4, end) = (dg.proto, 0, self.datagram.len());
                if frag.v6 {
                    (proto, l4, _) = ipv6_ext(&self.datagram, 0, proto, end, counters)?;
                }
            }
            let buf: &[u8] = if reassembled { &self.datagram } else { frame };
            (etype, off) = match proto {
                IP_PROTO_TCP => {
                    let wire_len = if reassembled { None } else { wire_len };
                    let mut seg = tcp_segment(buf, &ip, l4, end, wire_len, counters)?;
                    seg.reassembled = reassembled;
                    return Some(seg);
                }
                IP_PROTO_IPIP | IP_PROTO_IPV6 => {
                    counters.inc(Counter::TunnelIpInIp);
                    let e = if proto == IP_PROTO_IPIP {
                        ETH_IPV4
                    } else {
                        ETH_IPV6
                    };
                    (e, l4)
                }
                IP_PROTO_GRE => gre(buf, l4, counters)?,
                IP_PROTO_UDP => udp_tunnel(buf, l4, counters)?,
                _ => {
                    counters.inc(Counter::NonTcp);
                    return None;
                }
            };
            bound = end;
            depth = self.deeper(depth, counters)?;
        }
    }

    /// One more layer of encapsulation, unless that is too many.
    fn deeper(&self, depth: u32, counters: &mut Counters) -> Option<u32> {
        if depth >= MAX_ENCAP_DEPTH {
            counters.inc(Counter::TunnelTooDeep);
            return None;
        }
        Some(depth + 1)
    }

    /// The source ended: fragments still waiting are counted.
    pub fn finish(&mut self, counters: &mut Counters) {
        self.defrag.finish(counters);
        self.datagram = Vec::new();
    }

    /// One link-layer frame (tcpdump LINKTYPE_*) -> TCP packet, or None (counted).
    ///
    /// The live entry point: it counts `frames` and `tcp_packets` itself, as
    /// `tests/oracle/capture.py`'s `decode_frames` does; `frame` is the caller's 1-based numbering.
    pub fn decode_link<'a>(
        &'a mut self,
        linktype: u32,
        ts_ns: Ts,
        frame: u64,
        data: &'a [u8],
        counters: &mut Counters,
    ) -> Option<Packet<'a>> {
        counters.inc(Counter::Frames);
        let seg = self.decode(linktype, data, None, ts_ns, counters)?;
        counters.inc(Counter::TcpPackets);
        let bytes = if seg.reassembled {
            &self.datagram
        } else {
            data
        };
        Some(packet(&seg, frame, ts_ns, bytes))
    }
}

/// Hand a fragment to reassembly; its datagram when now complete.
fn fragment(
    defrag: &mut Defrag,
    buf: &[u8],
    ip: &IpLayer,
    frag: FragInfo,
    end: usize,
    ts: Ts,
    counters: &mut Counters,
) -> Option<Datagram> {
    let Some(bytes) = buf.get(ip.l4..end) else {
        // Cut by the snap length (or a length that lies): its bytes cannot be placed.
        counters.inc(Counter::IpFragmentsCut);
        return None;
    };
    let fragment = Fragment {
        key: FragKey {
            src: ip.src,
            dst: ip.dst,
            id: frag.id,
            proto: if frag.v6 { 0 } else { ip.proto },
        },
        proto: ip.proto,
        offset: frag.offset,
        more: frag.more,
        bytes,
        ts,
    };
    let timeout = if frag.v6 {
        TIMEOUT_V6_NS
    } else {
        TIMEOUT_V4_NS
    };
    defrag.add(fragment, timeout, counters)
}

#[inline]
fn packet<'a>(seg: &Segment, frame: u64, ts_ns: Ts, data: &'a [u8]) -> Packet<'a> {
    Packet {
        frame,
        ts_ns,
        src: seg.src,
        dst: seg.dst,
        sport: seg.sport,
        dport: seg.dport,
        seq: seg.seq,
        ack: seg.ack,
        flags: seg.flags,
        payload: data.get(seg.start..seg.end).unwrap_or(&[]),
        missing: seg.missing,
    }
}

// ---------------------------------------------------------------------------
// Record readers

/// pcapng `if_tsresol` and `if_tsoffset` of one interface, as exact integers.
#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    mul: u128, // ns = ticks * mul / div + offset_ns
    div: u128, // u128::MAX stands for "more than any ticks * mul": the quotient is 0
    offset_ns: i128,
}

impl Interface {
    /// Capture time in ns, or None when it does not fit i64 (hostile or corrupt).
    fn ts_ns(&self, ticks: u64) -> Option<Ts> {
        // ticks * mul < 2^64 * 10^9 < 2^94: no overflow in u128, nor in i128 with the
        // offset (|offset| < 2^63 * 10^9 < 2^93).
        let mut scaled = u128::from(ticks) * self.mul;
        if self.div != 1 {
            // Only fractional binary or sub-ns decimal resolutions pay a 128-bit division.
            scaled /= self.div;
        }
        i64::try_from(scaled as i128 + self.offset_ns).ok()
    }
}

/// Map a pcapng if_tsresol byte to an exact (multiplier, divisor) giving ns.
fn tsresol_ratio(value: u8) -> (u128, u128) {
    let exponent = u32::from(value & 0x7F);
    if value & 0x80 != 0 {
        return (1_000_000_000, 1u128 << exponent); // exponent <= 127 fits u128
    }
    if exponent <= 9 {
        return (10u128.pow(9 - exponent), 1);
    }
    (1, 10u128.checked_pow(exponent - 9).unwrap_or(u128::MAX))
}

/// An IDB body (after type and length, trailing length included) -> its interface.
fn parse_idb(body: &[u8], big: bool, counters: &mut Counters) -> Interface {
    let mut iface = Interface {
        linktype: rd16(body, 0, big).map_or(0, u32::from),
        mul: 1000, // default resolution: microseconds
        div: 1,
        offset_ns: 0,
    };
    let end = body.len().saturating_sub(4); // the trailing block length copy
    let mut pos = 8;
    // Each option moves pos by at least 4: bounded by the block.
    while pos + 4 <= end {
        let (Some(code), Some(length)) = (rd16(body, pos, big), rd16(body, pos + 2, big)) else {
            break;
        };
        if code == 0 {
            break;
        }
        let length = length as usize;
        let Some(value) = body
            .get(pos + 4..pos + 4 + length)
            .filter(|_| pos + 4 + length <= end)
        else {
            counters.inc(Counter::BadPcapngOption);
            break;
        };
        if code == OPT_IF_TSRESOL && length >= 1 {
            (iface.mul, iface.div) = tsresol_ratio(value[0]);
        } else if code == OPT_IF_TSOFFSET && length == 8 {
            if let Some(secs) = rd64(value, 0, big) {
                iface.offset_ns = i128::from(secs as i64) * NS_PER_S;
            }
        }
        pos += 4 + ((length + 3) & !3);
    }
    iface
}

/// What one capture file says about where and when it was recorded: the facts that
/// decide whether files chain into one continuous capture (`dissector/wire/sets.py`).
#[derive(Debug, Clone, PartialEq)]
pub struct FileFacts {
    pub format: &'static str,
    /// Link types of the packet records, sorted.
    pub link_types: Vec<u32>,
    /// pcapng: the IDBs (distinct ones, at most `MAX_DESCRIBED`); pcap: one per link
    /// type with the file header's snaplen.
    pub interfaces: Vec<InterfaceFacts>,
    /// Packet records (the frames a run numbers).
    pub records: u64,
    pub first_ts_ns: Option<Ts>,
    pub last_ts_ns: Option<Ts>,
    pub min_ts_ns: Option<Ts>,
    pub max_ts_ns: Option<Ts>,
    /// The file was read only in part (truncated, a bad record, an I/O error).
    pub damaged: bool,
}

/// One capture interface: link type, snaplen (0: none) and name (pcapng `if_name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceFacts {
    pub linktype: u32,
    pub snaplen: u32,
    pub name: Option<String>,
}

/// Interfaces described per file at most: a hostile file cannot grow the list.
const MAX_DESCRIBED: usize = 64;
const OPT_IF_NAME: u16 = 2;

/// An IDB body (after type and length) -> its description; a cut option is ignored
/// (`parse_idb` counts it).
fn describe_idb(body: &[u8], big: bool) -> InterfaceFacts {
    let mut facts = InterfaceFacts {
        linktype: rd16(body, 0, big).map_or(0, u32::from),
        snaplen: rd32(body, 4, big).unwrap_or(0),
        name: None,
    };
    let end = body.len().saturating_sub(4);
    let mut pos = 8;
    while pos + 4 <= end {
        let (Some(code), Some(length)) = (rd16(body, pos, big), rd16(body, pos + 2, big)) else {
            break;
        };
        let length = length as usize;
        let Some(value) = body
            .get(pos + 4..pos + 4 + length)
            .filter(|_| pos + 4 + length <= end)
        else {
            break;
        };
        if code == 0 {
            break;
        }
        if code == OPT_IF_NAME {
            let text = String::from_utf8_lossy(value);
            facts.name = Some(text.trim_end_matches('\0').to_owned());
        }
        pos += 4 + ((length + 3) & !3);
    }
    facts
}

/// The facts of a capture file (see `PacketReader::scan_facts`).
pub fn scan_path(path: impl AsRef<std::path::Path>) -> Result<FileFacts, CaptureError> {
    Ok(open_path(path)?.scan_facts())
}

/// The facts of a capture held in memory. Copies the bytes once: the reader owns its
/// source (a Spark task's content, read once more for the rows).
pub fn scan_slice(data: &[u8]) -> Result<FileFacts, CaptureError> {
    let source: Box<dyn Read + Send> = Box::new(Cursor::new(data.to_vec()));
    Ok(PacketReader::new(source)?.scan_facts())
}

#[derive(Debug, Clone, Copy)]
enum Format {
    Pcap {
        big: bool,
        frac_ns: i64,
        rec_len: usize,
        linktype: u32,
        snaplen: u32,
    },
    Pcapng {
        big: bool,
    },
}

/// One packet record located in the reader's buffer.
#[derive(Debug, Clone, Copy)]
struct Record {
    linktype: u32,
    ts_ns: Option<Ts>,
    start: usize,
    len: usize,
    wire_len: u32,
}

/// Counts the bytes taken from the underlying source (compressed ones for gzip), for
/// progress bars measured against the file size.
struct Counting {
    inner: Box<dyn Read + Send>,
    taken: Arc<AtomicU64>,
}

impl Read for Counting {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(out)?;
        self.taken.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

pub struct PacketReader {
    source: Box<dyn Read + Send>,
    taken: Arc<AtomicU64>,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
    read_failed: bool, // I/O error or corrupt gzip: treated as the end, counted once
    done: bool,
    format: Format,
    interfaces: Vec<Interface>,
    inflating: bool, // gzip: what is read may be far more than the file holds
    decoder: LinkDecoder,
    frame: u64,
    empty_run: u64,
    pending_frames: u64,
    pending_tcp: u64,
    oversize: u64,
    // TLS key logs of Decryption Secrets Blocks, until taken (boxed: most captures have
    // none, and the reader is moved around by value).
    secrets: Option<Box<Secrets>>,
    /// The interfaces' descriptions, kept only by `scan_facts` (None: not collected).
    described: Option<Vec<InterfaceFacts>>,
}

/// Read until `out` is full or the source ends; Interrupted is retried.
fn read_full(src: &mut dyn Read, out: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < out.len() {
        match src.read(&mut out[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn check_header(head: &[u8]) -> Result<Format, CaptureError> {
    let magic: Option<[u8; 4]> = head.get(..4).and_then(|m| m.try_into().ok());
    let pcap = match magic {
        // magic as stored -> (big-endian, ns per fraction unit, record header size)
        Some([0xD4, 0xC3, 0xB2, 0xA1]) => Some((false, 1000, 16)),
        Some([0xA1, 0xB2, 0xC3, 0xD4]) => Some((true, 1000, 16)),
        Some([0x4D, 0x3C, 0xB2, 0xA1]) => Some((false, 1, 16)),
        Some([0xA1, 0xB2, 0x3C, 0x4D]) => Some((true, 1, 16)),
        // Kuznetzov's "modified" pcap: 8 more bytes per record header.
        Some([0x34, 0xCD, 0xB2, 0xA1]) => Some((false, 1000, 24)),
        Some([0xA1, 0xB2, 0xCD, 0x34]) => Some((true, 1000, 24)),
        _ => None,
    };
    if let Some((big, frac_ns, rec_len)) = pcap {
        // The upper bits of the link type field carry FCS info; the type is the low 16.
        let Some(linktype) = rd32(head, 20, big) else {
            return Err(CaptureError(format!(
                "pcap file header is truncated ({} of 24 bytes)",
                head.len()
            )));
        };
        return Ok(Format::Pcap {
            big,
            frac_ns,
            rec_len,
            linktype: linktype & 0xFFFF,
            snaplen: rd32(head, 16, big).unwrap_or(0),
        });
    }
    if magic == Some(PCAPNG_SHB) {
        return match head.get(8..12) {
            Some(b) if b == BOM_LE => Ok(Format::Pcapng { big: false }),
            Some(b) if b == BOM_BE => Ok(Format::Pcapng { big: true }),
            _ => Err(CaptureError(
                "pcapng section header is truncated or has a bad byte order".into(),
            )),
        };
    }
    if head.is_empty() {
        return Err(CaptureError(
            "empty file, not a pcap or pcapng capture".into(),
        ));
    }
    let hex: String = head.iter().take(4).map(|b| format!("{b:02x}")).collect();
    Err(CaptureError(format!(
        "not a pcap or pcapng capture (starts with {hex}, expected pcap magic a1b2c3d4/a1b23c4d or pcapng 0a0d0d0a)"
    )))
}

/// Check that bytes in memory start like a capture (gzip-compressed or not), without
/// keeping a reader for them.
pub fn check_bytes(data: &[u8]) -> Result<(), CaptureError> {
    let mut head = [0u8; 24];
    let got = if data.starts_with(&GZIP_MAGIC) {
        let mut gz = flate2::read::MultiGzDecoder::new(data);
        read_full(&mut gz, &mut head).map_err(|e| CaptureError(format!("cannot read: {e}")))?
    } else {
        let n = data.len().min(head.len());
        head[..n].copy_from_slice(&data[..n]);
        n
    };
    check_header(&head[..got]).map(|_| ())
}

/// Open a capture file (gzip-compressed or not, told by magic).
///
/// Any name the OS gives works (on Unix, any bytes); errors show it with the bytes
/// that are not UTF-8 replaced.
pub fn open_path(path: impl AsRef<std::path::Path>) -> Result<PacketReader, CaptureError> {
    let path = path.as_ref();
    let shown = path.display();
    let file = std::fs::File::open(path)
        .map_err(|e| CaptureError(format!("{shown}: cannot open: {e}")))?;
    PacketReader::new(Box::new(file)).map_err(|e| CaptureError(format!("{shown}: {}", e.0)))
}

impl PacketReader {
    pub fn new(source: Box<dyn Read + Send>) -> Result<Self, CaptureError> {
        let taken = Arc::new(AtomicU64::new(0));
        let mut source: Box<dyn Read + Send> = Box::new(Counting {
            inner: source,
            taken: Arc::clone(&taken),
        });
        let mut head = [0u8; 24];
        let cannot_read = |e: std::io::Error| CaptureError(format!("cannot read: {e}"));
        let mut got = read_full(&mut *source, &mut head).map_err(cannot_read)?;
        let inflating = head[..got].starts_with(&GZIP_MAGIC);
        if inflating {
            let replay = Cursor::new(head[..got].to_vec());
            source = Box::new(flate2::read::MultiGzDecoder::new(replay.chain(source)));
            got = read_full(&mut *source, &mut head).map_err(cannot_read)?;
        }
        let head = &head[..got];
        let format = check_header(head)?;
        let mut buf = vec![0u8; CHUNK];
        // The pcap file header is consumed; a pcapng SHB is read again as a block.
        let keep: &[u8] = if matches!(format, Format::Pcap { .. }) {
            &[]
        } else {
            head
        };
        buf[..keep.len()].copy_from_slice(keep);
        Ok(PacketReader {
            source,
            taken,
            buf,
            pos: 0,
            filled: keep.len(),
            read_failed: false,
            done: false,
            format,
            interfaces: Vec::new(),
            inflating,
            decoder: LinkDecoder::default(),
            frame: 0,
            empty_run: 0,
            pending_frames: 0,
            pending_tcp: 0,
            oversize: 0,
            secrets: None,
            described: None,
        })
    }

    /// TLS key log texts of the Decryption Secrets Blocks read since the last call.
    pub fn take_secrets(&mut self) -> Vec<String> {
        self.secrets.take().map(|s| s.0).unwrap_or_default()
    }

    /// Number packets after `frames_before` (the frames of the earlier files of a
    /// capture set), so that frame numbers run on across the set. Before the first read.
    pub fn set_frames_before(&mut self, frames_before: u64) {
        self.frame = frames_before;
    }

    /// The number of the last frame read (records, packets or not, as numbered).
    pub fn last_frame(&self) -> u64 {
        self.frame
    }

    /// Walk every record, decoding no packet: the facts that decide whether files
    /// chain into one capture (`FileFacts`). Reads the whole file at memory speed
    /// (a record header per packet); damage is counted, never raised.
    pub fn scan_facts(mut self) -> FileFacts {
        let mut counters = Counters::default();
        self.described = Some(Vec::new());
        let (format, snaplen) = match self.format {
            Format::Pcap { snaplen, .. } => ("pcap", Some(snaplen)),
            Format::Pcapng { .. } => ("pcapng", None),
        };
        let mut facts = FileFacts {
            format,
            link_types: Vec::new(),
            interfaces: Vec::new(),
            records: 0,
            first_ts_ns: None,
            last_ts_ns: None,
            min_ts_ns: None,
            max_ts_ns: None,
            damaged: false,
        };
        // A set: a hostile file may cycle through thousands of link types.
        let mut link_types = std::collections::BTreeSet::new();
        let mut last_linktype = None;
        while let Some(rec) = self.next_record(&mut counters) {
            facts.records += 1;
            if last_linktype != Some(rec.linktype) {
                link_types.insert(rec.linktype);
                last_linktype = Some(rec.linktype);
            }
            let Some(ts) = rec.ts_ns else { continue };
            facts.first_ts_ns.get_or_insert(ts);
            facts.last_ts_ns = Some(ts);
            facts.min_ts_ns = Some(facts.min_ts_ns.map_or(ts, |m| m.min(ts)));
            facts.max_ts_ns = Some(facts.max_ts_ns.map_or(ts, |m| m.max(ts)));
        }
        self.finish(&mut counters);
        facts.link_types = link_types.into_iter().collect();
        facts.damaged = [
            Counter::TruncatedFile,
            Counter::BadRecord,
            Counter::ReadError,
        ]
        .into_iter()
        .any(|c| counters.get(c) > 0);
        facts.interfaces = match (self.described.take(), snaplen) {
            (_, Some(snaplen)) => facts
                .link_types
                .iter()
                .map(|&linktype| InterfaceFacts {
                    linktype,
                    snaplen,
                    name: None,
                })
                .collect(),
            (Some(described), None) => described,
            (None, None) => Vec::new(),
        };
        facts
    }

    /// Bytes consumed from the underlying source so far (compressed bytes for gzip).
    pub fn bytes_read(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// The next TCP packet, or None at the end of the capture (or on an unreadable rest,
    /// which is counted, never raised).
    pub fn next_packet(&mut self, counters: &mut Counters) -> Option<Packet<'_>> {
        let (seg, start, len, ts_ns) = loop {
            let Some(rec) = self.next_record(counters) else {
                self.finish(counters);
                return None;
            };
            self.frame += 1;
            self.pending_frames += 1;
            if self.pending_frames >= COUNT_FLUSH {
                self.flush(counters);
            }
            let Some(ts_ns) = rec.ts_ns else {
                counters.inc(Counter::BadTimestamp);
                continue;
            };
            let data = &self.buf[rec.start..rec.start + rec.len];
            let wire_len = Some(rec.wire_len);
            if let Some(seg) = self
                .decoder
                .decode(rec.linktype, data, wire_len, ts_ns, counters)
            {
                self.pending_tcp += 1;
                break (seg, rec.start, rec.len, ts_ns);
            }
        };
        let bytes = if seg.reassembled {
            &self.decoder.datagram
        } else {
            &self.buf[start..start + len]
        };
        Some(packet(&seg, self.frame, ts_ns, bytes))
    }

    /// Publish the counts kept in fields. `next_packet` does it at the end of the
    /// capture; a caller that stops earlier calls it itself.
    pub fn finish(&mut self, counters: &mut Counters) {
        self.flush(counters);
        self.decoder.finish(counters);
        if self.oversize > 0 {
            counters.add(Counter::CaplenExceedsWireLen, self.oversize);
            self.oversize = 0;
        }
        if self.read_failed {
            counters.inc(Counter::ReadError);
            self.read_failed = false;
        }
        self.done = true;
    }

    fn flush(&mut self, counters: &mut Counters) {
        if self.pending_frames > 0 {
            counters.add(Counter::Frames, self.pending_frames);
            self.pending_frames = 0;
        }
        if self.pending_tcp > 0 {
            counters.add(Counter::TcpPackets, self.pending_tcp);
            self.pending_tcp = 0;
        }
    }

    /// Make `n` bytes available at `pos`; false if the source ends (or fails) first.
    fn ensure(&mut self, n: usize, counters: &mut Counters) -> bool {
        let have = self.filled - self.pos;
        if have >= n {
            return true;
        }
        self.buf.copy_within(self.pos..self.filled, 0);
        self.pos = 0;
        self.filled = have;
        if self.done {
            return false;
        }
        // Ask for what capture.py asks for (at least a chunk), so `bytes_read` agrees;
        // but grow the buffer a chunk at a time as bytes arrive, so a block length that
        // promises 64 MiB in a short file costs no 64 MiB.
        let limit = have + (n - have).max(CHUNK);
        while self.filled < n {
            let step_end = limit.min(self.filled + CHUNK);
            if self.buf.len() < step_end {
                self.buf.resize(step_end, 0);
            }
            match self.source.read(&mut self.buf[self.filled..step_end]) {
                Ok(0) => break,
                Ok(k) => {
                    self.filled += k;
                    counters.add(Counter::BytesRead, k as u64);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.read_failed = true;
                    break;
                }
            }
        }
        if self.filled < n {
            self.done = true; // nothing more will come: do not ask the source again
        }
        self.filled >= n
    }

    /// A run of records without packet bytes too long for a real capture ends the file.
    fn note_empty(&mut self, counters: &mut Counters) -> bool {
        if !self.inflating {
            // The file's own size bounds the work: any number of legal blocks is fine.
            return true;
        }
        self.empty_run += 1;
        if self.empty_run > MAX_EMPTY_RUN {
            counters.inc(Counter::BadRecord);
            return false;
        }
        true
    }

    fn next_record(&mut self, counters: &mut Counters) -> Option<Record> {
        if self.done && self.filled == self.pos {
            return None;
        }
        let rec = match self.format {
            Format::Pcap {
                big,
                frac_ns,
                rec_len,
                linktype,
                ..
            } => self.pcap_record(big, frac_ns, rec_len, linktype, counters),
            Format::Pcapng { .. } => self.pcapng_record(counters),
        };
        match rec {
            Some(r) if r.len == 0 && !self.note_empty(counters) => None,
            Some(r) => {
                if r.len > 0 {
                    self.empty_run = 0;
                }
                Some(r)
            }
            None => None,
        }
        .or_else(|| {
            self.stop();
            None
        })
    }

    /// Nothing more is read: the rest of the source is neither parsed nor inflated.
    fn stop(&mut self) {
        self.done = true;
        self.pos = self.filled;
    }

    fn pcap_record(
        &mut self,
        big: bool,
        frac_ns: i64,
        rec_len: usize,
        linktype: u32,
        counters: &mut Counters,
    ) -> Option<Record> {
        if !self.ensure(rec_len, counters) {
            if self.filled > self.pos {
                counters.inc(Counter::TruncatedFile);
            }
            return None;
        }
        let head = &self.buf[self.pos..self.pos + 16];
        let (sec, frac) = (rd32(head, 0, big)?, rd32(head, 4, big)?);
        let (incl, orig) = (rd32(head, 8, big)?, rd32(head, 12, big)?);
        let incl = incl as usize;
        if incl > MAX_RECORD {
            counters.inc(Counter::BadRecord);
            return None;
        }
        if !self.ensure(rec_len + incl, counters) {
            counters.inc(Counter::TruncatedFile);
            return None;
        }
        let start = self.pos + rec_len;
        self.pos = start + incl;
        if incl > orig as usize {
            self.oversize += 1;
        }
        // Both u32: at most ~4.3e18 + 4.3e12, inside i64.
        let ts_ns = i64::from(sec) * 1_000_000_000 + i64::from(frac) * frac_ns;
        Some(Record {
            linktype,
            ts_ns: Some(ts_ns),
            start,
            len: incl,
            wire_len: orig,
        })
    }

    fn pcapng_record(&mut self, counters: &mut Counters) -> Option<Record> {
        // Each pass consumes one block (>= 12 bytes) or returns: bounded by the file,
        // and by MAX_EMPTY_RUN for blocks that deliver nothing.
        loop {
            if !self.ensure(28, counters) && self.filled - self.pos < 12 {
                if self.filled > self.pos {
                    counters.inc(Counter::TruncatedFile);
                }
                return None;
            }
            let Format::Pcapng { mut big } = self.format else {
                return None;
            };
            let p = self.pos;
            let btype = rd32(&self.buf, p, big)?;
            if btype == BT_SHB {
                // The byte-order magic decides how this section (and its length) reads.
                big = match self.buf.get(p + 8..p + 12) {
                    Some(b) if b == BOM_LE => false,
                    Some(b) if b == BOM_BE => true,
                    _ => {
                        counters.inc(Counter::BadRecord);
                        return None;
                    }
                };
                self.format = Format::Pcapng { big };
                self.interfaces.clear();
            }
            let blen = rd32(&self.buf, p + 4, big)? as usize;
            if blen < 12 || !blen.is_multiple_of(4) || blen > MAX_RECORD {
                counters.inc(Counter::BadRecord);
                return None;
            }
            if !self.ensure(blen, counters) {
                counters.inc(Counter::TruncatedFile);
                return None;
            }
            let p = self.pos; // ensure may have moved the block to the buffer's start
            self.pos = p + blen;
            let block = &self.buf[p..p + blen];
            match btype {
                BT_EPB | BT_PB => {
                    if blen < 32 {
                        counters.inc(Counter::BadRecord);
                    } else if let Some(rec) = self.packet_block(btype, p, big, counters) {
                        return Some(rec);
                    }
                }
                BT_SPB => {
                    if blen < 16 {
                        counters.inc(Counter::BadRecord);
                    } else {
                        let iface = self.interface(0, counters);
                        let orig = rd32(block, 8, big)?;
                        counters.inc(Counter::PcapngSimplePacketBlock);
                        let len = (orig as usize).min(blen - 16);
                        // No timestamp in an SPB: ts_ns is 0, as in capture.py.
                        return Some(Record {
                            linktype: iface.linktype,
                            ts_ns: Some(0),
                            start: p + 12,
                            len,
                            wire_len: orig,
                        });
                    }
                }
                BT_IDB => {
                    if blen < 20 {
                        counters.inc(Counter::BadRecord);
                        return None;
                    }
                    let iface = parse_idb(&block[8..], big, counters);
                    if let Some(described) = self.described.as_mut() {
                        let facts = describe_idb(&block[8..], big);
                        if described.len() < MAX_DESCRIBED && !described.contains(&facts) {
                            described.push(facts);
                        }
                    }
                    if self.interfaces.len() < MAX_INTERFACES {
                        self.interfaces.push(iface);
                    } else {
                        counters.inc(Counter::PcapngInterfaceLimit);
                    }
                }
                BT_DSB => self.secrets_block(p, blen, big, counters),
                // Other blocks (name resolution, statistics, custom, ...) carry no packets.
                _ => {}
            }
            if !self.note_empty(counters) {
                return None;
            }
        }
    }

    /// The interface a packet names; one never described (in this section) is counted
    /// and read as the section's first interface, or as Ethernet with microsecond times
    /// (pcapng's default resolution) when there is none.
    fn interface(&self, id: u32, counters: &mut Counters) -> Interface {
        if let Some(iface) = self.interfaces.get(id as usize) {
            return *iface;
        }
        counters.inc(Counter::PcapngUnknownInterface);
        self.interfaces.first().copied().unwrap_or(Interface {
            linktype: LINKTYPE_ETHERNET,
            mul: 1000,
            div: 1,
            offset_ns: 0,
        })
    }

    /// A Decryption Secrets Block at `p` (whole block in the buffer): a TLS key log is
    /// kept for the TLS stage, other kinds of secrets are not used.
    fn secrets_block(&mut self, p: usize, blen: usize, big: bool, counters: &mut Counters) {
        let block = &self.buf[p..p + blen];
        let (Some(kind), Some(len)) = (rd32(block, 8, big), rd32(block, 12, big)) else {
            counters.inc(Counter::BadRecord);
            return;
        };
        let end = 16usize.saturating_add(len as usize);
        let Some(text) = block.get(16..end).filter(|_| end + 4 <= blen) else {
            counters.inc(Counter::BadRecord);
            return;
        };
        if kind != DSB_TLS_KEY_LOG {
            return;
        }
        let text = String::from_utf8_lossy(text).into_owned();
        let secrets = self.secrets.get_or_insert_with(Box::default);
        let held: usize = secrets.0.iter().map(String::len).sum();
        if held + text.len() > MAX_SECRETS_BYTES {
            counters.inc(Counter::TlsSecretsLimit);
            return;
        }
        secrets.0.push(text);
    }

    /// EPB or obsolete PB at `p` (whole block in the buffer, >= 32 bytes) -> its record,
    /// or None (counted) when its length is impossible.
    fn packet_block(
        &mut self,
        btype: u32,
        p: usize,
        big: bool,
        counters: &mut Counters,
    ) -> Option<Record> {
        let block = self.buf.get(p..self.pos)?;
        let iface_id = if btype == BT_PB {
            // Obsolete layout: a 16-bit interface id, then a 16-bit drop count.
            u32::from(rd16(block, 8, big)?)
        } else {
            rd32(block, 8, big)?
        };
        let ts_hi = rd32(block, 12, big)?;
        let ts_lo = rd32(block, 16, big)?;
        let caplen = rd32(block, 20, big)? as usize;
        let orig = rd32(block, 24, big)?;
        if caplen > block.len() - 32 {
            counters.inc(Counter::BadRecord);
            return None;
        }
        if caplen > orig as usize {
            self.oversize += 1;
        }
        let iface = self.interface(iface_id, counters);
        let ticks = (u64::from(ts_hi) << 32) | u64::from(ts_lo);
        Some(Record {
            linktype: iface.linktype,
            ts_ns: iface.ts_ns(ticks),
            start: p + 28,
            len: caplen,
            wire_len: orig,
        })
    }
}
