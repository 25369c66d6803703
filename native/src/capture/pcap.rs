//! libpcap for live capture, loaded when a live capture starts (not linked).
//!
//! Why loaded, not linked (the `pcap` crate links): the core also runs offline analyses
//! and Spark tasks on machines without libpcap; linking would make `import
//! dissector._core` fail there. libpcap's C API is stable across 1.x, and only the few
//! calls below are used. On Linux libpcap reads a memory-mapped TPACKET_V3 ring, so
//! `dispatch` hands over frames without a copy or a system call per packet.
//!
//! Contract: `Handle::open(iface, opts)` creates, configures and activates a handle,
//! with the filter set and non-blocking mode on (errors typed: `PcapError`);
//! `dispatch(max, f)` calls `f(ts_ns, bytes, wire_len)` per frame waiting; `stats()` is
//! libpcap's `pcap_stats`; `devices()` lists interfaces; `check_filter` compiles a
//! filter without a handle (a typo is reported before privileges are).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;

use libloading::Library;

const ERRBUF_SIZE: usize = 256; // PCAP_ERRBUF_SIZE
const DLT_EN10MB: c_int = 1;
// pcap_activate() results (pcap/pcap.h).
const PCAP_ERROR_BREAK: c_int = -2;
const PCAP_ERROR_NO_SUCH_DEVICE: c_int = -5;
const PCAP_ERROR_PERM_DENIED: c_int = -8;
const PCAP_ERROR_IFACE_NOT_UP: c_int = -9;
const PCAP_ERROR_PROMISC_PERM_DENIED: c_int = -11;

/// Shared-object names tried in order: the versioned names first (a runtime package
/// installs only those), then the development link.
const LIBRARY_NAMES: [&str; 4] = [
    "libpcap.so.1",
    "libpcap.so.0.8",
    "libpcap.so",
    "libpcap.dylib",
];

#[repr(C)]
struct Opaque {
    _private: [u8; 0],
}

#[repr(C)]
struct PktHdr {
    ts: libc::timeval,
    caplen: u32,
    len: u32,
}

#[repr(C)]
#[derive(Default)]
struct RawStat {
    ps_recv: c_uint,
    ps_drop: c_uint,
    ps_ifdrop: c_uint,
}

#[repr(C)]
struct BpfProgram {
    bf_len: c_uint,
    bf_insns: *mut c_void,
}

#[repr(C)]
struct PcapIf {
    next: *mut PcapIf,
    name: *mut c_char,
    description: *mut c_char,
    addresses: *mut c_void,
    flags: u32,
}

type Handler = unsafe extern "C" fn(*mut u8, *const PktHdr, *const u8);

/// The libpcap functions used, resolved once per process.
struct Api {
    _lib: Library,
    create: unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut Opaque,
    set_snaplen: unsafe extern "C" fn(*mut Opaque, c_int) -> c_int,
    set_promisc: unsafe extern "C" fn(*mut Opaque, c_int) -> c_int,
    set_timeout: unsafe extern "C" fn(*mut Opaque, c_int) -> c_int,
    set_buffer_size: unsafe extern "C" fn(*mut Opaque, c_int) -> c_int,
    activate: unsafe extern "C" fn(*mut Opaque) -> c_int,
    compile: unsafe extern "C" fn(*mut Opaque, *mut BpfProgram, *const c_char, c_int, u32) -> c_int,
    setfilter: unsafe extern "C" fn(*mut Opaque, *mut BpfProgram) -> c_int,
    freecode: unsafe extern "C" fn(*mut BpfProgram),
    setnonblock: unsafe extern "C" fn(*mut Opaque, c_int, *mut c_char) -> c_int,
    get_selectable_fd: unsafe extern "C" fn(*mut Opaque) -> c_int,
    dispatch: unsafe extern "C" fn(*mut Opaque, c_int, Handler, *mut u8) -> c_int,
    stats: unsafe extern "C" fn(*mut Opaque, *mut RawStat) -> c_int,
    datalink: unsafe extern "C" fn(*mut Opaque) -> c_int,
    geterr: unsafe extern "C" fn(*mut Opaque) -> *const c_char,
    statustostr: unsafe extern "C" fn(c_int) -> *const c_char,
    close: unsafe extern "C" fn(*mut Opaque),
    breakloop: unsafe extern "C" fn(*mut Opaque),
    findalldevs: unsafe extern "C" fn(*mut *mut PcapIf, *mut c_char) -> c_int,
    freealldevs: unsafe extern "C" fn(*mut PcapIf),
    open_dead: unsafe extern "C" fn(c_int, c_int) -> *mut Opaque,
}

