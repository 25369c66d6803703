"""Every example of README.md and docs/*.md is run, or accounted for.

The examples are read out of the documents (fenced ``bash``/``sh``/``python`` blocks and
inline `kafka-dissector ...` spans), not copied here, so an example that is edited or
added is tested as written. ``kafka-dissector`` commands that read captures run on the
bundled ones (placeholders such as ``CAPTURE.pcapng`` stand for them, each optional
``[...]`` part is run once with and once without) in a scratch directory, and must exit 0.
Commands that need what a test run does not have (an interface and root for ``live``, a
Spark cluster, Maven and a JDK, the broker test bed) are checked against their own
``--help``: each option an example uses must exist. The rest (installs, the test runner)
are listed below with why; an example of none of these kinds fails the test.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BUNDLED = "captures/kafka-4-mixed.pcapng"
TIMEOUT_S = 300

TLS_CAPTURE = "captures/tls/tls12-chacha-kafka-python"
# Placeholders of the usage lines -> what the test runs.
PLACEHOLDERS = {
    "capture.pcapng": f"{TLS_CAPTURE}.pcapng",
    # a shell glob of rotated files: here the bundled recording they were cut from
    "ring_*.pcapng": "captures/kafka-4-longpoll-rotation.pcapng",
    "broker-keys.log": f"{TLS_CAPTURE}.broker.keys",
    "keys.log": f"{TLS_CAPTURE}.keys",
    "CAPTURE.pcapng": BUNDLED,
    "CAPTURE...": BUNDLED,
    "CAPTURE": BUNDLED,
    "reports/NAME.html": "reports/name.html",
    "OUT": "out.parquet",
}
# Commands that read captures and write only under the current directory: run.
RUN = ("analyze", "decode", "apis", "report", "anomalies", "codegen")
# Commands whose options are checked against --help, and why they are not run.
HELP_ONLY = {
    "live": "needs a network interface and root (tests/test_live.py runs it on loopback)",
    "spark": "starts a JVM and Spark (tests/test_spark_cli.py runs it)",
    "scripts.specs.generate": "resolves jars with Maven and runs a JDK (its output is checked "
    "against the jars by tests/test_protocol_specs.py)",
    "scripts.testbed.longpoll": "needs the broker test bed running",
    "benchmarks/": "benchmarks take minutes and print figures, they assert nothing",
}
# Neither run nor checked, with why.
NOT_RUN = {
    "python3 -m venv": "the install line: CI runs it through ./scripts/run-tests",
    "./scripts/run-tests": "the test runner itself (what runs this test)",
    "pip install": "an install step",
    "python -m venv": "an install step",
    "venv-pack": "packs a virtualenv for a cluster",
    "spark-submit": "submits to a YARN cluster",
    "python -m pytest": "runs a test file",
}


@dataclass(frozen=True)
class Example:
    doc: str
    line: int
    kind: str  # "shell" or "python"
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def _shell_lines(block: str) -> list[tuple[int, str]]:
    """Logical lines of a shell block (backslash continuations joined), comments dropped."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for i, raw in enumerate(block.splitlines()):
        if not pending:
            start = i
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        text = re.sub(r"\s+#\s.*$", "", text).strip()  # a trailing comment
        if text and not text.startswith("#"):
            out.append((start, text))
    return out


def examples() -> list[Example]:
    found: list[Example] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        name = str(doc.relative_to(ROOT))
        for block in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            first = text[: block.start()].count("\n") + 2
            if block.group(1) in ("bash", "sh"):
                for offset, line in _shell_lines(block.group(2)):
                    found.append(Example(name, first + offset, "shell", line))
            elif block.group(1) == "python":
                found.append(Example(name, first, "python", block.group(2)))
        for span in re.finditer(r"`((?:\S*/)?kafka-dissector [^`]+)`", text):
            if "\n" not in span.group(1):
                line = text[: span.start()].count("\n") + 1
                found.append(Example(name, line, "shell", span.group(1)))
    return found


EXAMPLES = examples()


def _substitute(command: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        command = re.sub(rf"(?<![\w/.]){re.escape(placeholder)}(?![\w.])", value, command)
    return command


def _variants(command: str) -> list[str]:
    """The command without its optional ``[...]`` parts, then with each in turn (of
    ``a|b`` alternatives, the first)."""
    optional = re.findall(r"\[([^\]]+)\]", command)
    bare = re.sub(r"\s*\[[^\]]+\]", "", command)
    out = [bare]
    for part in optional:
        chosen = re.sub(r"(\S+)\|\S+", r"\1", part)
        out.append(command.replace(f"[{part}]", chosen).replace("[", "").replace("]", ""))
    return [re.sub(r"\s*\[[^\]]+\]", "", v) for v in out]


def _cli() -> list[str]:
    return [sys.executable, "-m", "dissector.cli"]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd, check=False
    )


