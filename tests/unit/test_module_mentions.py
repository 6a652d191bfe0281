"""Every module path that a comment, docstring or doc names is a module that exists.

The package was reorganised several times, and text that names a module by an old path
misleads the reader who follows it. This test reads the package's files, the docs, the
benchmarks, the tests and the examples (every file whole: code, comments and docstrings
alike) and checks four kinds of mention:

(a) a file path ending in `.py` (`space/preview.py`, `benchmarks/calibration.py`, a bare
    `peak.py`). It resolves when a file exists at that path relative to the repository root,
    to the package, to the mentioning file's directory or to its layer, or when some real file's
    path ends with it (a bare name, or a path from inside a layer, may stand for the whole path).
    A bare name that is a whole string literal (a file a test writes) is data, not a mention.
(b) a dotted name under the package (its dotted name, then a layer, a module, perhaps an
    attribute). The rule: take the longest prefix that is a module or a package; what follows,
    if anything, must begin with a name that module defines at its top level (a function,
    class, assignment or import). So a moved module cannot pass as an "attribute" of its old
    layer, and a moved function is caught too.
(c) a slash path that starts with one of the package's layers, with an attribute, a trailing
    slash, two slashes or a backtick to show it is a path (`engine/settings.MeasurementSettings`,
    `plan/launch/environments.vision_problem`, `space/`): the path before the first dot of its
    last component must be a module or package of the package, which defines the attribute, or
    the whole a file or directory (`plan/packages/transformers-loss.yaml`), or a glob matching one.
(d) a former module's name (FORMER_MODULES, from the package's history) anywhere, but where
    a file imports a module under that name and uses it in code.

Text inside a URL is skipped, and so are other projects' paths (FOREIGN, FOREIGN_FILES) and the
made-up files tests write (FIXTURES). The checker is tested on made-up mentions of each kind
first, so the scan of the real files cannot pass by finding nothing.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "ado_actuators" / "sfttrainer"
DOTTED = "ado_actuators" + ".sfttrainer"

SCANNED = (
    "ado_actuators/sfttrainer/**/*.py",
    "ado_actuators/sfttrainer/**/*.md",
    "ado_actuators/sfttrainer/**/*.yaml",
    "docs/**/*.md",
    "docs/**/*.py",
    "README.md",
    "mkdocs.yml",
    "Makefile",
    "pyproject.toml",
    "benchmarks/**/*.py",
    "benchmarks/**/*.md",
    "tests/**/*.py",
    "tests/**/*.md",
    "examples/**/*",
)
SKIPPED_DIRS = {".venv", ".git", "site", "__pycache__", ".mypy_cache", ".ruff_cache", ".hypothesis"}

FOREIGN = (
    # fms-hf-tuning, which the trainer runs: tuning/sft_trainer.py and its config modules
    "tuning/",
    # upstream libraries whose source the comments point into (their module paths, not ours)
    "transformers/",
    "torch/",
    "peft/",
    "accelerate/",
    "trl/",
    "fms_acceleration",
    "fms_mo/",
    "aim/",
    "ray/",
    # ado itself (orchestrator, not this package): ado/modules/..., ado/core/...
    "ado/",
    # ado's TRIM operator, a plugin package of its own (trim/missing_target.py)
    "trim/",
    # an installed package's path, whichever it is
    "site-packages/",
    "dist-packages/",
)
"""Path prefixes that name other projects' modules: these mentions are not ours to resolve."""

FOREIGN_FILES = {
    # setuptools' and coverage.py's own names
    "setup.py",
    "coverage.py",
    # fms-hf-tuning: its trainer, and scripts/benchmarks/benchmark.py
    "sft_trainer.py",
    "benchmark.py",
    # transformers' loss/loss_utils.py; flash-attn's interface and benchmark; mamba_ssm's kernels
    "loss_utils.py",
    "flash_attn_interface.py",
    "benchmark_flash_attention.py",
    "ssd_combined.py",
    # transformers' Granite 4.0 hybrid and LLaVA-NeXT processor (plan/model/mamba.py, vision.py)
    "modeling_granitemoehybrid.py",
    "processing_llava_next.py",
    # transformers' model types per release (plan/model/releases.build_problem)
    "configuration_auto.py",
    # fms-acceleration's fused ops; Liger-Kernel's convergence tests; ml-engineering's mamf-finder
    "fused_ops_and_kernels.py",
    "test_mini_models.py",
    "mamf-finder.py",
    # llm-foundry's benchmark launcher (its tables' attn_impl; benchmarks/throughput_validation.py)
    "submit_benchmarks.py",
    # Qwen's modeling code and GenZ-LLM-Analyzer's copy of Qwen's configs (the same benchmark)
    "modeling_qwen.py",
    "alibaba.py",
    # the model sources catalog/model_shapes.yaml cites (mlc-llm, a model card's scripts)
    "model_preset.py",
    "hash_models.py",
    "convert_weights.py",
}
"""Upstream modules named by their file (any directory): fms-hf-tuning's, transformers', ...."""

