"""Spark SQL scalar expressions as a small tree: what a Delta generated column's ``delta.generationExpression`` (and
a CHECK constraint) holds, parsed so that executors can evaluate it without Spark
(:mod:`sparkonce.delta.table.expressions`).

The grammar is Spark's for the subset sparkonce evaluates: column references (plain or back-quoted), literals
(integers, decimals, ``1.5E0`` doubles, strings, ``TRUE``/``FALSE``/``NULL``), ``CAST(x AS type)``, function calls,
unary ``-``/``+``/``NOT``/``!``, the binary operators ``* / % DIV + - ||``, comparisons (``= == <> != < <= > >=
<=>``), ``IS [NOT] NULL``, ``[NOT] IN (...)``, ``[NOT] BETWEEN``, ``AND``/``OR`` and ``CASE``. Precedence follows
Spark's grammar. Anything else (subqueries, lambdas, window clauses, ``::`` casts, ...) is a :class:`SqlError`
naming what was found, so a caller can refuse the expression instead of evaluating something else.

Runs on the driver and on executors (pure Python, no Spark).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal as TypingLiteral

from sparkonce.errors import SqlError
from sparkonce.sqltext.lexer import Token, tokenize

LiteralKind = TypingLiteral["int", "bigint", "decimal", "double", "string", "boolean", "null"]


@dataclass(frozen=True)
class Column:
    """A column of the row, by name (matched ignoring case, as Spark resolves names)."""

    name: str


@dataclass(frozen=True)
class Literal:
    value: object
    kind: LiteralKind


@dataclass(frozen=True)
class Cast:
    operand: Expr
    type_name: str
    """Spark's type name, upper case, without parameters' spaces (``DATE``, ``INT``, ``DECIMAL(10,2)``, ...)."""


@dataclass(frozen=True)
class Call:
    name: str
    """The function's name, upper case."""
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Unary:
    op: TypingLiteral["-", "NOT"]
    operand: Expr


@dataclass(frozen=True)
class Binary:
    op: str
    """``+ - * / % DIV || = <> < <= > >= <=> AND OR`` (``==`` and ``!=`` are read as ``=`` and ``<>``)."""
    left: Expr
    right: Expr


@dataclass(frozen=True)
class IsNull:
    operand: Expr
    negated: bool


@dataclass(frozen=True)
class In:
    operand: Expr
    values: tuple[Expr, ...]
    negated: bool


@dataclass(frozen=True)
class Case:
    """``CASE [operand] WHEN ... THEN ... [ELSE ...] END`` (with an operand, each WHEN is compared to it)."""

    operand: Expr | None
    branches: tuple[tuple[Expr, Expr], ...]
    otherwise: Expr | None


Expr = Column | Literal | Cast | Call | Unary | Binary | IsNull | In | Case

_COMPARISONS = {"=": "=", "==": "=", "<>": "<>", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">=", "<=>": "<=>"}
_RESERVED = frozenset(
    {"AND", "OR", "NOT", "IS", "IN", "BETWEEN", "CASE", "WHEN", "THEN", "ELSE", "END", "AS", "FROM", "FOR", "DIV"}
)


def parse_expression(text: str) -> Expr:
    """The tree of one Spark SQL scalar expression.

    Raises:
        SqlError: the text is not an expression of the subset (the message names what was found and where).
    """
    parser = _Parser(text, tokenize(text))
    expr = parser.expression()
    if parser.pos < len(parser.tokens):
        raise parser.error("unexpected")
    return expr


def columns_of(expr: Expr) -> set[str]:
    """The names of the columns an expression reads (as written)."""
    found: set[str] = set()
    for node in walk(expr):
        if isinstance(node, Column):
            found.add(node.name)
    return found


def functions_of(expr: Expr) -> set[str]:
    """The function names an expression calls (upper case)."""
    return {node.name for node in walk(expr) if isinstance(node, Call)}


def walk(expr: Expr) -> list[Expr]:
    """Every node of the tree, the root first."""
    out: list[Expr] = []
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, Cast | Unary | IsNull):
            stack.append(node.operand)
        elif isinstance(node, Call):
            stack.extend(node.args)
        elif isinstance(node, Binary):
            stack.extend((node.left, node.right))
        elif isinstance(node, In):
            stack.append(node.operand)
            stack.extend(node.values)
        elif isinstance(node, Case):
            if node.operand is not None:
                stack.append(node.operand)
            for when, then in node.branches:
                stack.extend((when, then))
            if node.otherwise is not None:
                stack.append(node.otherwise)
    return out


_CATALYST_TYPES = {"INTEGER": "int", "LONG": "bigint", "SHORT": "smallint", "BYTE": "tinyint", "REAL": "float"}


