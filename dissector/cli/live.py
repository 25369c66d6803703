"""``kafka-dissector live``: the terminal run of a live capture (view, outputs, signals)."""

from __future__ import annotations

import signal
import sys
import time
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from dissector.cli.common import (
    max_decompressed_option,
    max_frame_option,
    pass_options,
    tls_key_logs,
    tls_keylog_option,
)
from dissector.live.loop import DEFAULT_INTERVAL, LiveCapture, LiveOptions, Tick
from dissector.live.sinks import open_sink
from dissector.live.source import DEFAULT_BUFFER_MIB, DEFAULT_SNAPLEN, LiveError

if TYPE_CHECKING:
    from rich.console import Console


def _install_stop_signals(cap: LiveCapture) -> Callable[[], None]:
    """SIGINT and SIGTERM stop the capture cleanly; returns a function restoring them.

    The first signal asks for a clean stop and puts the previous handlers back, so a
    second Ctrl-C interrupts at once if finishing takes too long.
    """
    previous: dict[int, Any] = {}

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    def handler(signum: int, _frame: types.FrameType | None) -> None:
        cap.stop(signal.Signals(signum).name)
        restore()

    for s in (signal.SIGINT, signal.SIGTERM):
        previous[s] = signal.signal(s, handler)
    return restore


def _console(*, stderr: bool) -> Console:
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        # Logs and pipes: do not wrap or squeeze the table to 80 columns.
        console = Console(stderr=stderr, width=160, soft_wrap=True)
    return console


def run_cli(opts: LiveOptions, output: str | None, view: str) -> LiveCapture:
    """The ``live`` command's loop: capture, refresh the view, write outputs."""
    import pyarrow as pa
    from rich.live import Live

    from dissector.live.view import plain_lines, render

    console = _console(stderr=True)
    cap = LiveCapture(opts)
    try:
        sink = open_sink(output) if output else None
    except LiveError:
        cap.close()
        raise
    restore = _install_stop_signals(cap)
    pending: list[pa.Table] = []
    screen = Live(console=console, auto_refresh=False, transient=False) if view == "rich" else None
    console.print(
        f"capturing on {opts.iface} with filter {opts.filter!r}"
        + (f", writing {opts.write_pcap}" if opts.write_pcap else ""),
        highlight=False,
    )
    try:
        if screen is not None:
            screen.start()
        # Arrow tables from the core to the sink and the view: nothing per pair here.
        for ev in cap.tables():
            if not isinstance(ev, Tick):
                pending.append(ev)
                continue
            if sink is not None and pending:
                sink.write(pa.concat_tables(pending))
            pending = []
            if ev.final:
                break
            snap = cap.snapshot(ev)
            cap.stats_view.roll()
            if screen is not None:
                screen.update(render(snap), refresh=True)
            elif view == "plain":
                for line in plain_lines(snap):
                    console.print(line, highlight=False, markup=False)
    finally:
        if screen is not None:
            screen.stop()
        restore()
        cap.close()
        if sink is not None:
            sink.close()
    return cap


def _final_summary(cap: LiveCapture, output: str | None) -> None:
    from dissector.live.view import render

    console = _console(stderr=False)
    elapsed = time.monotonic() - cap._started
    snap = cap.snapshot(Tick(elapsed, elapsed, final=True), whole_run=True)
    console.print(render(snap))
    unanswered = sum(w.unanswered for w in cap.stats_view.total.values())
    console.print(
        f"{cap.pairs} pairs, {unanswered} unanswered, {cap.flagged} flagged for capture gaps; "
        f"{cap.frames} packets analysed; libpcap dropped {cap.final_stats.dropped}, "
        f"interface dropped {cap.final_stats.if_dropped}",
        highlight=False,
    )
    tls = _tls_line(cap)
    if tls:
        console.print(tls, highlight=False)
    if cap.final_stats.dropped or cap.final_stats.if_dropped:
        console.print(
            "[bold red]packets were lost by the capture: pairs touched by the loss carry the "
            "capture_gap note, responses whose request was lost are orphan_response rows[/]"
        )
    if output:
        console.print(f"wrote {output}", highlight=False)
    if cap.pcap_error:
        console.print(f"[bold red]{cap.pcap_error}: the pcap is incomplete[/]", highlight=False)
    elif cap.options.write_pcap:
        console.print(f"wrote {cap.options.write_pcap} ({cap.frames} frames)", highlight=False)


