"""``--filter EXPR``: a small display-filter language over the pairs' row columns.

Why a grammar of our own and not ``DataFrame.query``: pandas' query strings are Python
expressions (attribute access, calls, ``@`` variables) evaluated by eval/numexpr, which
is no place for text typed from a runbook or pasted from a ticket, and they spell things
the way Python does, not the way people who filter packets do. This is a small subset of
tshark's display filters, parsed here into a tree and evaluated on values only: nothing
in it can run code.

    api == Fetch and latency > 100          api_name or api_key (number)
    error                                   rows counted as errors (status error, malformed)
    error == UNKNOWN_TOPIC_OR_PARTITION     error_name, or error_code when a number
    client contains "consumer" or topic == orders
    status in {unanswered orphan_response}
    not flags and stream == 3               a bare field: present and not 0/empty
    client_id matches "^mix-.*-admin$"      regular expression (re.search)

Operators: ``== != > >= < <=`` (also ``eq ne gt ge lt le``), ``contains``, ``matches``,
``in {a b c}``; ``and``/``&&``, ``or``/``||``, ``not``/``!``, parentheses. Values are
numbers, words or quoted strings. A comparison with a missing value is false (as in
tshark); list columns (``topic``, ``flags``) match when any element does. API names,
error names and statuses compare without regard to case. Field names: every column of
``dissector.schema`` and the short names ``api``, ``version``, ``error``, ``client``,
``topic``, ``flag``, ``latency``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dissector.schema import COLUMN_NAMES, ERROR_STATUSES

if TYPE_CHECKING:
    import pandas as pd


class FilterError(ValueError):
    """A filter that does not parse; the message names the position."""


# short name -> the column it reads
ALIASES: dict[str, str] = {
    "version": "api_version",
    "client": "client_id",
    "topic": "topics",
    "flag": "flags",
    "latency": "latency_ms",
}
# Columns compared without regard to case (Kafka's names, our statuses).
_CASELESS = frozenset({"api_name", "error_name", "status"})
_SPECIAL = frozenset({"api", "error"})
_OPS = {
    "==": "==",
    "eq": "==",
    "!=": "!=",
    "ne": "!=",
    ">": ">",
    "gt": ">",
    ">=": ">=",
    "ge": ">=",
    "<": "<",
    "lt": "<",
    "<=": "<=",
    "le": "<=",
    "contains": "contains",
    "matches": "matches",
    "~": "matches",
}

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<op>==|!=|>=|<=|&&|\|\||[()<>{}!~])
    | (?P<word>[^\s()<>{}!=~"'&|]+)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # string | op | word
    text: str
    at: int


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise FilterError(f"cannot read the filter at column {pos + 1}: {text[pos:]!r}")
        kind = match.lastgroup or "word"
        value = match.group(kind)
        if kind == "string":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        out.append(_Token(kind, value, match.start(kind)))
        pos = match.end()
    return out


# ---------------------------------------------------------------- the tree

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Filter:
    """A parsed filter: ``matches(row)`` for one row, ``mask(df)`` for a frame."""

    text: str
    test: Callable[[Row], bool]
    columns: tuple[str, ...]  # the row columns it reads
    # (column, value) of each API or error compared by name (``api == Fecth``)
    names: tuple[tuple[str, str], ...] = ()

    def matches(self, row: Row) -> bool:
        return self.test(row)

    @property
    def name_columns(self) -> tuple[str, ...]:
        """The columns whose names the filter compares (``api_name``, ``error_name``)."""
        return tuple(dict.fromkeys(column for column, _ in self.names))

    def absent(self, df: pd.DataFrame) -> tuple[str, ...]:
        """The API and error names the filter asks for that no row of ``df`` has (a
        typo reads like an answer otherwise): ``no API named 'Fecth'``."""
        seen = {
            c: set(df[c].dropna().astype(str).str.casefold()) if c in df else set()
            for c in self.name_columns
        }
        return self.absent_among(seen)

    def absent_among(self, seen: Mapping[str, AbstractSet[str]]) -> tuple[str, ...]:
        """``absent`` over the case-folded names seen per column, for a stream of rows."""
        out: list[str] = []
        for column, value in self.names:
            if value.casefold() not in seen.get(column, ()):
                what = "API" if column == "api_name" else "error"
                out.append(f"no {what} named {value!r}")
        return tuple(dict.fromkeys(out))

    def mask(self, df: pd.DataFrame) -> pd.Series:
        import pandas as pd

        present = [c for c in self.columns if c in df.columns]
        values = [df[c].tolist() for c in present]
        rows = (
            {c: v for c, v in zip(present, row, strict=True)} for row in zip(*values, strict=True)
        )
        if not present:
            rows = ({} for _ in range(len(df)))
        return pd.Series([self.test(r) for r in rows], index=df.index, dtype=bool)


def _missing(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and value != value:
        return True
    return type(value).__name__ in ("NAType", "NaTType")


def _as_list(value: object) -> list[Any]:
    if _missing(value):
        return []
    if isinstance(value, str | bytes):
        return [value]
    if isinstance(value, Iterable):
        return [v for v in value if not _missing(v)]
    return [value]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _compare(op: str, have: object, want: str, caseless: bool) -> bool:
    if _missing(have):
        return False
    if op == "contains":
        text = str(have)
        return want.lower() in text.lower() if caseless else want in text
    if op == "matches":
        return re.search(want, str(have), re.IGNORECASE if caseless else 0) is not None
    number = _number(want)
    if isinstance(have, bool):
        have = int(have)
    if isinstance(have, int | float) and number is not None:
        left: Any = have
        right: Any = number
    elif isinstance(have, int | float):
        return False  # a number against a word: never equal, never ordered
    else:
        left, right = str(have), want
        if caseless:
            left, right = left.lower(), right.lower()
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    try:
        if op == ">":
            return bool(left > right)
        if op == ">=":
            return bool(left >= right)
        if op == "<":
            return bool(left < right)
        return bool(left <= right)
    except TypeError:
        return False


def _truthy(value: object) -> bool:
    if _missing(value):
        return False
    if isinstance(value, str):
        return value != ""
    if isinstance(value, int | float):
        return value != 0
    return bool(_as_list(value))


def _field_test(
    name: str, op: str | None, values: Sequence[str]
) -> tuple[Callable[[Row], bool], tuple[str, ...]]:
    """The test of one field against one or more values (``in`` gives several)."""
    if name == "api":
        if op is None:
            return (lambda r: not _missing(r.get("api_key"))), ("api_key",)
        if op == "!=":
            equal, columns = _field_test("api", "==", values)
            return (lambda r: not _missing(r.get("api_key")) and not equal(r)), columns
        numeric = [v for v in values if _number(v) is not None]
        named = [v for v in values if _number(v) is None]
        tests: list[Callable[[Row], bool]] = []
        if numeric:
            tests.append(_field_test("api_key", op, numeric)[0])
        if named:
            tests.append(_field_test("api_name", op, named)[0])
        return (lambda r: any(t(r) for t in tests)), ("api_key", "api_name")
    if name == "error":
        if op is None:
            return (lambda r: r.get("status") in ERROR_STATUSES), ("status",)
        by_code = all(_number(v) is not None for v in values)
        return _field_test("error_code" if by_code else "error_name", op, values)
    column = ALIASES.get(name, name)
    if column not in COLUMN_NAMES:
        known = sorted(set(COLUMN_NAMES) | set(ALIASES) | _SPECIAL)
        raise FilterError(f"unknown field {name!r}; fields: {', '.join(known)}")
    caseless = column in _CASELESS
    listed = column in ("topics", "flags")
    if op is None:
        return (lambda r: _truthy(r.get(column))), (column,)

    def one(value: object) -> bool:
        if op == "!=":
            return not any(_compare("==", value, w, caseless) for w in values) and not _missing(
                value
            )
        return any(_compare(op, value, w, caseless) for w in values)

    if listed:
        if op == "!=":
            return (lambda r: all(one(v) for v in _as_list(r.get(column)))), (column,)
        return (lambda r: any(one(v) for v in _as_list(r.get(column)))), (column,)
    return (lambda r: one(r.get(column))), (column,)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.i = 0
        self.columns: list[str] = []
        self.names: list[tuple[str, str]] = []

    def peek(self) -> _Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> _Token:
        token = self.peek()
        if token is None:
            raise FilterError(f"the filter ends too soon: {self.text!r}")
        self.i += 1
        return token

    def word_is(self, *words: str) -> bool:
        token = self.peek()
        return token is not None and token.kind != "string" and token.text.lower() in words

    def parse(self) -> Callable[[Row], bool]:
        if not self.tokens:
            raise FilterError("empty filter")
        test = self.disjunction()
        token = self.peek()
        if token is not None:
            raise FilterError(f"unexpected {token.text!r} at column {token.at + 1}")
        return test

    def disjunction(self) -> Callable[[Row], bool]:
        parts = [self.conjunction()]
        while self.word_is("or", "||"):
            self.take()
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else (lambda r: any(p(r) for p in parts))

    def conjunction(self) -> Callable[[Row], bool]:
        parts = [self.negation()]
        while self.word_is("and", "&&"):
            self.take()
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else (lambda r: all(p(r) for p in parts))

    def negation(self) -> Callable[[Row], bool]:
        if self.word_is("not", "!"):
            self.take()
            inner = self.negation()
            return lambda r: not inner(r)
        if self.word_is("("):
            self.take()
            inner = self.disjunction()
            close = self.take()
            if close.text != ")":
                raise FilterError(f"expected ')' at column {close.at + 1}, got {close.text!r}")
            return inner
        return self.comparison()

    def comparison(self) -> Callable[[Row], bool]:
        field = self.take()
        if field.kind != "word" or field.text.lower() in ("and", "or", "not", "in"):
            raise FilterError(f"expected a field name at column {field.at + 1}, got {field.text!r}")
        name = field.text.lower()
        op: str | None = None
        values: list[str] = []
        token = self.peek()
        if token is not None and token.kind != "string" and token.text.lower() in _OPS:
            op = _OPS[self.take().text.lower()]
            values = [self.value()]
        elif self.word_is("in"):
            self.take()
            opening = self.take()
            if opening.text != "{":
                raise FilterError(f"expected '{{' after in, at column {opening.at + 1}")
            while not self.word_is("}"):
                values.append(self.value())
            self.take()
            if not values:
                raise FilterError(f"an empty set after {field.text} in")
            op = "=="
        if op == "matches":
            try:
                re.compile(values[0])
            except re.error as exc:
                raise FilterError(f"bad regular expression {values[0]!r}: {exc}") from None
        test, columns = _field_test(name, op, values)
        self.columns.extend(columns)
        by_name = {"api": "api_name", "api_name": "api_name", "error": "error_name"}
        if op == "==" and name in (*by_name, "error_name"):
            column = by_name.get(name, name)
            self.names.extend((column, v) for v in values if _number(v) is None)
        return test

    def value(self) -> str:
        token = self.take()
        if token.kind == "op":
            raise FilterError(f"expected a value at column {token.at + 1}, got {token.text!r}")
        return token.text


def parse_filter(text: str) -> Filter:
    """``text`` as a ``Filter``; ``FilterError`` says what is wrong and where."""
    parser = _Parser(text)
    test = parser.parse()
    return Filter(
        text=text,
        test=test,
        columns=tuple(dict.fromkeys(parser.columns)),
        names=tuple(dict.fromkeys(parser.names)),
    )
