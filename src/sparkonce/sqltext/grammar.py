"""Spark SQL text below any statement: the token cursor, table references (paths, dotted names, time travel) and the
small clauses statements share (aliases, identifier lists, properties, assignments). Delta's statements
(:mod:`sparkonce.sql`) and the Python APIs that take table names (:mod:`sparkonce.delta.tables`, the catalog
wrappers) parse names here, the same way.

Runs on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkonce.errors import SqlError
from sparkonce.sqltext.lexer import Token

_CLAUSE_WORDS = frozenset(
    {
        "WHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL",
        "ON", "USING", "UNION", "EXCEPT", "INTERSECT", "MINUS", "WINDOW", "LATERAL", "PIVOT", "UNPIVOT",
        "TABLESAMPLE", "CLUSTER", "DISTRIBUTE", "SORT", "OFFSET", "QUALIFY", "ANTI", "SEMI", "VERSION", "TIMESTAMP",
        "FOR", "SELECT", "SET", "WHEN", "VALUES", "AS", "PARTITIONED", "LOCATION", "TBLPROPERTIES", "RETAIN", "DRY",
        "ZORDER", "TO", "INSERT", "FROM", "WITH",
    }
)  # fmt: skip
"""Words that end a table reference instead of being its alias."""


@dataclass(frozen=True)
class TableRef:
    """A table as a statement names it: a path (``delta.`/p```, ``'/p'``) or a name (``db.t``), with time travel."""

    path: str | None
    name: tuple[str, ...] | None
    start: int
    end: int
    """Offsets of the reference (incl. its time travel clause) in the statement's text."""
    table_version: int | None = None
    timestamp: str | None = None

    @property
    def shown(self) -> str:
        """The table as the user wrote it, for messages."""
        if self.path is not None:
            return f"delta.`{self.path}`"
        assert self.name is not None
        return ".".join(self.name)


@dataclass(frozen=True)
class Span:
    """User text to hand to Spark: ``text[start:end]``."""

    start: int
    end: int


@dataclass(frozen=True)
class Assignment:
    column: str
    value: Span