FIXTURES = {
    "tests/unit/test_coverage_summary.py": {"b.py", "c.py", "d.py"},
    "tests/unit/test_function_length.py": {"layer/m.py", "module/path.py"},
    "tests/unit/test_failure_reasons.py": {"_api.py"},
}
"""Made-up files a test's data names inside longer strings (a bare name that is a whole string
literal, such as a file a test writes under tmp_path, is data wherever it is and not checked)."""

FORMER_MODULES = (
    "logits_memory",
    "memory_peak",
    "memory_check",
    "speed_check",
    "step_trace",
    "traced_parts",
    "ray_tasks",
)
"""Module names the package used before its reorganisations and no longer has (git log
--name-status, deleted or renamed .py files), kept when they cannot be read as plain words."""

FORMER_LAYERS = ("testing",)
"""Layers the package once had: a path starting with one is checked like a current layer's."""

URL = re.compile(r"\b(?:https?|file)://\S+")
PY_PATH = re.compile(r"(?<![\w./@-])((?:\.{1,2}/)?(?:[\w.-]+/)*[A-Za-z_][\w-]*\.py)(?![\w-])")
DOTTED_NAME = re.compile(r"(?<![\w.])" + re.escape(DOTTED) + r"((?:\.[A-Za-z_]\w*)*)")
SLASH_PATH = re.compile(r"(?<![\w./@:-])([A-Za-z_]\w*(?:/[\w.*-]*[\w*-])+/?|[A-Za-z_]\w*/)")
FORMER = re.compile(r"(?<![\w./-])(" + "|".join(FORMER_MODULES) + r")\b(?!\.py\b)")


@cache
def layers() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")} | set(FORMER_LAYERS)


@cache
def all_files() -> tuple[str, ...]:
    """Every file of the repository (but its virtualenv, git and build dirs), as a posix path."""
    found = []
    for directory, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        base = Path(directory).relative_to(REPO)
        found.extend((base / name).as_posix() for name in files)
    return tuple(found)


def scanned_files() -> list[Path]:
    files = set()
    for pattern in SCANNED:
        for path in REPO.glob(pattern):
            if path.is_file() and not SKIPPED_DIRS & set(path.relative_to(REPO).parts):
                files.add(path)
    return sorted(files)


@cache
def top_level_names(module: Path) -> frozenset[str]:
    """The names a module defines or imports at its top level (in if/try blocks too)."""
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit(getattr(node, field, []) or [])

    visit(ast.parse(module.read_text()).body)
    return frozenset(names)


def _module(parts: list[str]) -> tuple[Path | None, list[str]]:
    """The longest prefix of `parts` (under the package) that is a module or a package."""
    found, rest = None, list(parts)
    for i in range(len(parts) + 1):
        base = PACKAGE.joinpath(*parts[:i])
        if i and base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), parts[i:]
        if (base / "__init__.py").is_file():
            found, rest = base / "__init__.py", parts[i:]
        else:
            break
    return found, rest


def _defines(module: Path, rest: list[str]) -> bool:
    return not rest or rest[0] in top_level_names(module)


def _foreign(path: str) -> bool:
    return (
        path.startswith(FOREIGN) or "site-packages/" in path or path.split("/")[-1] in FOREIGN_FILES
    )


def resolves_py(path: str, where: Path) -> bool:
    """Whether a `.py` path mentioned in file `where` names a file that exists."""
    path = path.removeprefix("./")
    if _foreign(path):
        return True
    bases = [REPO, PACKAGE, where.parent]
    if PACKAGE in where.parents:
        bases.append(PACKAGE / where.relative_to(PACKAGE).parts[0])
    if any((base / path).is_file() for base in bases):
        return True
    if path.startswith("../"):
        return (where.parent / path).resolve().is_file()
    return any(f == path or f.endswith("/" + path) for f in all_files())


def resolves_dotted(tail: str) -> bool:
    """Whether `<package>` + tail names a module, or a module and a name it defines."""
    module, rest = _module([p for p in tail.split(".") if p])
    return module is not None and _defines(module, rest)


def resolves_slash(path: str, where: Path) -> bool:
    """Whether `layer/.../name[.attr]` names a module, package or file of the package (and the
    module defines `attr`)."""
    path = path.removeprefix("ado_actuators/sfttrainer/").rstrip("/")
    if "*" in path:  # a glob: plan/packages/fms-hf-tuning_v*.txt
        return any(PACKAGE.glob(path)) or any(REPO.glob(path))
    if (PACKAGE / path).exists() or (REPO / path).exists() or (where.parent / path).exists():
        return True
    head, _, last = path.rpartition("/")
    base, *rest = last.split(".")
    target = PACKAGE / head / base
    for module in (target.with_suffix(".py"), target / "__init__.py"):
        if module.is_file():
            return _defines(module, rest)
    return False


def _prose_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of a Python file's comments and strings."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    spans = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            (r0, c0), (r1, c1) = token.start, token.end
            spans.append((starts[r0 - 1] + c0, starts[r1 - 1] + c1))
    return spans


