//! Hostile and variant inputs of the native capture stage (issue #11), each built here.
//! The ordinary behaviour is compared with the Python stage by tests/test_native_capture.py;
//! these cover what the Python stage does not survive or does differently on purpose.

use std::io::{Cursor, Write};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use _core::capture::{open_path, LinkDecoder, PacketReader, MAX_EMPTY_RUN, MAX_ENCAP_DEPTH};
use _core::counter::Counter;
use _core::types::Counters;

// ---------------------------------------------------------------------------
// Builders (little-endian unless said otherwise)

fn tcp_frame(payload: &[u8], ip_total_extra: u16) -> Vec<u8> {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x08, 0x00]); // IPv4
    let total = (20 + 20 + payload.len()) as u16 + ip_total_extra;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        6,
        0,
        0,
    ]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&[0xC3, 0x50, 0x23, 0x84]); // ports 50000 -> 9092
    f.extend_from_slice(&7u32.to_be_bytes());
    f.extend_from_slice(&9u32.to_be_bytes());
    f.extend_from_slice(&[0x50, 0x18, 0xFF, 0xFF, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    f
}

fn pcap(records: &[(&[u8], u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [0xA1B2C3D4u32, 0x0004_0002, 0, 0, 65535, 1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for (i, (frame, wire)) in records.iter().enumerate() {
        for v in [1_700_000_000 + i as u32, 5, frame.len() as u32, *wire] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(frame);
    }
    out
}

fn block(btype: u32, body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    body.resize(body.len().div_ceil(4) * 4, 0);
    let len = (body.len() + 12) as u32;
    let mut out = btype.to_le_bytes().to_vec();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&len.to_le_bytes());
    out
}

fn shb() -> Vec<u8> {
    let mut body = 0x1A2B3C4Du32.to_le_bytes().to_vec();
    body.extend_from_slice(&[1, 0, 0, 0]);
    body.extend_from_slice(&(-1i64).to_le_bytes());
    block(0x0A0D0D0A, &body)
}

/// IDB for Ethernet with raw option bytes (already padded, end-of-options included or not).
fn idb(options: &[u8]) -> Vec<u8> {
    let mut body = vec![1, 0, 0, 0];
    body.extend_from_slice(&65535u32.to_le_bytes());
    body.extend_from_slice(options);
    block(1, &body)
}

fn opt(code: u16, value: &[u8]) -> Vec<u8> {
    let mut out = code.to_le_bytes().to_vec();
    out.extend_from_slice(&(value.len() as u16).to_le_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().div_ceil(4) * 4, 0);
    out
}

fn epb(iface: u32, ticks: u64, frame: &[u8]) -> Vec<u8> {
    let mut body = iface.to_le_bytes().to_vec();
    body.extend_from_slice(&((ticks >> 32) as u32).to_le_bytes());
    body.extend_from_slice(&(ticks as u32).to_le_bytes());
    body.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    body.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    body.extend_from_slice(frame);
    block(6, &body)
}

/// (frame, ts_ns, payload, missing) of one packet.
type Row = (u64, i64, Vec<u8>, u32);

/// Every packet of a capture, and the counters.
fn read_all(bytes: Vec<u8>) -> (Vec<Row>, Counters) {
    let mut reader = PacketReader::new(Box::new(Cursor::new(bytes))).expect("a capture");
    let mut counters = Counters::default();
    let mut out = Vec::new();
    while let Some(p) = reader.next_packet(&mut counters) {
        out.push((p.frame, p.ts_ns, p.payload.to_vec(), p.missing));
    }
    (out, counters)
}

fn gzip(parts: &[&[u8]]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    for p in parts {
        enc.write_all(p).unwrap();
    }
    enc.finish().unwrap()
}

// ---------------------------------------------------------------------------
// Timestamps that do not fit i64 nanoseconds

#[test]
fn epb_timestamp_overflow_is_counted_and_skipped() {
    let frame = tcp_frame(b"ok", 0);
    let mut file = shb();
    file.extend(idb(&[]));
    file.extend(epb(0, 0x0021_0000u64 << 32, &frame)); // default microseconds: > i64 ns
    file.extend(epb(0, 1_700_000_000_000_000, &frame));
    let (pkts, counters) = read_all(file);
    // The skipped record is still frame 1, as tshark numbers every record.
    assert_eq!(
        pkts,
        vec![(2, 1_700_000_000_000_000_000, b"ok".to_vec(), 0)]
    );
    assert_eq!(counters.get(Counter::BadTimestamp), 1);
    assert_eq!(counters.get(Counter::Frames), 2);
    assert_eq!(counters.get(Counter::TcpPackets), 1);
}

#[test]
fn seconds_resolution_and_huge_offsets_overflow_safely() {
    let frame = tcp_frame(b"x", 0);
    let seconds = opt(9, &[0]);
    let mut file = shb();
    file.extend(idb(&seconds)); // 0: seconds
    file.extend(idb(&opt(14, &(-(1i64 << 62)).to_le_bytes())));
    file.extend(idb(&[
        opt(14, &i64::MAX.to_le_bytes()),
        opt(9, &[0x80 | 127]),
    ]
    .concat()));
    file.extend(idb(&opt(9, &[127]))); // 10^-127 s: every tick rounds to 0 ns
    file.extend(epb(0, 1u64 << 63, &frame));
    file.extend(epb(0, 1_700_000_000, &frame));
    file.extend(epb(1, 5, &frame));
    file.extend(epb(2, u64::MAX, &frame));
    file.extend(epb(3, u64::MAX, &frame));
    let (pkts, counters) = read_all(file);
    let got: Vec<(u64, i64)> = pkts.iter().map(|p| (p.0, p.1)).collect();
    assert_eq!(got, vec![(2, 1_700_000_000_000_000_000), (5, 0)]);
    assert_eq!(counters.get(Counter::BadTimestamp), 3);
}

#[test]
fn idb_option_cut_by_block_end_is_ignored() {
    let frame = tcp_frame(b"x", 0);
    // if_tsoffset announces 8 bytes, the block ends after 4 of them.
    let mut cut = 14u16.to_le_bytes().to_vec();
    cut.extend_from_slice(&8u16.to_le_bytes());
    cut.extend_from_slice(&[1, 2, 3, 4]);
    let mut file = shb();
    file.extend(idb(&[opt(9, &[9]), cut].concat()));
    // An option length of 0xFFFF, far past the block.
    file.extend(idb(&[0x0E, 0x00, 0xFF, 0xFF]));
    file.extend(epb(0, 1_700_000_000_000_000_001, &frame));
    file.extend(epb(1, 1_700_000_000_000_001, &frame));
    let (pkts, counters) = read_all(file);
    let ts: Vec<i64> = pkts.iter().map(|p| p.1).collect();
    // The resolution option before the cut one still applies; the offset does not.
    assert_eq!(
        ts,
        vec![1_700_000_000_000_000_001, 1_700_000_000_000_001_000]
    );
    assert_eq!(counters.get(Counter::BadPcapngOption), 2);
}

// ---------------------------------------------------------------------------
// IP lengths beyond the captured bytes

#[test]
fn ip_length_beyond_capture_is_missing_only_when_the_wire_had_it() {
    let full = tcp_frame(&[b'A'; 100], 0);
    let snapped = &full[..full.len() - 60];
    let liar = tcp_frame(&[b'B'; 40], 500); // IP says 500 more bytes than ever sent
    let liar_cut = &liar[..liar.len() - 10]; // and the record is snaplen-cut as well
    let file = pcap(&[
        (snapped, full.len() as u32),
        (&liar, liar.len() as u32),
        (liar_cut, liar.len() as u32),
    ]);
    let (pkts, counters) = read_all(file);
    let got: Vec<(usize, u32)> = pkts.iter().map(|p| (p.2.len(), p.3)).collect();
    assert_eq!(got, vec![(40, 60), (40, 0), (30, 0)]);
    assert_eq!(counters.get(Counter::SnaplenTruncated), 1);
    assert_eq!(counters.get(Counter::BadIpLength), 2);
}

#[test]
fn live_frames_without_wire_length_count_a_snaplen_cut() {
    let liar = tcp_frame(&[b'B'; 40], 500);
    let mut counters = Counters::default();
    let mut decoder = LinkDecoder::default();
    let p = decoder
        .decode_link(1, 42, 3, &liar, &mut counters)
        .expect("a TCP packet");
    assert_eq!(
        (p.frame, p.ts_ns, p.payload.len(), p.missing),
        (3, 42, 40, 500)
    );
    assert_eq!(p.src, "10.0.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(
        (p.sport, p.dport, p.seq, p.ack, p.flags),
        (50000, 9092, 7, 9, 0x18)
    );
    assert_eq!(counters.get(Counter::SnaplenTruncated), 1);
    assert_eq!(counters.get(Counter::Frames), 1);
    assert_eq!(counters.get(Counter::TcpPackets), 1);
}

#[test]
fn ipv6_extension_header_chain_past_the_frame_is_bad_header() {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(&[0x86, 0xDD, 0x60, 0, 0, 0, 0x00, 0x40, 0, 64]); // plen 64, hop-by-hop
    f.extend_from_slice(&[0u8; 32]);
    // Hop-by-hop says 255*8+8 bytes: past the IPv6 payload length and the frame.
    f.extend_from_slice(&[43, 255, 0, 0, 0, 0, 0, 0]);
    let mut counters = Counters::default();
    assert!(LinkDecoder::default()
        .decode_link(1, 0, 1, &f, &mut counters)
        .is_none());
    assert_eq!(counters.get(Counter::BadIpHeader), 1);
    // Many VLAN tags, then nothing: each tag is checked against the bytes present.
    let mut vlan = vec![0u8; 12];
    for _ in 0..1000 {
        vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
    }
    vlan.extend_from_slice(&[0x81, 0x00]);
    assert!(LinkDecoder::default()
        .decode_link(1, 0, 2, &vlan, &mut counters)
        .is_none());
    assert_eq!(counters.get(Counter::BadLinkHeader), 1);
}

// ---------------------------------------------------------------------------
// Decompression bombs and zero-filled tails

/// A gzip stream that inflates to `head` then `members` x 8 MiB of zeros: one member of
/// zeros, repeated (multi-member gzip), so the test builds it in milliseconds.
fn zero_bomb(head: &[u8], members: usize) -> Vec<u8> {
    let zeros = vec![0u8; 8 << 20];
    let mut out = gzip(&[head, &zeros]);
    let member = gzip(&[&zeros]);
    for _ in 0..members {
        out.extend_from_slice(&member);
    }
    out
}

#[test]
fn gzip_bomb_of_zeros_stops_quickly() {
    let frame = tcp_frame(b"real", 0);
    let head = pcap(&[(&frame, frame.len() as u32)]);
    let mut pcapng_head = shb();
    pcapng_head.extend(idb(&[]));
    pcapng_head.extend(epb(0, 1, &frame));
    for head in [head, pcapng_head] {
        let bomb = zero_bomb(&head, 128); // 1 GiB inflated
        let compressed = bomb.len() as u64;
        let mut reader = PacketReader::new(Box::new(Cursor::new(bomb))).unwrap();
        let mut counters = Counters::default();
        let mut n = 0;
        while reader.next_packet(&mut counters).is_some() {
            n += 1;
        }
        assert_eq!(n, 1);
        assert_eq!(counters.get(Counter::BadRecord), 1);
        // Only the start of the stream was inflated: the work done is bounded by bytes, not
        // measured in seconds (a wall-clock bound failed a debug build on a loaded machine).
        assert!(
            counters.get(Counter::BytesRead) <= 24 << 20,
            "{}",
            counters.get(Counter::BytesRead)
        );
        assert!(reader.bytes_read() < compressed);
    }
}

#[test]
fn zero_length_record_run_is_bounded_but_a_few_are_fine() {
    let frame = tcp_frame(b"x", 0);
    let empty: &[u8] = &[];
    let mut records = vec![(empty, 0u32); 1000];
    records.push((&frame, frame.len() as u32));
    let (pkts, counters) = read_all(pcap(&records));
    assert_eq!(pkts.len(), 1);
    assert_eq!(pkts[0].0, 1001);
    assert_eq!(counters.get(Counter::BadRecord), 0);
    assert_eq!(counters.get(Counter::BadLinkHeader), 1000);

    // Any number in a plain file (its size bounds the work); a compressed one stops.
    let mut records = vec![(empty, 0u32); MAX_EMPTY_RUN as usize + 10];
    records.push((&frame, frame.len() as u32));
    let plain = pcap(&records);
    let (pkts, counters) = read_all(plain.clone());
    assert_eq!(pkts.len(), 1);
    assert_eq!(counters.get(Counter::BadRecord), 0);
    let (pkts, counters) = read_all(gzip(&[&plain]));
    assert!(pkts.is_empty());
    assert_eq!(counters.get(Counter::BadRecord), 1);
    assert_eq!(counters.get(Counter::Frames), MAX_EMPTY_RUN);
}

#[test]
fn pcapng_any_number_of_empty_blocks_before_the_traffic() {
    let frame = tcp_frame(b"x", 0);
    let mut file = shb();
    for _ in 0..70_000 {
        file.extend(idb(&[]));
        file.extend(block(4, &[0, 0, 0, 0])); // an NRB holding only its end marker
    }
    file.extend(epb(0, 1, &frame));
    let (pkts, counters) = read_all(file);
    assert_eq!(pkts.len(), 1);
    assert_eq!(counters.get(Counter::BadRecord), 0);
    assert_eq!(
        counters.get(Counter::PcapngInterfaceLimit),
        70_000 - (1 << 16)
    );
}

#[test]
fn pcapng_packets_on_undeclared_interfaces_are_read_with_defaults() {
    let frame = tcp_frame(b"x", 0);
    let mut file = shb();
    let n = 70_000u32;
    for i in 0..n {
        file.extend(epb(3, u64::from(i), &frame)); // no IDB at all
    }
    let (pkts, counters) = read_all(file);
    assert_eq!(pkts.len(), n as usize);
    assert_eq!(counters.get(Counter::PcapngUnknownInterface), u64::from(n));
    assert_eq!(counters.get(Counter::BadRecord), 0);
    // Microseconds, pcapng's default resolution.
    assert_eq!(pkts[1].1, 1000);
}

#[test]
fn pcapng_counts_caplen_exceeding_the_wire_length() {
    let frame = tcp_frame(b"xyz", 0);
    let mut file = shb();
    file.extend(idb(&[]));
    let mut liar = epb(0, 1, &frame);
    let orig = (frame.len() as u32 - 2).to_le_bytes();
    liar[24..28].copy_from_slice(&orig);
    file.extend(liar);
    file.extend(epb(0, 2, &frame));
    let (pkts, counters) = read_all(file);
    assert_eq!(pkts.len(), 2);
    assert_eq!(counters.get(Counter::CaplenExceedsWireLen), 1);
}

#[test]
fn tunnels_nested_past_the_bound_are_counted_not_followed() {
    // IPv4 in IPv4, a hundred times over, around a TCP segment.
    let inner = tcp_frame(b"deep", 0);
    let mut ip = inner[14..].to_vec();
    for depth in 0..100u32 {
        let mut outer = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 4, 0, 0, 10, 9, 9, 1, 10, 9, 9, 2,
        ];
        let total = (ip.len() + 20) as u16;
        outer[2..4].copy_from_slice(&total.to_be_bytes());
        outer.extend_from_slice(&ip);
        ip = outer;
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&ip);
        let mut counters = Counters::default();
        let mut decoder = LinkDecoder::default();
        let got = decoder.decode_link(1, 0, 1, &f, &mut counters);
        if depth < MAX_ENCAP_DEPTH {
            let p = got.expect("within the bound");
            assert_eq!(p.payload, b"deep");
            assert_eq!(p.src, "10.0.0.1".parse::<IpAddr>().unwrap());
        } else {
            assert!(got.is_none());
            assert_eq!(counters.get(Counter::TunnelTooDeep), 1);
        }
    }
}

#[test]
fn block_length_beyond_a_short_file_is_truncation_not_allocation() {
    let mut file = shb();
    file.extend(idb(&[]));
    file.extend_from_slice(&6u32.to_le_bytes());
    file.extend_from_slice(&(60u32 << 20).to_le_bytes()); // a 60 MiB block, 100 bytes there
    file.extend_from_slice(&[0u8; 100]);
    let (pkts, counters) = read_all(file);
    assert!(pkts.is_empty());
    assert_eq!(counters.get(Counter::TruncatedFile), 1);
}

#[test]
fn cut_gzip_stream_is_a_read_error_after_the_good_packets() {
    let frames: Vec<Vec<u8>> = (0..2000u32)
        .map(|i| tcp_frame(&i.to_le_bytes(), 0))
        .collect();
    let records: Vec<(&[u8], u32)> = frames.iter().map(|f| (&f[..], f.len() as u32)).collect();
    let packed = gzip(&[&pcap(&records)]);
    let (pkts, counters) = read_all(packed[..packed.len() / 2].to_vec());
    assert!(!pkts.is_empty() && pkts.len() < 2000, "{}", pkts.len());
    // The packets before the cut are the file's first ones, in order.
    assert!(pkts
        .iter()
        .enumerate()
        .all(|(i, p)| p.2 == (i as u32).to_le_bytes()));
    assert_eq!(counters.get(Counter::ReadError), 1);
}

#[test]
fn not_a_capture_is_an_error() {
    for (bytes, message) in [
        (&b""[..], "empty file"),
        (b"GET / HTTP/1.1\r\n", "not a pcap or pcapng"),
        (b"\xd4\xc3\xb2\xa1\x02\x00", "header is truncated"),
        (
            b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x11\x22\x33\x44",
            "bad byte order",
        ),
        (b"\x1f\x8b\x08\x00garbage", "cannot read"),
    ] {
        let err = PacketReader::new(Box::new(Cursor::new(bytes.to_vec()))).err();
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains(message), "{text:?} lacks {message:?}");
    }
    let err = open_path("/nonexistent/capture.pcap")
        .err()
        .map(|e| e.to_string());
    assert!(err.unwrap_or_default().contains("cannot open"));
}

