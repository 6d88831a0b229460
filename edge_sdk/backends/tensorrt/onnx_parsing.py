"""TensorRT's ONNX parser errors, one line per failing node: its index, name and operator (names and
operators come from the parser from TensorRT 10; before, the node index is looked up in the model)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .versions import TensorRTVersion


@dataclass(frozen=True)
class ParserProblem:
    node: int
    """Index of the node in the graph; -1 when the error is not about one node."""
    node_name: str
    operator: str
    description: str
    code: str

    def line(self) -> str:
        if self.node < 0:
            return f"{self.description} ({self.code})"
        name = f" '{self.node_name}'" if self.node_name else ""
        operator = f" ({self.operator})" if self.operator else ""
        return f"node {self.node}{name}{operator}: {self.description} ({self.code})"


def read_parser_problems(
    parser: Any, version: TensorRTVersion, nodes: Sequence[tuple[str, str]]
) -> list[ParserProblem]:
    """Every error the parser recorded; `nodes` is the model's (name, op_type) per node index, used where
    this TensorRT's ParserError has no node_name/node_operator (before 10.0)."""
    problems = []
    for index in range(parser.num_errors):
        error = parser.get_error(index)
        node = int(error.node())
        if version.major >= 10:
            name, operator = str(error.node_name()), str(error.node_operator())
        else:
            name, operator = nodes[node] if 0 <= node < len(nodes) else ("", "")
        code = getattr(error.code(), "name", str(error.code()))
        problems.append(ParserProblem(node, name, operator, str(error.desc()), code))
    return problems


def problems_paragraph(model_name: str, problems: Sequence[ParserProblem], limit: int = 20) -> str:
    lines = [f"TensorRT's ONNX parser refused {model_name} ({len(problems)} errors):"]
    lines += [f"  {problem.line()}" for problem in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"  ... and {len(problems) - limit} more")
    return "\n".join(lines)