def mentions(text: str, where: Path) -> list[tuple[int, str, bool]]:
    """(line, mention, resolves) for every module mention in `text`, a file at `where`."""
    text = URL.sub(lambda m: " " * len(m.group()), text)
    starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line(offset: int) -> int:
        lo, hi = 0, len(starts)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if starts[mid] <= offset else (lo, mid)
        return lo + 1

    found = []
    relative = where.relative_to(REPO).as_posix() if REPO in where.parents else ""
    fixtures = FIXTURES.get(relative, set())
    if where == Path(__file__).resolve():  # this file lists the fixtures and former names
        fixtures = set().union(*FIXTURES.values())
    for m in PY_PATH.finditer(text):
        name, before, after = (
            m.group(1),
            text[m.start() - 1 : m.start()],
            text[m.end() : m.end() + 1],
        )
        if ("/" not in name and before in "\"'" and before and after == before) or name in fixtures:
            continue  # a file name as a whole string literal: test data, not a mention
        found.append((line(m.start()), name, resolves_py(name, where)))
    for m in DOTTED_NAME.finditer(text):
        name = DOTTED + m.group(1)
        found.append((line(m.start()), name, resolves_dotted(m.group(1))))
    own = layers()
    for m in SLASH_PATH.finditer(text):
        path = m.group(1)
        first = path.removeprefix("ado_actuators/sfttrainer/").split("/")[0]
        if path.endswith(".py") or first not in own or path.startswith(FOREIGN):
            continue
        attribute = "." in path.split("/")[-1]
        quoted = text[m.start() - 1 : m.start()] == "`"
        if not (attribute or quoted or path.endswith("/") or path.count("/") >= 2):
            continue  # "trainer or launcher" with a slash is prose: a path shows more
        found.append((line(m.start()), path, resolves_slash(path, where)))
    if where == Path(__file__).resolve():
        return found
    aliased = {
        n
        for n in FORMER_MODULES
        if n in text and re.search(rf"\bas {n}\b|^[ \t]*{n}[ \t]*=", text, re.M)
    }
    prose = _prose_spans(text) if aliased else []
    for m in FORMER.finditer(text):
        name = m.group(1)
        if name in aliased and not any(a <= m.start() < b for a, b in prose):
            continue  # `import logits as logits_memory` and its uses: code, not a mention
        found.append((line(m.start()), name, False))
    return found


def test_the_checker_finds_made_up_and_moved_mentions():
    """Each kind of mention, real and made up: the scan below cannot pass by finding nothing."""
    where = PACKAGE / "space" / "preview.py"
    fake = "no" + "such"
    text = "\n".join(
        [
            "space/preview.py and plan/memory/peak.py and peak.py and benchmarks/calibration.py",
            f"{fake}.py",
            f"engine/{fake}.py",
            f"{DOTTED}.ledger.dominance and {DOTTED}.engine.settings.MeasurementSettings",
            f"{DOTTED}.engine.{fake} and {DOTTED}.engine.settings.{fake}",
            "engine/settings.MeasurementSettings and plan/memory/ and space/",
            f"engine/settings.{fake}, `plan/" + "launch.MeasurementInputs`",
            f"plan/{fake}.thing, see https://example.com/plan/{fake}.py",
            "tuning/sft_trainer.py and transformers/models/llama/modeling_llama.py",
            "a former module's name: " + "step" + "_trace's check",
        ]
    )
    result = {(line, name): ok for line, name, ok in mentions(text, where)}
    assert result == {
        (1, "space/preview.py"): True,
        (1, "plan/memory/peak.py"): True,
        (1, "peak.py"): True,
        (1, "benchmarks/calibration.py"): True,
        (2, f"{fake}.py"): False,
        (3, f"engine/{fake}.py"): False,
        (4, f"{DOTTED}.ledger.dominance"): True,
        (4, f"{DOTTED}.engine.settings.MeasurementSettings"): True,
        (5, f"{DOTTED}.engine.{fake}"): False,
        (5, f"{DOTTED}.engine.settings.{fake}"): False,
        (6, "engine/settings.MeasurementSettings"): True,
        (6, "plan/memory/"): True,
        (6, "space/"): True,
        (7, f"engine/settings.{fake}"): False,
        (7, "plan/" + "launch.MeasurementInputs"): False,
        (8, f"plan/{fake}.thing"): False,
        (9, "tuning/sft_trainer.py"): True,
        (9, "transformers/models/llama/modeling_llama.py"): True,
        (10, "step" + "_trace"): False,
    }


def test_every_module_path_named_in_the_code_and_docs_exists():
    unresolved, checked = [], 0
    for path in scanned_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for line, name, ok in mentions(text, path):
            checked += 1
            if not ok:
                unresolved.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert checked > 1000, checked  # about 2,600 in November 2026
    assert not unresolved, "mentions of modules that do not exist:\n" + "\n".join(unresolved)