// ---------------------------------------------------------------------------
// Random mutations of the bundled real captures

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn bundled() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../captures");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("bundled captures")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().contains(".pcap"))
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn mutate(rng: &mut XorShift, data: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(data.len());
        match rng.below(6) {
            0 | 1 => data[at] ^= 1 << rng.below(8),
            2 => data[at] = rng.next() as u8,
            3 => data.insert(at, rng.next() as u8),
            4 if data.len() > 1 => {
                data.remove(at);
            }
            _ => {
                // A length-like field: a whole little-endian word replaced.
                let word = [0u32, 12, 0xFFFF_FFFF, 0x7FFF_FFFF, 32, 28][rng.below(6)];
                for (i, b) in word.to_le_bytes().iter().enumerate() {
                    if let Some(x) = data.get_mut(at + i) {
                        *x = *b;
                    }
                }
            }
        }
    }
    if rng.below(4) == 0 {
        let keep = rng.below(data.len()) + 1;
        data.truncate(keep);
    }
}

#[test]
fn random_mutations_of_real_captures_never_panic() {
    let originals = bundled();
    assert!(!originals.is_empty());
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut yielded = 0u64;
    for round in 0..2000 {
        let original = &originals[round % originals.len()];
        let mut data = original.clone();
        mutate(&mut rng, &mut data);
        if round % 50 == 0 {
            data = gzip(&[&data]);
            let at = rng.below(data.len());
            data[at] ^= 0x40;
        }
        let Ok(mut reader) = PacketReader::new(Box::new(Cursor::new(data.clone()))) else {
            continue;
        };
        let mut counters = Counters::default();
        let mut n = 0u64;
        while let Some(p) = reader.next_packet(&mut counters) {
            assert!(p.payload.len() <= data.len() || round % 50 == 0);
            n += 1;
        }
        // Every packet is also a frame; nothing yields more packets than records.
        assert_eq!(counters.get(Counter::TcpPackets), n);
        assert!(counters.get(Counter::Frames) >= n);
        assert!(reader.next_packet(&mut counters).is_none());
        yielded += n;
    }
    // The mutations mostly keep the capture readable: the loop did exercise decoding.
    assert!(yielded > 100_000, "{yielded}");
}

