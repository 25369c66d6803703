//! Packet builders and event helpers shared by the TCP stage's tests.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};

use _core::tcp::{Reassembler, TcpConfig};
use _core::types::{Chunk, CloseReason, Counters, Endpoint, Event, Packet};

pub const PSH: u8 = 0x08;

pub fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

pub const CLIENT: u8 = 1;
pub const SERVER: u8 = 2;

/// An owned packet (the stage borrows the payload).
#[derive(Debug, Clone)]
pub struct Pkt {
    pub frame: u64,
    pub ts_ns: i64,
    pub src: Endpoint,
    pub dst: Endpoint,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub payload: Vec<u8>,
    pub missing: u32,
}

impl Pkt {
    pub fn packet(&self) -> Packet<'_> {
        Packet {
            frame: self.frame,
            ts_ns: self.ts_ns,
            src: self.src.0,
            dst: self.dst.0,
            sport: self.src.1,
            dport: self.dst.1,
            seq: self.seq,
            ack: self.ack,
            flags: self.flags,
            payload: &self.payload,
            missing: self.missing,
        }
    }
}

/// Packets of one connection with sequence numbers relative to each side's ISN.
pub struct Conn {
    pub a: Endpoint,
    pub b: Endpoint,
    pub isn_a: u32,
    pub isn_b: u32,
    pub frame: u64,
    pub ts: i64,
}

impl Conn {
    pub fn new(a_port: u16, isn_a: u32, isn_b: u32) -> Conn {
        Conn {
            a: (ip(CLIENT), a_port),
            b: (ip(SERVER), 9092),
            isn_a,
            isn_b,
            frame: 0,
            ts: 0,
        }
    }

    /// `off` counts payload bytes after the SYN; `from_a` picks the sender. Time
    /// advances one microsecond per packet unless `at` is set.
    pub fn pkt(&mut self, from_a: bool, flags: u8, off: u32, data: &[u8]) -> Pkt {
        self.frame += 1;
        self.ts += 1_000;
        let (src, dst, isn) = if from_a {
            (self.a, self.b, self.isn_a)
        } else {
            (self.b, self.a, self.isn_b)
        };
        let seq = if flags & _core::types::SYN != 0 {
            isn
        } else {
            isn.wrapping_add(1).wrapping_add(off)
        };
        Pkt {
            frame: self.frame,
            ts_ns: self.ts,
            src,
            dst,
            seq,
            ack: 0,
            flags,
            payload: data.to_vec(),
            missing: 0,
        }
    }

    /// Ack number of the peer acknowledging `upto` bytes of `of_a`'s side.
    pub fn ack_of(&self, of_a: bool, upto: u32) -> u32 {
        let isn = if of_a { self.isn_a } else { self.isn_b };
        isn.wrapping_add(1).wrapping_add(upto)
    }

    pub fn handshake(&mut self) -> Vec<Pkt> {
        use _core::types::{ACK, SYN};
        let syn = self.pkt(true, SYN, 0, b"");
        let mut syn_ack = self.pkt(false, SYN | ACK, 0, b"");
        syn_ack.ack = self.ack_of(true, 0);
        let mut ack = self.pkt(true, ACK, 0, b"");
        ack.ack = self.ack_of(false, 0);
        vec![syn, syn_ack, ack]
    }
}

pub struct Run {
    pub events: Vec<Event>,
    pub counters: Counters,
    pub streams: Vec<Option<u32>>,
    pub reassembler: Reassembler,
}

pub fn run_with(cfg: TcpConfig, pkts: &[Pkt]) -> Run {
    let mut r = Reassembler::new(cfg);
    let mut counters = Counters::default();
    let mut events = Vec::new();
    let mut streams = Vec::new();
    for p in pkts {
        r.feed(&p.packet(), &mut counters, &mut events);
        streams.push(r.last_stream());
    }
    r.flush(&mut counters, &mut events);
    Run {
        events,
        counters,
        streams,
        reassembler: r,
    }
}

pub fn run(pkts: &[Pkt]) -> Run {
    run_with(TcpConfig::default(), pkts)
}

pub fn chunks(events: &[Event], src: Endpoint) -> Vec<&Chunk> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Chunk(c) if c.src == src => Some(c),
            _ => None,
        })
        .collect()
}

pub fn data_of(events: &[Event], src: Endpoint) -> Vec<u8> {
    chunks(events, src)
        .iter()
        .flat_map(|c| c.data.iter().copied())
        .collect()
}

pub fn closes(events: &[Event]) -> Vec<(u32, CloseReason)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Close(c) => Some((c.stream, c.reason)),
            _ => None,
        })
        .collect()
}

pub fn opens(events: &[Event]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Open(o) => Some(o.stream),
            _ => None,
        })
        .collect()
}

/// Every connection opened once, in index order, and closed once.
pub fn assert_balanced(events: &[Event]) {
    let opened = opens(events);
    assert_eq!(opened, (0..opened.len() as u32).collect::<Vec<_>>());
    let mut closed: Vec<u32> = closes(events).iter().map(|c| c.0).collect();
    closed.sort_unstable();
    assert_eq!(closed, opened);
}
