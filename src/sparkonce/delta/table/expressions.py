"""Evaluating Spark SQL expressions over Arrow without Spark: what a Delta generated column's value is.

Executors write Delta data files from Arrow batches and run no Spark SQL, so the expressions a table stores
(``delta.generationExpression``) are parsed by :mod:`sparkonce.sqltext.expression` and evaluated here with
``pyarrow.compute``, with Spark's semantics in its default ANSI mode (Spark 4): integer overflow, division by zero and
a string that does not cast fail the write instead of giving null; ``/`` divides as doubles; ``%`` keeps the sign of
the dividend; ``CAST(timestamp AS DATE)`` and the date parts of a timestamp use the session time zone (which Spark
gives the Arrow batches' timestamp type).

The subset (docs/generated-columns.md): column references, literals, ``CAST`` between the numeric types, STRING,
DATE, TIMESTAMP and BOOLEAN, ``+ - * / % DIV``, ``||``, comparisons, ``AND OR NOT``, ``IS [NOT] NULL``, ``IN``,
``BETWEEN``, ``CASE``, and the functions in :data:`FUNCTIONS`. Anything else raises
:class:`~sparkonce.errors.UnsupportedFeatureError` naming it, and it does so on an empty batch too: the driver
checks an expression by evaluating it over zero rows of the table's schema (:func:`check_expression`) before any
data moves. An expression is never evaluated to something other than what Spark computes.

Runs on executors (and on the driver, to check an expression).

Why one module of ~770 lines: one evaluator of one expression tree; every function is a small case of one dispatch
over the node kinds, and Spark's ANSI semantics (overflow, casts, time zones, null propagation) stay in one place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import pyarrow as pa

from sparkonce.errors import ExpressionError, UnsupportedFeatureError
from sparkonce.sqltext.expression import Binary, Call, Case, Cast, Column, Expr, In, IsNull, Literal, Unary

Array: TypeAlias = pa.Array

_INTS = {"TINYINT": pa.int8(), "BYTE": pa.int8(), "SMALLINT": pa.int16(), "SHORT": pa.int16(), "INT": pa.int32(),
         "INTEGER": pa.int32(), "BIGINT": pa.int64(), "LONG": pa.int64()}  # fmt: skip
_FLOATS = {"FLOAT": pa.float32(), "REAL": pa.float32(), "DOUBLE": pa.float64()}
_DATE_UNITS = {"YEAR": "year", "YYYY": "year", "YY": "year", "QUARTER": "quarter", "MONTH": "month", "MM": "month",
               "MON": "month", "WEEK": "week"}  # fmt: skip
_TIME_UNITS = {**_DATE_UNITS, "DAY": "day", "DD": "day", "HOUR": "hour", "MINUTE": "minute", "SECOND": "second",
               "MILLISECOND": "millisecond", "MICROSECOND": "microsecond"}  # fmt: skip
_PATTERN_PARTS = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_PATTERN_LITERALS = set("-:/ ._,T")


def _pc() -> Any:
    import pyarrow.compute as pc

    return pc


class Evaluator:
    """Evaluates expressions over one Arrow table (a batch being written). Runs on executors."""

    def __init__(self, table: pa.Table, *, missing: pa.Schema | None = None, default_time_zone: str = "UTC") -> None:
        """``missing``: the table's columns, which read as null when the data lacks them (as in Delta)."""
        self.table = table
        self.rows = table.num_rows
        self._by_name = {name.lower(): i for i, name in enumerate(table.column_names)}
        self._missing = {f.name.lower(): f.type for f in missing} if missing is not None else {}
        self.time_zone = _batch_time_zone(table.schema) or default_time_zone

    def column(self, name: str) -> Array:
        index = self._by_name.get(name.lower())
        if index is None:
            kind = self._missing.get(name.lower())
            if kind is None:
                raise UnsupportedFeatureError(f"column {name!r} is not in the data {self.table.column_names}")
            return pa.nulls(self.rows, kind)
        return self.table.column(index).combine_chunks()

    def evaluate(self, expr: Expr) -> Array:
        """The expression's value for every row (an Arrow array of Spark's result type)."""
        if isinstance(expr, Column):
            return self.column(expr.name)
        if isinstance(expr, Literal):
            return self.literal(expr)
        if isinstance(expr, Cast):
            return self.cast(self.evaluate(expr.operand), expr.type_name)
        if isinstance(expr, Unary):
            value = self.evaluate(expr.operand)
            if expr.op == "NOT":
                return _pc().invert(self.boolean(value, "NOT"))
            _numeric(value, "unary -")
            return _checked(lambda: _pc().negate_checked(value), "unary -")
        if isinstance(expr, Binary):
            return self.binary(expr)
        if isinstance(expr, IsNull):
            value = self.evaluate(expr.operand)
            return _pc().is_valid(value) if expr.negated else _pc().is_null(value)
        if isinstance(expr, In):
            operand = self.evaluate(expr.operand)
            result = self.literal(Literal(False, "boolean"))
            for option in expr.values:
                result = _pc().or_kleene(result, self.compare("=", operand, self.evaluate(option)))
            return _pc().invert(result) if expr.negated else result
        if isinstance(expr, Case):
            return self.case(expr)
        if isinstance(expr, Call):
            handler = FUNCTIONS.get(expr.name)
            if handler is None:
                raise UnsupportedFeatureError(f"function {expr.name} is not supported by sparkonce's evaluator")
            return handler(self, expr.args)
        raise UnsupportedFeatureError(f"expression {expr!r} is not supported by sparkonce's evaluator")

    # -- values ------------------------------------------------------------------------------------------------------

    def literal(self, expr: Literal) -> Array:
        kind = expr.kind
        if kind == "decimal":
            raise UnsupportedFeatureError(
                f"the decimal literal {expr.value} (Spark computes it as a DECIMAL; write {expr.value}D for a "
                "DOUBLE) is not supported by sparkonce's evaluator"
            )
        types = {"int": pa.int32(), "bigint": pa.int64(), "double": pa.float64(), "string": pa.string(),
                 "boolean": pa.bool_(), "null": pa.null()}  # fmt: skip
        return pa.array([expr.value] * self.rows, types[kind])

    def boolean(self, value: Array, what: str) -> Array:
        if pa.types.is_null(value.type):
            return value.cast(pa.bool_())
        if not pa.types.is_boolean(value.type):
            raise UnsupportedFeatureError(f"{what} of a {value.type} value is not supported by sparkonce's evaluator")
        return value

    def binary(self, expr: Binary) -> Array:
        pc = _pc()
        left, right = self.evaluate(expr.left), self.evaluate(expr.right)
        op = expr.op
        if op == "AND":
            return pc.and_kleene(self.boolean(left, "AND"), self.boolean(right, "AND"))
        if op == "OR":
            return pc.or_kleene(self.boolean(left, "OR"), self.boolean(right, "OR"))
        if op == "||":
            return self.concat([left, right], skip_nulls=False)
        if op in ("=", "<>", "<", "<=", ">", ">=", "<=>"):
            return self.compare(op, left, right)
        if op in ("+", "-") and (pa.types.is_date32(left.type) or pa.types.is_date32(right.type)):
            return self.date_arithmetic(op, left, right)
        left, right = _unify_numbers(left, right, op)
        if op == "+":
            return _checked(lambda: pc.add_checked(left, right), op)
        if op == "-":
            return _checked(lambda: pc.subtract_checked(left, right), op)
        if op == "*":
            return _checked(lambda: pc.multiply_checked(left, right), op)
        if op == "/":
            return _checked(lambda: pc.divide_checked(left.cast(pa.float64()), right.cast(pa.float64())), op)
        if op == "%":
            return _remainder(left, right)
        if op == "DIV":
            return _integral_divide(left, right)
        raise UnsupportedFeatureError(f"operator {op} is not supported by sparkonce's evaluator")

    def compare(self, op: str, left: Array, right: Array) -> Array:
        pc = _pc()
        left, right = self._comparable(left, right, op)
        if op == "<=>":
            equal = pc.equal(left, right)
            both_null = pc.and_(pc.is_null(left), pc.is_null(right))
            return pc.if_else(pc.is_null(equal), both_null, equal)
        name = {"=": "equal", "<>": "not_equal", "<": "less", "<=": "less_equal", ">": "greater",
                ">=": "greater_equal"}[op]  # fmt: skip
        return getattr(pc, name)(left, right)

    def _comparable(self, left: Array, right: Array, op: str) -> tuple[Array, Array]:
        if pa.types.is_null(left.type):
            return left.cast(right.type), right
        if pa.types.is_null(right.type):
            return left, right.cast(left.type)
        if left.type == right.type:
            return left, right
        if _is_number(left.type) and _is_number(right.type):
            return _unify_numbers(left, right, op)
        for a, b, swap in ((left, right, False), (right, left, True)):
            if pa.types.is_string(b.type) and (pa.types.is_date32(a.type) or pa.types.is_timestamp(a.type)):
                cast = self.cast(b, "DATE") if pa.types.is_date32(a.type) else None
                if cast is not None:
                    return (cast, a) if swap else (a, cast)
            if pa.types.is_date32(b.type) and pa.types.is_timestamp(a.type):
                as_ts = self.cast(b, "TIMESTAMP")
                return (as_ts, a.cast(as_ts.type)) if swap else (a.cast(as_ts.type), as_ts)
        raise UnsupportedFeatureError(
            f"comparing a {left.type} value with a {right.type} value ({op}) is not supported by sparkonce's evaluator"
        )

    def date_arithmetic(self, op: str, left: Array, right: Array) -> Array:
        if pa.types.is_date32(left.type) and pa.types.is_integer(right.type) and right.type.bit_width <= 32:
            return _add_days(left, right if op == "+" else _pc().negate_checked(right))
        if op == "+" and pa.types.is_date32(right.type) and pa.types.is_integer(left.type):
            return _add_days(right, left)
        raise UnsupportedFeatureError(
            f"{left.type} {op} {right.type} is not supported by sparkonce's evaluator (DATE +/- INT only)"
        )

    def case(self, expr: Case) -> Array:
        pc = _pc()
        operand = self.evaluate(expr.operand) if expr.operand is not None else None
        conditions: list[Array] = []
        values: list[Array] = []
        for when, then in expr.branches:
            condition = self.evaluate(when)
            if operand is not None:
                condition = self.compare("=", operand, condition)
            conditions.append(pc.fill_null(self.boolean(condition, "CASE WHEN"), False))
            values.append(self.evaluate(then))
        otherwise = self.evaluate(expr.otherwise) if expr.otherwise is not None else self.literal(Literal(None, "null"))
        unified = _common([*values, otherwise], "CASE")
        if self.rows == 0:
            return unified[0]
        names = [f"c{i}" for i in range(len(conditions))]
        return pc.case_when(pc.make_struct(*conditions, field_names=names), *unified)

    def concat(self, values: list[Array], *, skip_nulls: bool) -> Array:
        strings = [self.as_string(v) for v in values]
        return _pc().binary_join_element_wise(
            *strings, pa.array([""] * self.rows, pa.string()), null_handling="skip" if skip_nulls else "emit_null"
        )

    def as_string(self, value: Array) -> Array:
        return value if pa.types.is_string(value.type) else self.cast(value, "STRING")

    # -- time --------------------------------------------------------------------------------------------------------

    def wall_clock(self, value: Array, what: str) -> Array:
        """Local date-time (a timestamp without time zone) of a DATE or TIMESTAMP, in the session time zone."""
        pc = _pc()
        if pa.types.is_timestamp(value.type):
            value = value.cast(pa.timestamp("us", value.type.tz))
            return pc.local_timestamp(value) if value.type.tz is not None else value
        if pa.types.is_date32(value.type):
            return value.cast(pa.timestamp("us"))
        if pa.types.is_string(value.type):
            return self.cast(value, "DATE").cast(pa.timestamp("us"))
        if pa.types.is_null(value.type):
            return value.cast(pa.timestamp("us"))
        raise UnsupportedFeatureError(f"{what} of a {value.type} value is not supported by sparkonce's evaluator")

    def from_wall_clock(self, local: Array) -> Array:
        """Timestamps (session time zone) of local date-times."""
        pc = _pc()
        if self.rows == 0:
            return local.cast(pa.timestamp("us", tz=self.time_zone))
        return pc.assume_timezone(local, self.time_zone, ambiguous="earliest", nonexistent="latest")

    def to_date(self, value: Array) -> Array:
        pc = _pc()
        if pa.types.is_date32(value.type):
            return value
        if pa.types.is_timestamp(value.type):
            return _floor_date(self.wall_clock(value, "CAST AS DATE"))
        if pa.types.is_null(value.type):
            return value.cast(pa.date32())
        if pa.types.is_string(value.type):
            return _parse_dates(value)
        del pc
        raise UnsupportedFeatureError(f"CAST of a {value.type} value AS DATE is not supported by sparkonce's evaluator")

    # -- casts -------------------------------------------------------------------------------------------------------

    def cast(self, value: Array, type_name: str) -> Array:
        pc = _pc()
        name = type_name.upper()
        if name == "DATE":
            return self.to_date(value)
        if name in ("STRING", "VARCHAR") or name.startswith(("VARCHAR(", "CHAR(")):
            return self.cast_string(value)
        if name in ("TIMESTAMP", "TIMESTAMP_LTZ"):
            if pa.types.is_timestamp(value.type) and value.type.tz is not None:
                return value
            if pa.types.is_date32(value.type) or (pa.types.is_timestamp(value.type) and value.type.tz is None):
                return self.from_wall_clock(value.cast(pa.timestamp("us")))
            if pa.types.is_null(value.type):
                return value.cast(pa.timestamp("us", tz=self.time_zone))
        elif name == "BOOLEAN":
            if pa.types.is_boolean(value.type) or pa.types.is_null(value.type):
                return value.cast(pa.bool_())
            if _is_number(value.type):
                return pc.not_equal(value, pa.scalar(0, value.type))
            if pa.types.is_string(value.type):
                return _parse_booleans(value)
        elif name in _INTS:
            target = _INTS[name]
            if pa.types.is_integer(value.type) or pa.types.is_boolean(value.type) or pa.types.is_null(value.type):
                return _checked(lambda: value.cast(target), f"CAST AS {name}")
            if pa.types.is_floating(value.type):
                if self.rows and pc.any(pc.is_nan(value)).as_py():
                    raise ExpressionError(f"[CAST_OVERFLOW] NaN cannot be cast to {name} due to an overflow")
                return _checked(lambda: pc.trunc(value).cast(target), f"CAST AS {name}")
            if pa.types.is_string(value.type):
                return _checked(lambda: pc.utf8_trim_whitespace(value).cast(target), f"CAST AS {name}")
            if pa.types.is_timestamp(value.type) and target == pa.int64():
                micros = value.cast(pa.timestamp("us", value.type.tz)).cast(pa.int64())
                return _floor_divide(micros, 1_000_000)
        elif name in _FLOATS:
            target = _FLOATS[name]
            if _is_number(value.type) or pa.types.is_boolean(value.type) or pa.types.is_null(value.type):
                return value.cast(target)
        raise UnsupportedFeatureError(
            f"CAST of a {value.type} value AS {type_name} is not supported by sparkonce's evaluator"
        )

    def cast_string(self, value: Array) -> Array:
        pc = _pc()
        kind = value.type
        if pa.types.is_string(kind):
            return value
        if pa.types.is_large_string(kind):
            return value.cast(pa.string())
        if pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_null(kind):
            return value.cast(pa.string())
        if pa.types.is_date32(kind):
            if self.rows and pc.any(pc.or_(pc.less(pc.year(value), 0), pc.greater(pc.year(value), 9999))).as_py():
                raise UnsupportedFeatureError("CAST of a date outside years 0-9999 AS STRING is not supported")
            return value.cast(pa.string())
        if pa.types.is_timestamp(kind):
            local = self.wall_clock(value, "CAST AS STRING")
            seconds = pc.strftime(pc.floor_temporal(local, unit="second").cast(pa.timestamp("s")), "%Y-%m-%d %H:%M:%S")
            micros = _floor_modulo(local.cast(pa.int64()), 1_000_000).to_pylist()
            fractions = ["" if m in (None, 0) else "." + f"{m:06d}".rstrip("0") for m in micros]
            return pc.binary_join_element_wise(seconds, pa.array(fractions, pa.string()), "")
        raise UnsupportedFeatureError(f"CAST of a {kind} value AS STRING is not supported by sparkonce's evaluator")