/// Why a capture could not start or go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PcapError {
    /// libpcap itself is not installed.
    Missing(String),
    NoSuchDevice(String),
    Permission(String),
    BadFilter(String),
    Other(String),
}

impl std::fmt::Display for PcapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PcapError::Missing(s)
            | PcapError::NoSuchDevice(s)
            | PcapError::Permission(s)
            | PcapError::BadFilter(s)
            | PcapError::Other(s) => f.write_str(s),
        }
    }
}

fn load() -> Result<Api, String> {
    let mut tried = Vec::new();
    for name in LIBRARY_NAMES {
        // SAFETY: loading libpcap runs no initialisers with preconditions of ours.
        match unsafe { Library::new(name) } {
            Ok(lib) => return resolve(lib).map_err(|e| format!("{name}: {e}")),
            Err(e) => tried.push(format!("{name}: {e}")),
        }
    }
    Err(format!(
        "live capture needs libpcap (e.g. apt-get install libpcap0.8): {}",
        tried.join("; ")
    ))
}

fn resolve(lib: Library) -> Result<Api, libloading::Error> {
    // SAFETY: each symbol is libpcap's function with the C signature declared in
    // pcap/pcap.h; the pointers live as long as `_lib`, which `Api` keeps.
    unsafe {
        macro_rules! sym {
            ($name:literal) => {
                *lib.get($name)?
            };
        }
        Ok(Api {
            create: sym!(b"pcap_create\0"),
            set_snaplen: sym!(b"pcap_set_snaplen\0"),
            set_promisc: sym!(b"pcap_set_promisc\0"),
            set_timeout: sym!(b"pcap_set_timeout\0"),
            set_buffer_size: sym!(b"pcap_set_buffer_size\0"),
            activate: sym!(b"pcap_activate\0"),
            compile: sym!(b"pcap_compile\0"),
            setfilter: sym!(b"pcap_setfilter\0"),
            freecode: sym!(b"pcap_freecode\0"),
            setnonblock: sym!(b"pcap_setnonblock\0"),
            get_selectable_fd: sym!(b"pcap_get_selectable_fd\0"),
            dispatch: sym!(b"pcap_dispatch\0"),
            stats: sym!(b"pcap_stats\0"),
            datalink: sym!(b"pcap_datalink\0"),
            geterr: sym!(b"pcap_geterr\0"),
            statustostr: sym!(b"pcap_statustostr\0"),
            close: sym!(b"pcap_close\0"),
            breakloop: sym!(b"pcap_breakloop\0"),
            findalldevs: sym!(b"pcap_findalldevs\0"),
            freealldevs: sym!(b"pcap_freealldevs\0"),
            open_dead: sym!(b"pcap_open_dead\0"),
            _lib: lib,
        })
    }
}

fn api() -> Result<&'static Api, PcapError> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(load)
        .as_ref()
        .map_err(|e| PcapError::Missing(e.clone()))
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libpcap returns NUL-terminated strings that outlive this call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn errbuf_text(buf: &[c_char; ERRBUF_SIZE]) -> String {
    text(buf.as_ptr())
}

fn c_string(s: &str, what: &str) -> Result<CString, PcapError> {
    CString::new(s).map_err(|_| PcapError::Other(format!("{what} holds a NUL byte")))
}

/// The interfaces libpcap can capture on.
pub fn devices() -> Result<Vec<String>, PcapError> {
    let api = api()?;
    let mut errbuf = [0 as c_char; ERRBUF_SIZE];
    let mut first: *mut PcapIf = std::ptr::null_mut();
    // SAFETY: findalldevs fills `first` with a list we free below with freealldevs.
    if unsafe { (api.findalldevs)(&mut first, errbuf.as_mut_ptr()) } != 0 {
        return Err(PcapError::Other(errbuf_text(&errbuf)));
    }
    let mut names = Vec::new();
    let mut at = first;
    while !at.is_null() {
        // SAFETY: `at` walks the list libpcap returned; it stays valid until freed.
        let node = unsafe { &*at };
        names.push(text(node.name));
        at = node.next;
    }
    if !first.is_null() {
        // SAFETY: the list came from findalldevs and is freed once.
        unsafe { (api.freealldevs)(first) };
    }
    Ok(names)
}