// ---------------------------------------------------------------------------
// Facts of a file (capture sets) and frame numbers that run on across a set

fn idb_of(linktype: u16, snaplen: u32, options: &[u8]) -> Vec<u8> {
    let mut body = u32::from(linktype).to_le_bytes().to_vec();
    body.extend_from_slice(&snaplen.to_le_bytes());
    body.extend_from_slice(options);
    block(1, &body)
}

#[test]
fn facts_of_a_pcap_name_its_times_and_snaplen() {
    let frame = tcp_frame(b"abc", 0);
    let rec: (&[u8], u32) = (&frame, frame.len() as u32);
    let mut bytes = pcap(&[rec; 3]);
    let facts = PacketReader::new(Box::new(Cursor::new(bytes.clone())))
        .unwrap()
        .scan_facts();
    assert_eq!(facts.format, "pcap");
    assert_eq!(facts.records, 3);
    assert_eq!(facts.link_types, vec![1]);
    assert_eq!(facts.interfaces.len(), 1);
    assert_eq!(facts.interfaces[0].snaplen, 65535);
    // pcap() stamps record i at 1_700_000_000 + i seconds and 5 us.
    assert_eq!(facts.first_ts_ns, Some(1_700_000_000_000_005_000));
    assert_eq!(facts.max_ts_ns, Some(1_700_000_002_000_005_000));
    assert!(!facts.damaged);
    bytes.truncate(bytes.len() - 2); // the last record cut short
    let cut = PacketReader::new(Box::new(Cursor::new(bytes)))
        .unwrap()
        .scan_facts();
    assert_eq!(cut.records, 2);
    assert!(cut.damaged);
}