def catalyst_string(expr: Expr) -> str:
    """The expression as Spark's parser leaves it, printed (Catalyst's ``toString`` of the unresolved tree): what
    Delta records for predicates it parses but does not resolve (``OPTIMIZE ... WHERE``'s ``predicate``).
    ``key = 'a'`` -> ``('key = a)``; ``p IN (1, 2)`` -> ``'p IN (1,2)``; ``x IS NULL`` -> ``isnull('x)``."""
    if isinstance(expr, Column):
        return f"'{expr.name}"
    if isinstance(expr, Literal):
        if expr.kind == "null":
            return "null"
        if expr.kind == "boolean":
            return str(expr.value).lower()
        return str(expr.value)
    if isinstance(expr, Cast):
        name = _CATALYST_TYPES.get(expr.type_name, expr.type_name.lower())
        return f"cast({catalyst_string(expr.operand)} as {name})"
    if isinstance(expr, Call):
        return f"'{expr.name.lower()}({', '.join(catalyst_string(a) for a in expr.args)})"
    if isinstance(expr, Unary):
        inner = catalyst_string(expr.operand)
        return f"NOT {inner}" if expr.op == "NOT" else f"-{inner}"
    if isinstance(expr, Binary):
        left, right = catalyst_string(expr.left), catalyst_string(expr.right)
        if expr.op == "<>":
            return f"NOT ({left} = {right})"
        if expr.op == "||":
            return f"'concat({left}, {right})"
        return f"({left} {expr.op.lower() if expr.op == 'DIV' else expr.op} {right})"
    if isinstance(expr, IsNull):
        return f"{'isnotnull' if expr.negated else 'isnull'}({catalyst_string(expr.operand)})"
    if isinstance(expr, In):
        shown = f"{catalyst_string(expr.operand)} IN ({','.join(catalyst_string(v) for v in expr.values)})"
        return f"NOT {shown}" if expr.negated else shown
    parts = ["CASE"] + ([catalyst_string(expr.operand)] if expr.operand is not None else [])
    for when, then in expr.branches:
        parts += ["WHEN", catalyst_string(when), "THEN", catalyst_string(then)]
    if expr.otherwise is not None:
        parts += ["ELSE", catalyst_string(expr.otherwise)]
    return " ".join([*parts, "END"])


def column_references(expr: Expr) -> list[str]:
    """The columns an expression reads, left to right, each once (as written)."""
    found: list[str] = []
    for node in reversed(walk(expr)):
        if isinstance(node, Column) and node.name not in found:
            found.append(node.name)
    return found