/// Compile `bpf` for Ethernet frames without opening an interface.
pub fn check_filter(bpf: &str, snaplen: i32) -> Result<(), PcapError> {
    let api = api()?;
    let expr = c_string(bpf, "the filter")?;
    // SAFETY: a dead handle needs no privileges; it is closed below.
    let dead = unsafe { (api.open_dead)(DLT_EN10MB, snaplen) };
    if dead.is_null() {
        return Err(PcapError::Other("pcap_open_dead failed".into()));
    }
    let mut prog = BpfProgram {
        bf_len: 0,
        bf_insns: std::ptr::null_mut(),
    };
    // SAFETY: `dead` is a live handle, `prog` is freed after a successful compile.
    let result = unsafe {
        if (api.compile)(dead, &mut prog, expr.as_ptr(), 1, 0) != 0 {
            Err(PcapError::BadFilter(text((api.geterr)(dead))))
        } else {
            (api.freecode)(&mut prog);
            Ok(())
        }
    };
    // SAFETY: closed once.
    unsafe { (api.close)(dead) };
    result
}

/// Settings of a live handle.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub snaplen: i32,
    pub buffer_bytes: i32,
    /// How long a partly filled ring block waits before it is handed over.
    pub timeout_ms: i32,
    pub filter: String,
}

/// libpcap's counters: packets received, dropped by the kernel ring, dropped by the
/// interface or driver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub received: u64,
    pub dropped: u64,
    pub if_dropped: u64,
}

/// One activated libpcap handle in non-blocking mode.
pub struct Handle {
    api: &'static Api,
    p: *mut Opaque,
    /// LINKTYPE_* of the frames (the value capture files store).
    pub linktype: u32,
    pub fd: i32,
}

// SAFETY: a handle is used by one thread at a time (it moves to the capture thread);
// libpcap keeps no thread-local state for it.
unsafe impl Send for Handle {}

impl Handle {
    pub fn open(iface: &str, opts: &OpenOptions) -> Result<Handle, PcapError> {
        let api = api()?;
        let name = c_string(iface, "the interface name")?;
        let mut errbuf = [0 as c_char; ERRBUF_SIZE];
        // SAFETY: create returns a handle (closed by Drop) or null with errbuf set.
        let p = unsafe { (api.create)(name.as_ptr(), errbuf.as_mut_ptr()) };
        if p.is_null() {
            return Err(PcapError::Other(format!(
                "cannot capture on {iface}: {}",
                errbuf_text(&errbuf)
            )));
        }
        let mut h = Handle {
            api,
            p,
            linktype: 0,
            fd: -1,
        };
        // SAFETY: `p` is a created, not yet activated handle.
        let status = unsafe {
            (api.set_snaplen)(p, opts.snaplen);
            (api.set_promisc)(p, 0);
            (api.set_timeout)(p, opts.timeout_ms);
            (api.set_buffer_size)(p, opts.buffer_bytes);
            (api.activate)(p)
        };
        if status < 0 {
            return Err(h.activation_error(iface, status));
        }
        h.set_filter(&opts.filter)?;
        // SAFETY: `p` is activated.
        if unsafe { (api.setnonblock)(p, 1, errbuf.as_mut_ptr()) } != 0 {
            return Err(PcapError::Other(errbuf_text(&errbuf)));
        }
        // SAFETY: as above.
        let (dlt, fd) = unsafe { ((api.datalink)(p), (api.get_selectable_fd)(p)) };
        h.linktype = dlt_to_linktype(dlt);
        h.fd = fd;
        Ok(h)
    }

    fn activation_error(&self, iface: &str, status: c_int) -> PcapError {
        // SAFETY: `p` is valid; both return static or handle-owned strings.
        let (status_text, detail) = unsafe {
            (
                text((self.api.statustostr)(status)),
                text((self.api.geterr)(self.p)),
            )
        };
        let reason = if detail.is_empty() {
            status_text
        } else {
            detail
        };
        match status {
            PCAP_ERROR_PERM_DENIED | PCAP_ERROR_PROMISC_PERM_DENIED => {
                PcapError::Permission(format!("no permission to capture on {iface}: {reason}"))
            }
            PCAP_ERROR_NO_SUCH_DEVICE => {
                PcapError::NoSuchDevice(format!("no such network interface: {iface:?}"))
            }
            PCAP_ERROR_IFACE_NOT_UP => {
                PcapError::Other(format!("cannot capture on {iface}: the interface is down"))
            }
            _ if reason.to_lowercase().contains("permission") => {
                PcapError::Permission(format!("no permission to capture on {iface}: {reason}"))
            }
            _ => PcapError::Other(format!("cannot capture on {iface}: {reason}")),
        }
    }

    fn set_filter(&mut self, bpf: &str) -> Result<(), PcapError> {
        let expr = c_string(bpf, "the filter")?;
        let mut prog = BpfProgram {
            bf_len: 0,
            bf_insns: std::ptr::null_mut(),
        };
        // SAFETY: `p` is activated; `prog` is freed once compiled.
        unsafe {
            if (self.api.compile)(self.p, &mut prog, expr.as_ptr(), 1, 0) != 0 {
                return Err(PcapError::BadFilter(text((self.api.geterr)(self.p))));
            }
            let set = (self.api.setfilter)(self.p, &mut prog);
            (self.api.freecode)(&mut prog);
            if set != 0 {
                return Err(PcapError::BadFilter(text((self.api.geterr)(self.p))));
            }
        }
        Ok(())
    }