class Cursor:
    """A position in a statement's tokens, with the statement's text for messages."""

    def __init__(self, text: str, tokens: list[Token], pos: int = 0) -> None:
        self.text = text
        self.tokens = tokens
        self.pos = pos

    def peek(self, ahead: int = 0) -> Token | None:
        i = self.pos + ahead
        return self.tokens[i] if i < len(self.tokens) else None

    def at_word(self, *words: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and token.is_word(*words)

    def at_op(self, *ops: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and token.is_op(*ops)

    def take(self) -> Token:
        token = self.peek()
        if token is None:
            raise self.error("ends early")
        self.pos += 1
        return token

    def take_word(self, *words: str) -> bool:
        """Consume the next token when it is one of ``words`` (each may be several words: ``"DRY RUN"``)."""
        for phrase in words:
            parts = phrase.split()
            if all(self.at_word(p, ahead=i) for i, p in enumerate(parts)):
                self.pos += len(parts)
                return True
        return False

    def expect_word(self, *words: str) -> None:
        if not self.take_word(*words):
            raise self.error(f"expected {' or '.join(words)}")

    def expect_op(self, op: str) -> Token:
        if not self.at_op(op):
            raise self.error(f"expected {op!r}")
        return self.take()

    def done(self) -> bool:
        return self.pos >= len(self.tokens)

    def expect_end(self) -> None:
        if not self.done():
            raise self.error("unexpected text")

    @property
    def offset(self) -> int:
        token = self.peek()
        return token.start if token is not None else len(self.text)

    def error(self, problem: str) -> SqlError:
        token = self.peek()
        where = f"at {self.text[token.start : token.start + 40]!r}" if token is not None else "at its end"
        return SqlError(f"{problem} {where} in: {_shorten(self.text)}")

    def unsupported(self, clause: str) -> SqlError:
        return SqlError(f"{clause} is not supported by sparkonce's Delta SQL, in: {_shorten(self.text)}")

    def span_until(self, *stop_words: str) -> Span:
        """The text from here to the first of ``stop_words`` (or ``)``) at this nesting depth, or to the end."""
        start = self.offset
        depth = 0
        while not self.done():
            token = self.peek()
            assert token is not None
            if depth == 0 and (token.is_op(")") or any(self._at_phrase(w) for w in stop_words)):
                break
            if token.is_op("(", "["):
                depth += 1
            elif token.is_op(")", "]"):
                depth -= 1
            self.pos += 1
        if self.pos == 0 or self.offset == start:
            raise self.error("expected an expression")
        return Span(start, self.tokens[self.pos - 1].end)

    def _at_phrase(self, phrase: str) -> bool:
        if phrase == ",":
            return self.at_op(",")
        return all(self.at_word(p, ahead=i) for i, p in enumerate(phrase.split()))


def parse_table(cursor: Cursor) -> TableRef:
    """A table reference: ``'path'``, ``delta.`path```, or a (dotted) name; then ``@v<n>``/``@<timestamp>`` and
    ``VERSION AS OF n`` / ``TIMESTAMP AS OF 'ts'`` (also ``FOR SYSTEM_VERSION|SYSTEM_TIME AS OF``)."""
    first = cursor.peek()
    if first is None:
        raise cursor.error("expected a table")
    start = first.start
    path: str | None = None
    name: tuple[str, ...] | None = None
    if first.kind == "string":
        cursor.take()
        path = first.value
    elif first.is_word("DELTA") and cursor.at_op(".", ahead=1) and (cursor.peek(2) or first).kind == "quoted":
        cursor.pos += 2
        path = cursor.take().value
    elif first.kind in ("word", "quoted"):
        parts = [cursor.take().value]
        while cursor.at_op(".") and (cursor.peek(1) is not None) and cursor.peek(1).kind in ("word", "quoted"):  # type: ignore[union-attr]
            cursor.pos += 1
            parts.append(cursor.take().value)
        name = tuple(parts)
    else:
        raise cursor.error("expected a table")
    table_version: int | None = None
    timestamp: str | None = None
    if path is not None and "@" in path:
        path, table_version, timestamp = _at_suffix(cursor, path)
    elif name is not None and cursor.at_op("@"):
        cursor.take()
        suffix = cursor.take()
        _, table_version, timestamp = _at_suffix(cursor, f"@{suffix.value}")
    end = cursor.tokens[cursor.pos - 1].end
    if cursor.take_word("FOR SYSTEM_VERSION AS OF", "VERSION AS OF"):
        token = cursor.take()
        if token.kind != "number" or not token.value.isdigit():
            raise cursor.error("VERSION AS OF takes a table version (a whole number)")
        table_version = int(token.value)
        end = token.end
    elif cursor.take_word("FOR SYSTEM_TIME AS OF", "TIMESTAMP AS OF"):
        token = cursor.take()
        if token.kind != "string":
            raise cursor.unsupported("TIMESTAMP AS OF with an expression (give a timestamp string)")
        timestamp = token.value
        end = token.end
    return TableRef(path, name, start, end, table_version, timestamp)


def parse_name(text: str) -> tuple[str, ...]:
    """The parts of a table name given as text (``db.t``, ```my db`.t``), as the Python APIs take it.

    Raises:
        SqlError: not a plain (dotted) name.
    """
    from sparkonce.sqltext.lexer import tokenize

    cursor = Cursor(text, tokenize(text))
    ref = parse_table(cursor)
    if ref.name is None or not cursor.done() or ref.table_version is not None or ref.timestamp is not None:
        raise SqlError(f"{text!r} is not a table name")
    return ref.name


def parse_format_path(text: str, format_name: str) -> str | None:
    """The path of ``format_name.`path``` (``delta.`/data/t```, ``parquet.`/p```) given as text, else None."""
    from sparkonce.sqltext.lexer import tokenize

    tokens = tokenize(text)
    if (
        len(tokens) == 3
        and tokens[0].is_word(format_name.upper())
        and tokens[1].is_op(".")
        and tokens[2].kind == "quoted"
    ):
        return tokens[2].value
    return None


def _at_suffix(cursor: Cursor, text: str) -> tuple[str, int | None, str | None]:
    """Delta's ``t@v123`` (table version) and ``t@20190101000000000`` (``yyyyMMddHHmmssSSS``) suffixes."""
    base, _, suffix = text.rpartition("@")
    if suffix[:1] in ("v", "V") and suffix[1:].isdigit():
        return base, int(suffix[1:]), None
    if suffix.isdigit() and len(suffix) == 17:
        s = suffix
        return base, None, f"{s[0:4]}-{s[4:6]}-{s[6:8]} {s[8:10]}:{s[10:12]}:{s[12:14]}.{s[14:17]}"
    raise cursor.error(f"@{suffix}: Delta's time travel suffix is @v<table version> or @yyyyMMddHHmmssSSS")


def parse_alias(cursor: Cursor) -> str | None:
    """An optional ``[AS] alias`` after a table."""
    if cursor.take_word("AS"):
        return cursor.take().value
    token = cursor.peek()
    plain_word = token is not None and token.kind == "word" and token.value.upper() not in _CLAUSE_WORDS
    if token is not None and (token.kind == "quoted" or plain_word):
        cursor.pos += 1
        return token.value
    return None


def parse_identifier_list(cursor: Cursor) -> tuple[str, ...]:
    """``(a, b, c)``: plain column names."""
    cursor.expect_op("(")
    names = [cursor.take().value]
    while cursor.at_op(","):
        cursor.take()
        names.append(cursor.take().value)
    cursor.expect_op(")")
    return tuple(names)


def parse_properties(cursor: Cursor, *, values: bool = True) -> dict[str, str]:
    """``('k' = 'v', k.x = 1, ...)`` (keys only with ``values=False``, each mapped to "")."""
    cursor.expect_op("(")
    out: dict[str, str] = {}
    while True:
        key = cursor.take()
        parts = [key.value]
        while cursor.at_op("."):
            cursor.take()
            parts.append(cursor.take().value)
        name = ".".join(parts)
        value = ""
        if values:
            if cursor.at_op("="):  # Spark takes 'k' = 'v' and 'k' 'v'
                cursor.take()
            token = cursor.take()
            value = token.value.lower() if token.is_word("TRUE", "FALSE") else token.value
        out[name] = value
        if cursor.at_op(","):
            cursor.take()
            continue
        cursor.expect_op(")")
        return out


def parse_assignments(cursor: Cursor, stop: tuple[str, ...]) -> tuple[Assignment, ...]:
    """``col = expr, ...`` up to one of ``stop`` (a qualified column keeps its last part: ``t.col`` is ``col``)."""
    out: list[Assignment] = []
    while True:
        parts = [cursor.take().value]
        while cursor.at_op("."):
            cursor.take()
            parts.append(cursor.take().value)
        if len(parts) > 2:
            raise cursor.unsupported(f"assigning a nested field ({'.'.join(parts)})")
        cursor.expect_op("=")
        out.append(Assignment(parts[-1], cursor.span_until(",", *stop)))
        if cursor.at_op(","):
            cursor.take()
            continue
        return tuple(out)


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= 200 else flat[:197] + "..."


__all__ = [
    "Assignment",
    "Cursor",
    "Span",
    "TableRef",
    "parse_alias",
    "parse_assignments",
    "parse_format_path",
    "parse_identifier_list",
    "parse_name",
    "parse_properties",
    "parse_table",
]