class _Parser:
    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.pos = 0

    # -- cursor ----------------------------------------------------------------------------------------------------

    def peek(self, ahead: int = 0) -> Token | None:
        i = self.pos + ahead
        return self.tokens[i] if i < len(self.tokens) else None

    def at_word(self, *words: str, ahead: int = 0) -> bool:
        token = self.peek(ahead)
        return token is not None and token.is_word(*words)

    def at_op(self, *ops: str) -> bool:
        token = self.peek()
        return token is not None and token.is_op(*ops)

    def take(self) -> Token:
        token = self.peek()
        if token is None:
            raise SqlError(f"expression {self.text!r} ends too early")
        self.pos += 1
        return token

    def expect_op(self, op: str) -> None:
        if not self.at_op(op):
            raise self.error(f"expected {op!r}, found")
        self.pos += 1

    def expect_word(self, word: str) -> None:
        if not self.at_word(word):
            raise self.error(f"expected {word}, found")
        self.pos += 1

    def error(self, problem: str) -> SqlError:
        token = self.peek()
        found = "the end" if token is None else repr(self.text[token.start : token.end])
        where = len(self.text) if token is None else token.start
        return SqlError(f"expression {self.text!r}: {problem} {found} at offset {where}")

    # -- grammar (lowest precedence first) ---------------------------------------------------------------------------

    def expression(self) -> Expr:
        return self.disjunction()

    def disjunction(self) -> Expr:
        left = self.conjunction()
        while self.at_word("OR"):
            self.pos += 1
            left = Binary("OR", left, self.conjunction())
        return left

    def conjunction(self) -> Expr:
        left = self.negation()
        while self.at_word("AND"):
            self.pos += 1
            left = Binary("AND", left, self.negation())
        return left

    def negation(self) -> Expr:
        if self.at_word("NOT") or self.at_op("!"):
            self.pos += 1
            return Unary("NOT", self.negation())
        return self.predicate()

    def predicate(self) -> Expr:
        left = self.additive()
        while True:
            token = self.peek()
            if token is None:
                return left
            if token.kind == "op" and token.value in _COMPARISONS:
                self.pos += 1
                left = Binary(_COMPARISONS[token.value], left, self.additive())
            elif token.is_word("IS"):
                self.pos += 1
                negated = self.at_word("NOT")
                if negated:
                    self.pos += 1
                self.expect_word("NULL")
                left = IsNull(left, negated)
            elif token.is_word("IN", "BETWEEN") or (token.is_word("NOT") and self.at_word("IN", "BETWEEN", ahead=1)):
                negated = token.is_word("NOT")
                if negated:
                    self.pos += 1
                if self.take().is_word("IN"):
                    self.expect_op("(")
                    if self.at_word("SELECT", "WITH"):
                        raise self.error("a subquery is not supported:")
                    values = self.arguments()
                    left = In(left, tuple(values), negated)
                else:
                    low = self.additive()
                    self.expect_word("AND")
                    high = self.additive()
                    between: Expr = Binary("AND", Binary(">=", left, low), Binary("<=", left, high))
                    left = Unary("NOT", between) if negated else between
            else:
                return left

    def additive(self) -> Expr:
        left = self.multiplicative()
        while self.at_op("+", "-", "||"):
            op = self.take().value
            left = Binary(op, left, self.multiplicative())
        return left

    def multiplicative(self) -> Expr:
        left = self.unary()
        while self.at_op("*", "/", "%") or self.at_word("DIV"):
            op = self.take().value.upper()
            left = Binary(op, left, self.unary())
        return left

    def unary(self) -> Expr:
        if self.at_op("-"):
            self.pos += 1
            operand = self.unary()
            if isinstance(operand, Literal) and operand.kind in ("int", "bigint", "decimal", "double"):
                return _negative_literal(operand)
            return Unary("-", operand)
        if self.at_op("+"):
            self.pos += 1
            return self.unary()
        return self.primary()

    def primary(self) -> Expr:
        token = self.take()
        if token.kind == "number":
            return _number(token.value)
        if token.kind == "string":
            return Literal(token.value, "string")
        if token.is_op("("):
            if self.at_word("SELECT", "WITH"):
                raise self.error("a subquery is not supported:")
            inner = self.expression()
            self.expect_op(")")
            return inner
        if token.kind == "quoted":
            return self.qualified(token.value)
        if token.kind != "word":
            self.pos -= 1
            raise self.error("expected a value, found")
        word = token.value.upper()
        if word in ("TRUE", "FALSE"):
            return Literal(word == "TRUE", "boolean")
        if word == "NULL":
            return Literal(None, "null")
        if word == "CASE":
            return self.case()
        if word in ("CAST", "TRY_CAST") and self.at_op("("):
            if word == "TRY_CAST":
                self.pos -= 1
                raise self.error("TRY_CAST is not supported:")
            self.pos += 1
            operand = self.expression()
            self.expect_word("AS")
            type_name = self.type_name()
            self.expect_op(")")
            return Cast(operand, type_name)
        if word in ("DATE", "TIMESTAMP", "INTERVAL", "X") and self.peek() is not None and self.peek().kind == "string":  # type: ignore[union-attr]
            self.pos -= 1
            raise self.error(f"{word} literals are not supported:")
        if self.at_op("("):
            self.pos += 1
            if word in ("SUBSTRING", "SUBSTR"):
                return self.substring(word)
            if word in ("TRIM", "LTRIM", "RTRIM") and self.at_word("BOTH", "LEADING", "TRAILING"):
                raise self.error(f"{word}(BOTH|LEADING|TRAILING ...) is not supported:")
            if self.at_word("DISTINCT"):
                raise self.error("DISTINCT in a function call is not supported:")
            args = self.arguments() if not self.at_op(")") else self._empty_arguments()
            if self.at_word("OVER", "FILTER", "WITHIN"):
                raise self.error("window and aggregate clauses are not supported:")
            return Call(word, tuple(args))
        if word in _RESERVED:
            self.pos -= 1
            raise self.error("expected a value, found")
        return self.qualified(token.value)

    def qualified(self, name: str) -> Expr:
        if self.at_op("."):
            raise self.error("qualified column names and struct fields are not supported:")
        if self.at_op("[", "::", "->"):
            raise self.error("unsupported operator")
        return Column(name)

    def _empty_arguments(self) -> list[Expr]:
        self.expect_op(")")
        return []

    def arguments(self) -> list[Expr]:
        args = [self.expression()]
        while self.at_op(","):
            self.pos += 1
            args.append(self.expression())
        self.expect_op(")")
        return args

    def substring(self, word: str) -> Expr:
        operand = self.expression()
        args = [operand]
        if self.at_word("FROM"):
            self.pos += 1
            args.append(self.expression())
            if self.at_word("FOR"):
                self.pos += 1
                args.append(self.expression())
            self.expect_op(")")
        elif self.at_op(","):
            self.pos += 1
            args.extend(self.arguments())
        else:
            self.expect_op(")")
        return Call("SUBSTRING", tuple(args))

    def case(self) -> Expr:
        operand = None if self.at_word("WHEN") else self.expression()
        branches: list[tuple[Expr, Expr]] = []
        while self.at_word("WHEN"):
            self.pos += 1
            when = self.expression()
            self.expect_word("THEN")
            branches.append((when, self.expression()))
        if not branches:
            raise self.error("CASE needs WHEN, found")
        otherwise = None
        if self.at_word("ELSE"):
            self.pos += 1
            otherwise = self.expression()
        self.expect_word("END")
        return Case(operand, tuple(branches), otherwise)

    def type_name(self) -> str:
        token = self.take()
        if token.kind != "word":
            self.pos -= 1
            raise self.error("expected a type name, found")
        name = token.value.upper()
        if self.at_op("("):
            start = self.pos
            depth = 0
            while True:
                part = self.take()
                if part.is_op("("):
                    depth += 1
                elif part.is_op(")"):
                    depth -= 1
                    if depth == 0:
                        break
            name += "(" + ",".join(t.value for t in self.tokens[start + 1 : self.pos - 1] if not t.is_op(",")) + ")"
        if self.at_op("<"):
            raise self.error("complex types are not supported:")
        return name


