"""Every example of README.md and docs/*.md is run, or accounted for.

The examples are read out of the documents (fenced ``bash``/``sh``/``python`` blocks and
inline `kafka-dissector ...` spans), not copied here, so an example that is edited or
added is tested as written. ``kafka-dissector`` commands that read captures run on the
bundled ones (placeholders such as ``CAPTURE.pcapng`` stand for them, each optional
``[...]`` part is run once with and once without, each of its ``a|.b`` alternatives in
turn) in a scratch directory, must exit 0, and must write each output file they name.
Commands that need what a test run does not have (an interface and root for ``live``, a
Spark cluster, Maven and a JDK, the broker test bed) are checked against their own
``--help``: each option an example uses must exist. The rest (installs, the test runner)
are listed below with why; an example of none of these kinds fails the test.

Fast by sharing: the ``kafka-dissector`` commands run in this process through click's
test runner (one import of the package and its plotting, not one per command), each
distinct command line once however many examples show it; the Python examples run in a
child each (they are whole scripts).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from dissector.cli import main

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
    # the report the README shows is the one made from the bundled capture
    "reports/NAME.html": "reports/kafka-4-mixed.html",
}
# Output placeholders, by the option that names them.
OUTPUT_PLACEHOLDERS = {"--partitions OUT": "--partitions partitions.parquet",
                       "--groups OUT": "--groups groups.parquet"}  # fmt: skip
# Options whose value is a file the command must write.
OUTPUT_OPTIONS = ("-o", "--output", "--partitions", "--groups", "--write-pcap")
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
    for placeholder, value in OUTPUT_PLACEHOLDERS.items():
        command = command.replace(placeholder, value)
    for placeholder, value in PLACEHOLDERS.items():
        command = re.sub(rf"(?<![\w/.]){re.escape(placeholder)}(?![\w.])", value, command)
    return command


def _alternatives(part: str) -> list[str]:
    """``-o pairs.parquet|.csv|.jsonl`` -> the part with each alternative in turn; an
    alternative that starts with a dot replaces the first one's extension."""
    match = re.search(r"(\S+?)((?:\|\S+)+)", part)
    if match is None:
        return [part]
    first = match.group(1)
    out = []
    for alt in [first, *match.group(2).split("|")[1:]]:
        chosen = Path(first).with_suffix(alt).as_posix() if alt.startswith(".") else alt
        out.append(part[: match.start()] + chosen + part[match.end() :])
    return out


def _variants(command: str) -> list[str]:
    """The command without its optional ``[...]`` parts, then with each in turn (each
    of its alternatives)."""
    optional = re.findall(r"\[([^\]]+)\]", command)
    bare = re.sub(r"\s*\[[^\]]+\]", "", command)
    out = [bare]
    for part in optional:
        for chosen in _alternatives(part):
            one = command.replace(f"[{part}]", chosen)
            out.append(re.sub(r"\s*\[[^\]]+\]", "", one))
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    stdout: str
    stderr: str
    error: str | None  # an exception other than the exit, with its type


class Runner:
    """Runs ``kafka-dissector`` argument lists in ``scratch``, each distinct one once."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self._runs: dict[tuple[str, ...], Outcome] = {}

    def run(self, args: list[str]) -> Outcome:
        key = tuple(args)
        if key not in self._runs:
            for output in _outputs(args):
                (self.scratch / output).unlink(missing_ok=True)
            with contextlib.chdir(self.scratch):
                result = CliRunner().invoke(main, args, catch_exceptions=True)
            error = None
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                error = f"{type(result.exception).__name__}: {result.exception}"
            self._runs[key] = Outcome(result.exit_code, result.stdout, result.stderr, error)
        return self._runs[key]

    def help_text(self, args: list[str]) -> str:
        outcome = self.run([*args, "--help"])
        assert outcome.exit_code == 0, outcome.stderr[-2000:]
        return outcome.stdout


def _outputs(args: list[str]) -> list[str]:
    """The files an argument list asks to be written."""
    return [value for option, value in itertools.pairwise(args) if option in OUTPUT_OPTIONS]


def _dissector_args(command: str) -> list[str] | None:
    """The arguments after ``kafka-dissector`` (any install path), or None."""
    words = shlex.split(command)
    for i, word in enumerate(words):
        if word == "kafka-dissector" or word.endswith("/kafka-dissector"):
            return words[i + 1 :]
    return None


def _options(words: list[str]) -> list[str]:
    return sorted({w.split("=")[0] for w in words if w.startswith("--")})


def _help_text(argv: list[str]) -> str:
    proc = subprocess.run(
        [*argv, "--help"], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    """A working directory with the bundled captures, so outputs land in tmp."""
    scratch = tmp_path_factory.mktemp("docs-examples")
    (scratch / "captures").symlink_to(ROOT / "captures")
    yield Runner(scratch)


def test_the_documents_have_examples() -> None:
    docs = {e.doc for e in EXAMPLES}
    assert {"README.md", "docs/spark.md"} <= docs
    assert len(EXAMPLES) > 25


def test_alternatives_and_placeholders_expand_as_a_reader_would() -> None:
    command = "analyze CAPTURE.pcapng [-o pairs.parquet|.csv|.jsonl|.json] [--ports 9092]"
    assert _variants(_substitute(command)) == [
        f"analyze {BUNDLED}",
        *(f"analyze {BUNDLED} -o pairs.{ext}" for ext in ("parquet", "csv", "jsonl", "json")),
        f"analyze {BUNDLED} --ports 9092",
    ]
    assert _substitute("analyze CAPTURE --partitions OUT --groups OUT") == (
        f"analyze {BUNDLED} --partitions partitions.parquet --groups groups.parquet"
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_example(example: Example, runner: Runner) -> None:
    if example.kind == "python":
        _python_example(example, runner.scratch)
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
            _shell_example(example, one, _dissector_args(one) or [], runner)
        return
    _shell_example(example, command, args, runner)


def _shell_example(example: Example, command: str, args: list[str] | None, runner: Runner) -> None:
    if args is not None and args and args[0] in RUN:
        after = re.split(r"(?:^|\s)(?:\S*/)?kafka-dissector\s", command, maxsplit=1)[1]
        for variant in _variants(after):
            words = shlex.split(variant)
            outcome = runner.run(words)
            assert outcome.error is None, f"{example.where}: {variant}\n{outcome.error}"
            assert outcome.exit_code == 0, f"{example.where}: {variant}\n{outcome.stderr[-3000:]}"
            for output in _outputs(words):
                written = runner.scratch / output
                assert written.is_file() and written.stat().st_size > 0, (
                    f"{example.where}: {variant} wrote no {output}"
                )
        return
    if args is not None and args and args[0] in HELP_ONLY:
        if args[0] == "spark":
            pytest.importorskip("pyspark", reason="the spark command's --help needs pyspark")
        words = shlex.split(re.sub(r"\[[^\]]*\]", "", " ".join(shlex.quote(a) for a in args)))
        usage = runner.help_text([args[0]])
        for option in _options(words):
            assert option in usage, f"{example.where}: {option} is not an option of {args[0]}"
        return
    if args is not None and args == ["spark"]:
        return  # the command named in prose
    words = shlex.split(re.sub(r"\[[^\]]*\]", "", command))
    if words[:2] == ["python", "-m"] and words[2] in HELP_ONLY:
        usage = _help_text([sys.executable, "-m", words[2]])
        for option in _options(words):
            assert option in usage, f"{example.where}: {option} is not an option of {words[2]}"
        return
    if words[0] == "python" and words[1].startswith("benchmarks/"):
        usage = _help_text([sys.executable, str(ROOT / words[1])])
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