#[test]
fn facts_of_a_pcapng_name_its_interfaces_across_sections() {
    let frame = tcp_frame(b"x", 0);
    let mut bytes = shb();
    bytes.extend(idb_of(1, 262144, &[opt(2, b"eth0"), opt(0, b"")].concat()));
    bytes.extend(epb(0, 2_000, &frame));
    bytes.extend(shb()); // a second section: its own interfaces
    bytes.extend(idb_of(113, 0, &opt(2, b"any")));
    bytes.extend(epb(0, 1_000, &frame)); // earlier than the first section's packet
    let facts = PacketReader::new(Box::new(Cursor::new(bytes)))
        .unwrap()
        .scan_facts();
    assert_eq!(facts.format, "pcapng");
    assert_eq!(facts.link_types, vec![1, 113]);
    let names: Vec<_> = facts.interfaces.iter().map(|i| i.name.as_deref()).collect();
    assert_eq!(names, vec![Some("eth0"), Some("any")]);
    assert_eq!(facts.interfaces[0].snaplen, 262144);
    assert_eq!(
        (facts.first_ts_ns, facts.last_ts_ns),
        (Some(2_000_000), Some(1_000_000))
    );
    assert_eq!(
        (facts.min_ts_ns, facts.max_ts_ns),
        (Some(1_000_000), Some(2_000_000))
    );
}