def _number(text: str) -> Literal:
    body = text.upper()
    if body.endswith("L") and body[:-1].isdigit():
        return Literal(int(body[:-1]), "bigint")
    if body.isdigit():
        value = int(body)
        return Literal(value, "int" if value <= 2**31 - 1 else "bigint")
    if body.endswith("D") and not body.endswith("BD"):
        return Literal(float(body[:-1]), "double")
    if "E" in body:
        return Literal(float(body), "double")
    if body.endswith("BD"):
        body = body[:-2]
    if body.replace(".", "", 1).isdigit():
        return Literal(body, "decimal")
    raise SqlError(f"number literal {text!r} is not supported (only integers, decimals and doubles)")


def _negative_literal(literal: Literal) -> Literal:
    if literal.kind == "decimal":
        return Literal("-" + str(literal.value), "decimal")
    value = -literal.value  # type: ignore[operator]
    if literal.kind == "bigint" and value == -(2**31):
        return Literal(value, "int")
    return Literal(value, literal.kind)


def split_generated_columns(columns: str) -> tuple[str, dict[str, str]]:
    """A ``CREATE TABLE`` column list without its ``GENERATED ALWAYS AS (expr)`` clauses (Spark's schema parser
    does not take them), and column name -> expression text, as Delta stores it.

    Raises:
        SqlError: a ``GENERATED`` clause that is not ``GENERATED ALWAYS AS (expr)`` (identity columns:
            ``GENERATED ... AS IDENTITY``, are left in the text for whoever handles them).
    """
    tokens = tokenize(columns)
    kept: list[str] = []
    generated: dict[str, str] = {}
    last = 0
    depth = 0
    column_start = True
    column: str | None = None
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if column_start and token.kind in ("word", "quoted"):
            column = token.value
        column_start = False
        if token.is_op("(", "<"):
            depth += 1
        elif token.is_op(")", ">"):
            depth -= 1
        elif token.is_op(",") and depth == 0:
            column_start = True
        elif (
            depth == 0
            and token.is_word("GENERATED")
            and i + 3 < len(tokens)
            and tokens[i + 1].is_word("ALWAYS")
            and tokens[i + 2].is_word("AS")
            and tokens[i + 3].is_op("(")
        ):
            close = i + 3
            level = 0
            while close < len(tokens):
                if tokens[close].is_op("("):
                    level += 1
                elif tokens[close].is_op(")"):
                    level -= 1
                    if level == 0:
                        break
                close += 1
            if close >= len(tokens) or column is None:
                raise SqlError(f"GENERATED ALWAYS AS in {columns!r}: the expression's parentheses do not close")
            generated[column] = columns[tokens[i + 3].end : tokens[close].start].strip()
            kept.append(columns[last : token.start])
            last = tokens[close].end
            i = close + 1
            continue
        i += 1
    kept.append(columns[last:])
    return "".join(kept), generated


__all__ = [
    "Binary",
    "Call",
    "Case",
    "Cast",
    "Column",
    "Expr",
    "In",
    "IsNull",
    "Literal",
    "Unary",
    "catalyst_string",
    "column_references",
    "columns_of",
    "functions_of",
    "parse_expression",
    "split_generated_columns",
    "walk",
]