# -- functions ---------------------------------------------------------------------------------------------------------


def _arity(name: str, args: tuple[Expr, ...], *counts: int) -> None:
    if len(args) not in counts:
        raise UnsupportedFeatureError(f"{name} takes {' or '.join(map(str, counts))} argument(s), got {len(args)}")


def _string_literal(name: str, arg: Expr) -> str:
    if not isinstance(arg, Literal) or arg.kind != "string":
        raise UnsupportedFeatureError(f"{name}: the format or unit must be a string literal")
    return str(arg.value)


def _int_literal(name: str, arg: Expr) -> int:
    if not isinstance(arg, Literal) or arg.kind not in ("int", "bigint"):
        raise UnsupportedFeatureError(f"{name}: positions and lengths must be integer literals")
    value = arg.value
    assert isinstance(value, int)
    return value


def _date_part(part: str) -> Callable[[Evaluator, tuple[Expr, ...]], Array]:
    def evaluate(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
        pc = _pc()
        _arity(part, args, 1)
        value = ev.evaluate(args[0])
        if part in ("HOUR", "MINUTE", "SECOND") and not (
            pa.types.is_timestamp(value.type) or pa.types.is_null(value.type)
        ):
            raise UnsupportedFeatureError(f"{part} of a {value.type} value is not supported")
        local = ev.wall_clock(value, part)
        functions = {
            "YEAR": pc.year, "MONTH": pc.month, "DAY": pc.day, "DAYOFMONTH": pc.day, "HOUR": pc.hour,
            "MINUTE": pc.minute, "SECOND": pc.second, "QUARTER": pc.quarter, "DAYOFYEAR": pc.day_of_year,
            "DAYOFWEEK": lambda a: pc.day_of_week(a, count_from_zero=False, week_start=7),
            "WEEKDAY": pc.day_of_week, "WEEKOFYEAR": pc.iso_week,
        }  # fmt: skip
        return functions[part](local).cast(pa.int32())

    return evaluate


def _date_format(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    pc = _pc()
    _arity("DATE_FORMAT", args, 2)
    pattern = _strftime_pattern("DATE_FORMAT", _string_literal("DATE_FORMAT", args[1]))
    local = ev.wall_clock(ev.evaluate(args[0]), "DATE_FORMAT")
    # strftime costs ~2 us a row: format each distinct value once, at the finest unit the pattern shows
    unit = next((u for code, u in (("%S", "second"), ("%M", "minute"), ("%H", "hour")) if code in pattern), "day")
    floored = pc.floor_temporal(local, unit=unit) if ev.rows else local
    if unit == "second":  # mostly distinct values: a dictionary would cost more than it saves
        return pc.strftime(floored.cast(pa.timestamp("s")), pattern)
    encoded = pc.dictionary_encode(floored)
    formatted = pc.strftime(encoded.dictionary.cast(pa.timestamp("s")), pattern)
    return formatted.take(encoded.indices)


def _strftime_pattern(name: str, pattern: str) -> str:
    """Spark's datetime pattern as strftime's, for the letters in :data:`_PATTERN_PARTS` and literal separators."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        part = next((p for p in _PATTERN_PARTS if pattern.startswith(p, i)), None)
        if part is not None and not pattern.startswith(part + part[-1], i):
            out.append(_PATTERN_PARTS[part])
            i += len(part)
        elif pattern[i] == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise UnsupportedFeatureError(f"{name}: unterminated quote in the pattern {pattern!r}")
            out.append(pattern[i + 1 : end].replace("%", "%%") if end > i + 1 else "'")
            i = end + 1
        elif pattern[i] in _PATTERN_LITERALS:
            out.append(pattern[i])
            i += 1
        else:
            raise UnsupportedFeatureError(
                f"{name}: the pattern {pattern!r} is not supported by sparkonce's evaluator (letters yyyy, MM, dd, "
                f"HH, mm, ss and the separators {''.join(sorted(_PATTERN_LITERALS))!r} only)"
            )
    return "".join(out)


def _date_trunc(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    pc = _pc()
    _arity("DATE_TRUNC", args, 2)
    unit = _TIME_UNITS.get(_string_literal("DATE_TRUNC", args[0]).upper())
    if unit is None:
        raise UnsupportedFeatureError(f"DATE_TRUNC: unit {args[0]} is not supported")
    value = ev.evaluate(args[1])
    if pa.types.is_timestamp(value.type) and value.type.tz is None:
        raise UnsupportedFeatureError("DATE_TRUNC of a TIMESTAMP_NTZ value is not supported")
    local = ev.wall_clock(value, "DATE_TRUNC")
    floored = pc.floor_temporal(local, unit=unit, week_starts_monday=True) if ev.rows else local
    return ev.from_wall_clock(floored)


def _trunc(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    pc = _pc()
    _arity("TRUNC", args, 2)
    unit = _DATE_UNITS.get(_string_literal("TRUNC", args[1]).upper())
    if unit is None:
        raise UnsupportedFeatureError(f"TRUNC: unit {args[1]} is not supported")
    local = ev.wall_clock(ev.to_date(ev.evaluate(args[0])), "TRUNC")
    floored = pc.floor_temporal(local, unit=unit, week_starts_monday=True) if ev.rows else local
    return _floor_date(floored)


def _to_date(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    pc = _pc()
    _arity("TO_DATE", args, 1, 2)
    value = ev.evaluate(args[0])
    if len(args) == 1:
        return ev.to_date(value)
    pattern = _strftime_pattern("TO_DATE", _string_literal("TO_DATE", args[1]))
    if not pa.types.is_string(value.type):
        raise UnsupportedFeatureError(f"TO_DATE with a format of a {value.type} value is not supported")
    if ev.rows == 0:
        return value.cast(pa.date32())
    parsed = _checked(lambda: pc.strptime(value, format=pattern, unit="s", error_is_null=False), "TO_DATE")
    return _floor_date(parsed)


def _date_add(sign: int) -> Callable[[Evaluator, tuple[Expr, ...]], Array]:
    def evaluate(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
        _arity("DATE_ADD", args, 2)
        days = ev.evaluate(args[1])
        if not pa.types.is_integer(days.type) or days.type.bit_width > 32:
            raise UnsupportedFeatureError(f"DATE_ADD/DATE_SUB with {days.type} days is not supported")
        return _add_days(ev.to_date(ev.evaluate(args[0])), days if sign > 0 else _pc().negate_checked(days))

    return evaluate


def _datediff(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    _arity("DATEDIFF", args, 2)
    end, start = (ev.to_date(ev.evaluate(a)).cast(pa.int32()) for a in args)
    return _pc().subtract(end, start)


def _concat(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    if not args:
        return pa.array([""] * ev.rows, pa.string())
    return ev.concat([ev.evaluate(a) for a in args], skip_nulls=False)


def _concat_ws(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    if not args:
        raise UnsupportedFeatureError("CONCAT_WS needs a separator")
    separator = _string_literal("CONCAT_WS", args[0])
    values = [ev.as_string(ev.evaluate(a)) for a in args[1:]]
    if not values:
        return pa.array([""] * ev.rows, pa.string())
    rows = zip(*(v.to_pylist() for v in values), strict=True)
    return pa.array([separator.join(p for p in parts if p is not None) for parts in rows], pa.string())


def _substring(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    pc = _pc()
    _arity("SUBSTRING", args, 2, 3)
    value = ev.as_string(ev.evaluate(args[0]))
    pos = _int_literal("SUBSTRING", args[1])
    length = _int_literal("SUBSTRING", args[2]) if len(args) == 3 else None
    if length is not None and length <= 0:
        return pc.if_else(pc.is_null(value), value, pa.array([""] * ev.rows, pa.string()))
    # Spark: 1-based, 0 reads as 1, a negative position counts from the end (Python's slices clip the same way)
    start = pos - 1 if pos > 0 else pos
    if length is None:
        return pc.utf8_slice_codeunits(value, start=start)
    stop = start + length
    if pos < 0 and stop >= 0:
        return pc.utf8_slice_codeunits(value, start=start)
    return pc.utf8_slice_codeunits(value, start=start, stop=stop)


def _string_function(name: str) -> Callable[[Evaluator, tuple[Expr, ...]], Array]:
    def evaluate(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
        pc = _pc()
        _arity(name, args, 1)
        value = ev.as_string(ev.evaluate(args[0]))
        if name in ("LOWER", "LCASE"):
            return pc.utf8_lower(value)
        if name in ("UPPER", "UCASE"):
            return pc.utf8_upper(value)
        if name == "TRIM":
            return pc.utf8_trim(value, characters=" ")
        if name == "LTRIM":
            return pc.utf8_ltrim(value, characters=" ")
        if name == "RTRIM":
            return pc.utf8_rtrim(value, characters=" ")
        return pc.utf8_length(value).cast(pa.int32())

    return evaluate


def _coalesce(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    if not args:
        raise UnsupportedFeatureError("COALESCE needs arguments")
    values = _common([ev.evaluate(a) for a in args], "COALESCE")
    return _pc().coalesce(*values)


def _if(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    _arity("IF", args, 3)
    return ev.case(Case(None, ((args[0], args[1]),), args[2]))


def _abs(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
    _arity("ABS", args, 1)
    value = ev.evaluate(args[0])
    _numeric(value, "ABS")
    return _checked(lambda: _pc().abs_checked(value), "ABS")


def _rounding(name: str) -> Callable[[Evaluator, tuple[Expr, ...]], Array]:
    def evaluate(ev: Evaluator, args: tuple[Expr, ...]) -> Array:
        pc = _pc()
        _arity(name, args, 1)
        value = ev.evaluate(args[0])
        _numeric(value, name)
        if pa.types.is_integer(value.type):
            return value.cast(pa.int64())
        rounded = pc.floor(value) if name == "FLOOR" else pc.ceil(value)
        return _checked(lambda: rounded.cast(pa.int64()), name)

    return evaluate


FUNCTIONS: Mapping[str, Callable[[Evaluator, tuple[Expr, ...]], Array]] = {
    **{part: _date_part(part) for part in ("YEAR", "MONTH", "DAY", "DAYOFMONTH", "HOUR", "MINUTE", "SECOND",
                                           "QUARTER", "DAYOFYEAR", "DAYOFWEEK", "WEEKDAY", "WEEKOFYEAR")},
    "DATE_FORMAT": _date_format,
    "DATE_TRUNC": _date_trunc,
    "TRUNC": _trunc,
    "TO_DATE": _to_date,
    "DATE_ADD": _date_add(1),
    "DATE_SUB": _date_add(-1),
    "DATEDIFF": _datediff,
    "CONCAT": _concat,
    "CONCAT_WS": _concat_ws,
    "SUBSTRING": _substring,
    "SUBSTR": _substring,
    **{name: _string_function(name) for name in ("LOWER", "LCASE", "UPPER", "UCASE", "TRIM", "LTRIM", "RTRIM",
                                                 "LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH")},
    "COALESCE": _coalesce,
    "IFNULL": _coalesce,
    "NVL": _coalesce,
    "IF": _if,
    "ABS": _abs,
    "FLOOR": _rounding("FLOOR"),
    "CEIL": _rounding("CEIL"),
    "CEILING": _rounding("CEIL"),
}  # fmt: skip
"""The functions sparkonce evaluates, by Spark's (upper-case) name."""


# -- helpers -----------------------------------------------------------------------------------------------------------


def _batch_time_zone(schema: pa.Schema) -> str | None:
    """Spark hands Arrow batches with timestamps in the session time zone: the first one found."""
    for field in schema:
        if pa.types.is_timestamp(field.type) and field.type.tz is not None:
            return str(field.type.tz)
    return None


def _is_number(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))


def _numeric(value: Array, what: str) -> None:
    if not (_is_number(value.type) or pa.types.is_null(value.type)):
        raise UnsupportedFeatureError(f"{what} of a {value.type} value is not supported by sparkonce's evaluator")


def _unify_numbers(left: Array, right: Array, op: str) -> tuple[Array, Array]:
    """Spark's widening of two numeric operands (null literals take the other side's type)."""
    if pa.types.is_null(left.type) and _is_number(right.type):
        return left.cast(right.type), right
    if pa.types.is_null(right.type) and _is_number(left.type):
        return left, right.cast(left.type)
    if not (_is_number(left.type) and _is_number(right.type)):
        raise UnsupportedFeatureError(
            f"{left.type} {op} {right.type} is not supported by sparkonce's evaluator (numbers only)"
        )
    if left.type == right.type:
        return left, right
    if pa.types.is_floating(left.type) or pa.types.is_floating(right.type):
        # Spark: DOUBLE wins; FLOAT with FLOAT or with an integer stays FLOAT
        target = pa.float64() if pa.float64() in (left.type, right.type) else pa.float32()
    else:
        target = max(left.type, right.type, key=lambda t: t.bit_width)
    return left.cast(target), right.cast(target)


def _common(values: list[Array], what: str) -> list[Array]:
    """The values as one type (CASE branches, COALESCE arguments): Spark's widening for numbers."""
    typed = [v.type for v in values if not pa.types.is_null(v.type)]
    if not typed:
        return values
    target = typed[0]
    for kind in typed[1:]:
        if kind == target:
            continue
        if _is_number(kind) and _is_number(target):
            target = _unify_numbers(pa.array([], target), pa.array([], kind), what)[0].type
            continue
        raise UnsupportedFeatureError(
            f"{what} over {target} and {kind} values is not supported by sparkonce's evaluator"
        )
    return [v.cast(target) for v in values]


def _checked(compute: Callable[[], Array], what: str) -> Array:
    try:
        return compute()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        text = str(err)
        if "zero" in text.lower():
            raise ExpressionError(f"[DIVIDE_BY_ZERO] Division by zero ({what})") from err
        if "overflow" in text.lower() or "out of bounds" in text.lower() or "would lose data" in text.lower():
            raise ExpressionError(f"[ARITHMETIC_OVERFLOW] {what}: {text}") from err
        raise ExpressionError(f"[CAST_INVALID_INPUT] {what}: {text}") from err


def _to_numpy(value: Array) -> Any:
    return value.fill_null(0).to_numpy(zero_copy_only=False)


def _remainder(left: Array, right: Array) -> Array:
    import numpy as np

    pc = _pc()
    valid = pc.and_(pc.is_valid(left), pc.is_valid(right))
    a, b = _to_numpy(left), _to_numpy(right)
    mask = valid.to_numpy(zero_copy_only=False)
    if pa.types.is_integer(left.type):
        if (mask & (b == 0)).any():
            raise ExpressionError("[DIVIDE_BY_ZERO] Division by zero (%)")
        result = np.fmod(a, np.where(b == 0, 1, b))
    else:
        if (mask & (b == 0)).any():
            raise ExpressionError("[DIVIDE_BY_ZERO] Division by zero (%)")
        result = np.fmod(a, b)
    return pa.array(result, left.type, mask=~mask)


def _integral_divide(left: Array, right: Array) -> Array:
    import numpy as np

    pc = _pc()
    if not (pa.types.is_integer(left.type) and pa.types.is_integer(right.type)):
        raise UnsupportedFeatureError("DIV of non-integer values is not supported by sparkonce's evaluator")
    valid = pc.and_(pc.is_valid(left), pc.is_valid(right)).to_numpy(zero_copy_only=False)
    a, b = _to_numpy(left.cast(pa.int64())), _to_numpy(right.cast(pa.int64()))
    if (valid & (b == 0)).any():
        raise ExpressionError("[DIVIDE_BY_ZERO] Division by zero (DIV)")
    b = np.where(b == 0, 1, b)
    quotient = np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)
    return pa.array(quotient, pa.int64(), mask=~valid)