#[test]
fn facts_of_a_file_cycling_through_many_link_types_stay_cheap_and_bounded() {
    // 60,000 interfaces with distinct link types, one packet on each, twice over.
    let frame = tcp_frame(b"x", 0);
    let mut bytes = shb();
    let n = 60_000u32;
    for i in 0..n {
        bytes.extend(idb_of((i % 65_000) as u16, 0, &[]));
    }
    for round in 0..2u64 {
        for i in 0..n {
            bytes.extend(epb(i, round * 10 + 1, &frame));
        }
    }
    let t = Instant::now();
    let facts = PacketReader::new(Box::new(Cursor::new(bytes)))
        .unwrap()
        .scan_facts();
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(facts.records, 2 * u64::from(n));
    assert_eq!(facts.link_types.len(), n as usize);
    assert_eq!(facts.interfaces.len(), 64); // distinct descriptions kept at most
}

#[test]
fn frame_numbers_run_on_after_the_frames_of_earlier_files() {
    let frame = tcp_frame(b"abc", 0);
    let rec: (&[u8], u32) = (&frame, frame.len() as u32);
    let bytes = pcap(&[rec; 2]);
    let mut reader = PacketReader::new(Box::new(Cursor::new(bytes))).unwrap();
    reader.set_frames_before(40);
    let mut counters = Counters::default();
    let mut frames = Vec::new();
    while let Some(p) = reader.next_packet(&mut counters) {
        frames.push(p.frame);
    }
    assert_eq!(frames, vec![41, 42]);
    assert_eq!(reader.last_frame(), 42);
}