def _dissector_args(command: str) -> list[str] | None:
    """The arguments after ``kafka-dissector`` (any install path), or None."""
    words = shlex.split(command)
    for i, word in enumerate(words):
        if word == "kafka-dissector" or word.endswith("/kafka-dissector"):
            return words[i + 1 :]
    return None


def _options(words: list[str]) -> list[str]:
    return sorted({w.split("=")[0] for w in words if w.startswith("--")})


def _help_text(args: list[str], cwd: Path) -> str:
    proc = _run([*args, "--help"], cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A working directory with the bundled captures, so outputs land in tmp."""
    (tmp_path / "captures").symlink_to(ROOT / "captures")
    return tmp_path


def test_the_documents_have_examples() -> None:
    docs = {e.doc for e in EXAMPLES}
    assert {"README.md", "docs/spark.md"} <= docs
    assert len(EXAMPLES) > 25


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_example(example: Example, scratch: Path) -> None:
    if example.kind == "python":
        _python_example(example, scratch)
        return
    command = _substitute(example.text)
    if command.startswith("python3 -m venv") and "kafka-dissector analyze" in command:
        # the README's first line: the install is CI's; its analyze runs here
        command = command[command.index("kafka-dissector analyze") :]
    else:
        for prefix, why in NOT_RUN.items():
            if re.match(rf"(\S*/)?{re.escape(prefix)}", command):
                pytest.skip(f"not run: {why}")
    args = _dissector_args(command)
    if args is not None and args and "|" in args[0]:
        # "decode|report|live|spark ... OPTIONS": each command, "..." a capture
        for name in args[0].split("|"):
            one = command.replace(args[0], name, 1).replace(" ... ", f" {TLS_CAPTURE}.pcapng ")
            _shell_example(example, one, _dissector_args(one) or [], scratch)
        return
    _shell_example(example, command, args, scratch)


def _shell_example(example: Example, command: str, args: list[str] | None, scratch: Path) -> None:
    if args is not None and args and args[0] in RUN:
        after = re.split(r"(?:^|\s)(?:\S*/)?kafka-dissector\s", command, maxsplit=1)[1]
        for variant in _variants(after):
            proc = _run(_cli() + shlex.split(variant), scratch)
            assert proc.returncode == 0, f"{example.where}: {variant}\n{proc.stderr[-3000:]}"
            assert "Traceback" not in proc.stderr
        return
    if args is not None and args and args[0] in HELP_ONLY:
        if args[0] == "spark":
            pytest.importorskip("pyspark", reason="the spark command's --help needs pyspark")
        words = shlex.split(re.sub(r"\[[^\]]*\]", "", " ".join(shlex.quote(a) for a in args)))
        usage = _help_text([*_cli(), args[0]], scratch)
        for option in _options(words):
            assert option in usage, f"{example.where}: {option} is not an option of {args[0]}"
        return
    if args is not None and args == ["spark"]:
        return  # the command named in prose
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", command))
    if words[:2] == ["python", "-m"] and words[2] in HELP_ONLY:
        usage = _help_text([sys.executable, "-m", words[2]], ROOT)
        for option in _options(words):
            assert option in usage, f"{example.where}: {option} is not an option of {words[2]}"
        return
    if words[0] == "python" and words[1].startswith("benchmarks/"):
        usage = _help_text([sys.executable, str(ROOT / words[1])], ROOT)
        for option in _options(words):
            assert option in usage, f"{example.where}: {option} is not an option of {words[1]}"
        return
    pytest.fail(f"{example.where}: an example of no known kind: {example.text!r}")


def _python_example(example: Example, scratch: Path) -> None:
    code = example.text
    if "dissector.spark" in code:
        pytest.skip("not run: needs a Spark cluster's paths (tests/test_spark.py runs these calls)")
    code = code.replace('"a.pcap"', f'"{BUNDLED}"').replace('"b.pcapng"', f'"{BUNDLED}"')
    code = code.replace('"capture.pcapng"', f'"{TLS_CAPTURE}.pcapng"')
    code = code.replace('"keys.log"', f'"{TLS_CAPTURE}.keys"')
    if "import dissector" not in code:  # a snippet that continues the one before it
        code = "import dissector\n" + code
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=scratch,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == 0, f"{example.where}\n{proc.stderr[-3000:]}"
