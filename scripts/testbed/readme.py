"""Rewrite captures/README.md from its template, the ledger summary and tshark's counts.

python -m scripts.testbed.readme
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.testbed.summarize import markdown as ledger_markdown
from scripts.testbed.tshark_counts import count
from scripts.testbed.tshark_counts import markdown as tshark_markdown

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = Path(__file__).with_name("captures_readme.md.in")
CAPTURE = REPO_ROOT / "captures" / "kafka-4-mixed.pcapng"
LEDGER = REPO_ROOT / "captures" / "kafka-4-mixed.drivers.json"


def render() -> str:
    doc = json.loads(LEDGER.read_text())
    ports = (doc["broker"]["plaintext_port"], doc["broker"]["sasl_port"])
    counts = count(CAPTURE, ports)
    tshark = (
        tshark_markdown(counts)
        + f"\n\npackets: {counts.packets}, TCP connections: {counts.tcp_streams}"
    )
    return (
        TEMPLATE.read_text()
        .replace("@SIZE@", str(CAPTURE.stat().st_size // 1024))
        .replace("@PACKETS@", str(counts.packets))
        .replace("@SUMMARY@", ledger_markdown(doc))
        .replace("@COUNTS@", tshark)
    )


def main() -> int:
    out = REPO_ROOT / "captures" / "README.md"
    out.write_text(render().rstrip("\n") + "\n")
    print(f"wrote {out.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
