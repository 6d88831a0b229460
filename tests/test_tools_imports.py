"""tools/ never imports tests/: the benchmarks and tests share tools/harness/, and tests may import it, not the reverse."""

from __future__ import annotations

import ast
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent / "tools"


def imports_of_tests(path: Path) -> list[str]:
    """`line: statement` for every import of `tests` (or a module under it) anywhere in the file, functions included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names = [node.module]
        else:
            continue
        if any(name == "tests" or name.startswith("tests.") for name in names):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_tools_never_import_tests() -> None:
    files = sorted(TOOLS.rglob("*.py"))
    assert len(files) > 10, "the tools/ scripts must be found"
    offenders = {str(path.relative_to(TOOLS.parent)): found for path in files if (found := imports_of_tests(path))}
    assert not offenders, f"tools/ imports tests/ (move what both need into tools/harness/): {offenders}"


def test_the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text("import os\n\ndef main():\n    from tests import onnx_models\n    import tests.broker as b\n")
    assert imports_of_tests(script) == ["4: from tests import onnx_models", "5: import tests.broker as b"]
