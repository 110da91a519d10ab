# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The tiny expression language of scenario expectations (spec/CONFORMANCE.md, "Values").

    3                       a number
    "RUNNING"               an enum name, resolved through the field's enum (generated ABI)
    "prev + 1"              the field's value before the step, plus one
    "preempt_seq"           another field of the same SCB (or header), as it is after the step
    "pid", "tid"            the agent's process id (hello) and the thread it registered (register reply)
    "escapable_default"     the spec's escapable default for the agent's runtime_kind
    "reply.yields"          a field of this step's reply
    "last_ack_seq <= preempt_seq"   comparisons, in expect.check

Only names, integers, + - * / (integer) and comparisons are allowed: it is parsed with `ast` and walked, never eval'd.
"""

from __future__ import annotations

import ast
import operator

from abi import enum_of_field

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.floordiv,
        ast.FloorDiv: operator.floordiv}
_CMP = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}


class ExprError(Exception):
    pass


def evaluate(text: str, names: dict, field_name: str | None = None):
    if isinstance(text, bool):
        return int(text)
    if isinstance(text, int):
        return text
    if not isinstance(text, str):
        raise ExprError(f"{text!r} is neither a number nor an expression")
    if field_name is not None:
        cls = enum_of_field(field_name)
        if cls is not None and text in cls.__members__:
            return int(cls[text])
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ExprError(f"cannot parse expression {text!r}") from None
    return _walk(tree.body, names, text)


def _walk(node, names, text):
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ExprError(f"{text!r}: unknown name {node.id!r}")
        return names[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "reply":
        reply = names.get("reply", {})
        if node.attr not in reply:
            raise ExprError(f"{text!r}: the reply has no field {node.attr!r}")
        return reply[node.attr]
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        return _BIN[type(node.op)](_walk(node.left, names, text), _walk(node.right, names, text))
    if isinstance(node, ast.Compare):
        left = _walk(node.left, names, text)
        for op, right_node in zip(node.ops, node.comparators):
            if type(op) not in _CMP:
                raise ExprError(f"{text!r}: comparison {type(op).__name__} is not allowed")
            right = _walk(right_node, names, text)
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True
    raise ExprError(f"{text!r}: only numbers, names, + - * / and comparisons are allowed")