# A TLS connection's outcome: exactly one of these counts it (native/src/tls).
TLS_OUTCOMES = (
    "tls_decrypted_connections",
    "tls_no_secret",
    "tls_no_handshake",
    "tls_unsupported_version",
    "tls_unsupported_suite",
    "tls_decrypt_failed",
    "tls_capture_gap",
    "tls_bad_record",
    "tls_buffer_limit",
)


def _tls_line(cap: LiveCapture) -> str:
    """TLS connections seen and their outcomes (the counters, by name); empty when
    there was no TLS."""
    c = cap.counters
    if not c["tls_connections"]:
        return ""
    outcomes = ", ".join(f"{name} {c[name]}" for name in TLS_OUTCOMES if c[name])
    return f"TLS connections {c['tls_connections']}: {outcomes}"


@click.command("live")
@click.option(
    "-i", "--interface", "iface", required=True, help="network interface, e.g. eth0 or lo"
)
@click.option("-f", "--filter", "bpf", help="BPF capture filter (default: tcp on the broker ports)")
@click.option(
    "--ports",
    help="broker ports, comma-separated (default: the usual Kafka ports); also sets the filter",
)
@click.option("--duration", type=float, help="stop after this many seconds")
@click.option("--count", type=int, help="stop after this many complete request/response pairs")
@click.option(
    "--interval",
    type=float,
    default=DEFAULT_INTERVAL,
    show_default=True,
    help="seconds between view refreshes",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="write the pairs: .parquet (appended every interval), .csv or .jsonl",
)
@click.option(
    "--write-pcap",
    type=click.Path(dir_okay=False),
    help="also save the captured frames: .pcapng, else pcap",
)
@click.option("--snaplen", type=int, default=DEFAULT_SNAPLEN, show_default=True)
@click.option(
    "--buffer-size",
    "buffer_mib",
    type=int,
    default=DEFAULT_BUFFER_MIB,
    show_default=True,
    help="kernel capture ring, MiB: packets/s x (mean packet + 80 bytes) x the longest "
    "stall to absorb (the default holds about 0.7 s at 300,000 packets/s of Kafka)",
)
@click.option(
    "--view",
    type=click.Choice(["auto", "rich", "plain", "none"]),
    default="auto",
    show_default=True,
    help="live view: rich table on a terminal, plain lines otherwise",
)
@tls_keylog_option
@max_frame_option
@max_decompressed_option
def live_command(
    iface: str,
    bpf: str | None,
    ports: str | None,
    duration: float | None,
    count: int | None,
    interval: float,
    output: str | None,
    write_pcap: str | None,
    snaplen: int,
    buffer_mib: int,
    view: str,
    tls_keylog: tuple[str, ...] = (),
    max_frame: int | None = None,
    max_decompressed: int | None = None,
) -> None:
    """Watch Kafka requests, latency and errors on an interface as they happen.

    Stops on Ctrl-C, SIGTERM, --duration or --count; every completed pair is
    written, requests still open are reported as unanswered.
    """
    if view == "auto":
        view = "rich" if sys.stderr.isatty() else "plain"
    opts = LiveOptions(
        iface=iface,
        bpf=bpf,
        analysis=pass_options(
            ports=ports,
            max_frame=max_frame,
            max_decompressed=max_decompressed,
            # A client appends a line per handshake: the key logs are read on as they grow.
            tls=tls_key_logs(tls_keylog, follow=True),
        ),
        duration=duration,
        count=count,
        interval=interval,
        write_pcap=write_pcap,
        snaplen=snaplen,
        buffer_mib=buffer_mib,
    )
    try:
        cap = run_cli(opts, output, view)
    except LiveError as exc:
        raise click.ClickException(str(exc)) from exc
    _final_summary(cap, output)
