"""No function of the package passes 60 lines: a function that long does several jobs.

Counted over the package's syntax tree as end_lineno - lineno + 1 of each def (its docstring
included, and the lines of any function nested in it, which is counted on its own too).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ado_actuators" / "sfttrainer"
LIMIT = 60
EXCEPTIONS: dict[str, str] = {}
"""`module/path.py:function` -> why it may pass the limit (a data table, nothing else). Empty."""


def function_lengths(root: Path) -> dict[str, int]:
    """`module/path.py:function` -> its length in lines (the longest of that name)."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{path.relative_to(root).as_posix()}:{node.name}"
                found[name] = max(found.get(name, 0), node.end_lineno - node.lineno + 1)
    return found


def over_the_limit(lengths: dict[str, int]) -> dict[str, int]:
    return {n: k for n, k in sorted(lengths.items()) if k > LIMIT and n not in EXCEPTIONS}


def test_no_function_passes_sixty_lines():
    too_long = over_the_limit(function_lengths(PACKAGE))
    assert too_long == {}, f"functions over {LIMIT} lines (split them): {too_long}"


def test_every_exception_is_still_needed_and_says_why():
    lengths = function_lengths(PACKAGE)
    for name, why in EXCEPTIONS.items():
        assert lengths.get(name, 0) > LIMIT, f"{name} is no longer over {LIMIT} lines"
        assert why.strip(), f"{name} needs its reason"


def test_the_count_takes_the_docstring_the_body_and_nested_functions_not_decorators(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT - 5))
    (tmp_path / "layer").mkdir()
    (tmp_path / "layer" / "m.py").write_text(
        "import functools\n\n\n"
        "@functools.cache\n"
        f"def long():\n    '''Doc.'''\n{body}    def inner():\n        return 1\n\n"
        f"    return inner\n\n\n"
        f"def short():\n{body}"
    )
    lengths = function_lengths(tmp_path)
    assert lengths == {
        "layer/m.py:long": LIMIT + 1,
        "layer/m.py:inner": 2,
        "layer/m.py:short": LIMIT - 4,
    }
    assert over_the_limit(lengths) == {"layer/m.py:long": LIMIT + 1}