    /// Hand each waiting frame (at most `max`) to `f(ts_ns, bytes, wire_len)`; `f`
    /// returns false to stop after that frame. Returns the frames handed over (0: none
    /// waiting). A panic in `f` is caught and returned as an error.
    pub fn dispatch<F>(&mut self, max: i32, mut f: F) -> Result<usize, PcapError>
    where
        F: FnMut(i64, &[u8], u32) -> bool,
    {
        struct Ctx<'a, F> {
            f: &'a mut F,
            n: usize,
            stop: bool,
            panicked: bool,
        }
        unsafe extern "C" fn trampoline<F: FnMut(i64, &[u8], u32) -> bool>(
            user: *mut u8,
            hdr: *const PktHdr,
            bytes: *const u8,
        ) {
            // SAFETY: `user` is the Ctx passed to dispatch below, alive for the call;
            // `hdr` and `bytes` are libpcap's, valid during this callback.
            let ctx = unsafe { &mut *user.cast::<Ctx<'_, F>>() };
            if ctx.stop || ctx.panicked {
                return; // frames after a requested stop are not handed over
            }
            let hdr = unsafe { &*hdr };
            let data = unsafe { std::slice::from_raw_parts(bytes, hdr.caplen as usize) };
            // time_t and suseconds_t are 64-bit here; `as` keeps 32-bit platforms building.
            #[allow(clippy::unnecessary_cast)]
            let ts_ns = (hdr.ts.tv_sec as i64) * 1_000_000_000 + (hdr.ts.tv_usec as i64) * 1_000;
            let f = &mut *ctx.f;
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(ts_ns, data, hdr.len)))
            {
                Ok(go_on) => {
                    ctx.n += 1;
                    ctx.stop = !go_on;
                }
                Err(_) => ctx.panicked = true,
            }
        }
        let mut ctx = Ctx {
            f: &mut f,
            n: 0,
            stop: false,
            panicked: false,
        };
        // SAFETY: `p` is activated; the trampoline matches `F`; `ctx` outlives the call.
        let got = unsafe {
            (self.api.dispatch)(
                self.p,
                max,
                trampoline::<F>,
                (&mut ctx as *mut Ctx<'_, F>).cast::<u8>(),
            )
        };
        if ctx.panicked {
            return Err(PcapError::Other("the frame handler panicked".into()));
        }
        if got < 0 && got != PCAP_ERROR_BREAK {
            // SAFETY: `p` is valid.
            return Err(PcapError::Other(text(unsafe { (self.api.geterr)(self.p) })));
        }
        Ok(ctx.n)
    }

    /// Ask a running `dispatch` to return after the current frame.
    pub fn break_loop(&self) {
        // SAFETY: `p` is valid.
        unsafe { (self.api.breakloop)(self.p) }
    }

    pub fn stats(&self) -> Result<Stats, PcapError> {
        let mut s = RawStat::default();
        // SAFETY: `p` is activated; `s` is a pcap_stat.
        if unsafe { (self.api.stats)(self.p, &mut s) } != 0 {
            // SAFETY: `p` is valid.
            return Err(PcapError::Other(text(unsafe { (self.api.geterr)(self.p) })));
        }
        Ok(Stats {
            received: u64::from(s.ps_recv),
            dropped: u64::from(s.ps_drop),
            if_dropped: u64::from(s.ps_ifdrop),
        })
    }

    /// Wait until frames may be waiting or `timeout_ms` passed; true when ready.
    pub fn wait(&self, timeout_ms: i32) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        n > 0
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: closed once; nothing uses `p` afterwards.
        unsafe { (self.api.close)(self.p) }
    }
}

/// libpcap's DLT values that differ from the LINKTYPE values files store (its table).
fn dlt_to_linktype(dlt: c_int) -> u32 {
    match dlt {
        12 | 14 => 101, // DLT_RAW on some platforms -> LINKTYPE_RAW
        other => other as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_typos_are_reported_without_privileges() {
        assert_eq!(check_filter("tcp and (port 9092)", 65535), Ok(()));
        let Err(PcapError::BadFilter(text)) = check_filter("tcp port", 65535) else {
            panic!("a bad filter compiled");
        };
        assert!(text.contains("syntax error"), "{text}");
    }

    #[test]
    fn loopback_is_listed() {
        let names = devices().expect("findalldevs");
        assert!(names.iter().any(|n| n == "lo"), "{names:?}");
    }
}
