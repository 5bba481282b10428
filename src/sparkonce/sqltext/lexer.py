"""Spark SQL's lexical rules, enough to find Delta's statements and table references in a SQL text.

Tokens keep their offsets in the text, so a statement handed on to Spark is the user's own text with only the table
references replaced (:mod:`sparkonce.sqltext.grammar`): expressions and queries are always parsed by Spark itself.
Comments (``--`` to the end of the line, ``/* ... */`` nested as Spark nests them) and white space are dropped;
strings (``'...'``, ``"..."``, ``r'...'``, with Spark's backslash escapes) and back-quoted identifiers are decoded.

Runs on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sparkonce.errors import SqlError

TokenKind = Literal["word", "quoted", "string", "number", "op"]

_OPERATORS = ("<=>", "<=", ">=", "<>", "!=", "==", "||", "::", "->", "=>", "&&")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "0": "\0", "Z": "\x1a", "%": "\\%", "_": "\\_"}


@dataclass(frozen=True)
class Token:
    """One token: ``word`` (an identifier or keyword), ``quoted`` (a back-quoted identifier, ``value`` decoded),
    ``string`` (``value`` decoded), ``number`` or ``op`` (punctuation and operators)."""

    kind: TokenKind
    value: str
    start: int
    """Offset of the token's first character in the text."""
    end: int
    """Offset just past its last character."""

    def is_word(self, *words: str) -> bool:
        """True for an unquoted word equal (ignoring case) to one of ``words``."""
        return self.kind == "word" and self.value.upper() in words

    def is_op(self, *ops: str) -> bool:
        return self.kind == "op" and self.value in ops


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text`` in order.

    Raises:
        SqlError: an unterminated string, back-quoted identifier or comment.
    """
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            i = _skip_block_comment(text, i)
        elif c in "'\"" or (c in "rR" and i + 1 < n and text[i + 1] in "'\""):
            raw = c in "rR"
            value, end = _string(text, i + 1 if raw else i, raw=raw)
            tokens.append(Token("string", value, i, end))
            i = end
        elif c == "`":
            value, end = _backquoted(text, i)
            tokens.append(Token("quoted", value, i, end))
            i = end
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            end = i + 1
            while end < n and (
                text[end].isalnum() or text[end] in "._" or (text[end] in "+-" and text[end - 1] in "eE")
            ):
                end += 1
            tokens.append(Token("number" if _is_number(text[i:end]) else "word", text[i:end], i, end))
            i = end
        elif c.isalpha() or c == "_":
            end = i + 1
            while end < n and (text[end].isalnum() or text[end] == "_"):
                end += 1
            tokens.append(Token("word", text[i:end], i, end))
            i = end
        else:
            op = next((o for o in _OPERATORS if text.startswith(o, i)), c)
            tokens.append(Token("op", op, i, i + len(op)))
            i += len(op)
    return tokens


def split_statements(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` offsets of each non-empty statement of ``text``, split at top-level semicolons."""
    spans: list[tuple[int, int]] = []
    first: Token | None = None
    last: Token | None = None
    for token in tokenize(text):
        if token.is_op(";"):
            if first is not None and last is not None:
                spans.append((first.start, last.end))
            first = last = None
            continue
        first = first or token
        last = token
    if first is not None and last is not None:
        spans.append((first.start, last.end))
    return spans


def _is_number(text: str) -> bool:
    body = text.upper()
    for suffix in ("BD", "L", "S", "Y", "D", "F"):
        if body.endswith(suffix) and len(body) > len(suffix):
            body = body[: -len(suffix)]
            break
    try:
        float(body)
    except ValueError:
        return False
    return True


def _skip_block_comment(text: str, start: int) -> int:
    depth, i = 0, start
    while i < len(text):
        if text.startswith("/*", i):
            depth += 1
            i += 2
        elif text.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    raise SqlError(f"unterminated /* comment starting at offset {start}")


def _string(text: str, start: int, *, raw: bool) -> tuple[str, int]:
    quote = text[start]
    out: list[str] = []
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append(c + nxt if raw else _ESCAPES.get(nxt, nxt))
            i += 2
        elif c == quote:
            return "".join(out), i + 1
        else:
            out.append(c)
            i += 1
    raise SqlError(f"unterminated string starting at offset {start}")


def _backquoted(text: str, start: int) -> tuple[str, int]:
    out: list[str] = []
    i = start + 1
    while i < len(text):
        if text[i] == "`":
            if text.startswith("``", i):
                out.append("`")
                i += 2
                continue
            return "".join(out), i + 1
        out.append(text[i])
        i += 1
    raise SqlError(f"unterminated back-quoted identifier starting at offset {start}")


__all__ = ["Token", "TokenKind", "split_statements", "tokenize"]