def _floor_divide(value: Array, by: int) -> Array:
    import numpy as np

    valid = _pc().is_valid(value).to_numpy(zero_copy_only=False)
    return pa.array(np.floor_divide(_to_numpy(value), by), pa.int64(), mask=~valid)


def _floor_modulo(value: Array, by: int) -> Array:
    import numpy as np

    valid = _pc().is_valid(value).to_numpy(zero_copy_only=False)
    return pa.array(np.mod(_to_numpy(value), by), pa.int64(), mask=~valid)


def _floor_date(local: Array) -> Array:
    """The dates of local date-times (days since the epoch, floored: also before 1970)."""
    micros = local.cast(pa.timestamp("us")).cast(pa.int64())
    return _floor_divide(micros, 86_400_000_000).cast(pa.int32()).cast(pa.date32())


def _add_days(dates: Array, days: Array) -> Array:
    summed = _checked(lambda: _pc().add_checked(dates.cast(pa.int32()), days.cast(pa.int32())), "DATE_ADD")
    return summed.cast(pa.date32())


_DATE_TEXT = re.compile(r"([+-]?\d{4,7})(?:-(\d{1,2})(?:-(\d{1,2})(?:[T ].*)?)?)?")


def _parse_dates(value: Array) -> Array:
    """Spark's string to DATE (``yyyy``, ``yyyy-[m]m``, ``yyyy-[m]m-[d]d`` with an optional time after ``T`` or a
    space); anything else fails, as in ANSI mode."""
    import datetime as dt

    out: list[dt.date | None] = []
    for text in value.to_pylist():
        if text is None:
            out.append(None)
            continue
        match = _DATE_TEXT.fullmatch(text.strip())
        try:
            if match is None:
                raise ValueError(text)
            out.append(dt.date(int(match[1]), int(match[2] or 1), int(match[3] or 1)))
        except ValueError as err:
            raise ExpressionError(
                f'[CAST_INVALID_INPUT] The value \'{text}\' of the type "STRING" cannot be cast to "DATE"'
            ) from err
    return pa.array(out, pa.date32())


_TRUE = {"t", "true", "y", "yes", "1"}
_FALSE = {"f", "false", "n", "no", "0"}


def _parse_booleans(value: Array) -> Array:
    out: list[bool | None] = []
    for text in value.to_pylist():
        if text is None:
            out.append(None)
            continue
        word = text.strip().lower()
        if word not in _TRUE | _FALSE:
            raise ExpressionError(
                f'[CAST_INVALID_INPUT] The value \'{text}\' of the type "STRING" cannot be cast to "BOOLEAN"'
            )
        out.append(word in _TRUE)
    return pa.array(out, pa.bool_())


def check_expression(expr: Expr, schema: pa.Schema) -> pa.DataType:
    """Evaluate ``expr`` over zero rows of ``schema``: its result type, or the error a write would raise.

    Raises:
        UnsupportedFeatureError: the expression is outside the subset sparkonce evaluates.
    """
    return Evaluator(schema.empty_table()).evaluate(expr).type


__all__ = ["FUNCTIONS", "Evaluator", "check_expression"]
