"""How to call the fms-hf-tuning the wrapper runs in, read from that release's own source.

fms-hf-tuning's `main()` is the one caller of its API that every release keeps in step with
itself: it unpacks what `parse_arguments` returns, may combine some of those values into a new
object (2.x builds a `TrackerConfigFactory` from its file-logger, AIM, MLflow and
resource-scanner configs; 3.x gets one `tracker_configs` back) and calls `train()` with
keywords. The wrapper reads `main()` from `tuning/sft_trainer.py` (the AST; nothing is
imported) and does the same, adding its own callbacks. No release is named here: a release
that returns one config more, or combines them differently, is read like the others; one
whose `main()` does something this reading cannot reproduce raises ApiNotUnderstood, naming
what, before anything trains.

Pure (ast only), so the node checks a release before it launches and the tests read every
published release without installing it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Any

SOURCE = Path("tuning") / "sft_trainer.py"
"""Where the module lives inside an fms-hf-tuning installation (site-packages or wheel)."""

CALLBACKS = "additional_callbacks"
METADATA = "exp_metadata"
# The two train() inputs the wrapper supplies itself: its callbacks, and the metadata JSON
# decoded once (main() decodes it with a logging fallback the wrapper replaces by an error).
WRAPPER_INPUTS = (CALLBACKS, METADATA)
ROLES = {"model_args": "model", "data_args": "data", "train_args": "training"}
"""train()'s keywords for the three argument dataclasses the wrapper reads and adjusts."""


class ApiNotUnderstood(RuntimeError):
    """This release's sft_trainer cannot be called the way its main() calls it."""


@dataclasses.dataclass(frozen=True)
class Built:
    """A value main() constructs from parsed values before calling train():
    `constructor(**keywords)`, then `value.attribute = parsed` for each of `attributes`."""

    constructor: str  # a name in tuning.sft_trainer's namespace
    keywords: tuple[tuple[str, str], ...] = ()  # (keyword, parsed name)
    attributes: tuple[tuple[str, str], ...] = ()  # (attribute, parsed name)

    def build(self, namespace: Any, parsed: dict[str, Any]) -> Any:  # tuning is untyped
        value = getattr(namespace, self.constructor)(**{k: parsed[n] for k, n in self.keywords})
        for attribute, name in self.attributes:
            setattr(value, attribute, parsed[name])
        return value


@dataclasses.dataclass(frozen=True)
class Constant:
    value: Any  # tuning is untyped


@dataclasses.dataclass(frozen=True)
class FmsApi:
    """What parse_arguments returns (in order) and where each train() keyword comes from."""

    parsed_names: tuple[str, ...]
    train_sources: tuple[tuple[str, str | Built | Constant], ...]  # (keyword, source)

    # Any: tuning (fms-hf-tuning) is untyped
    def train_keywords(self, namespace: Any, parsed: dict[str, Any]) -> dict[str, Any]:
        """train()'s keyword arguments but the wrapper's own (callbacks, metadata)."""
        keywords = {}
        for keyword, source in self.train_sources:
            if isinstance(source, str):
                keywords[keyword] = parsed[source]
            elif isinstance(source, Built):
                keywords[keyword] = source.build(namespace, parsed)
            else:
                keywords[keyword] = source.value
        return keywords

    def parsed_name_of(self, keyword: str) -> str:
        """The parse_arguments value train() gets as `keyword` (e.g. train_args: training_args)."""
        source = dict(self.train_sources).get(keyword)
        if not isinstance(source, str):
            raise ApiNotUnderstood(f"main() passes no parsed value as train({keyword}=...)")
        return source


def read_api(source: str, where: str = "tuning/sft_trainer.py") -> FmsApi:
    """The API of the release whose sft_trainer source is `source`; `where` names it in errors."""
    try:
        module = ast.parse(source)
    except SyntaxError as error:
        raise ApiNotUnderstood(f"{where} does not parse: {error}") from None
    functions = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
    for name in ("main", "parse_arguments", "train"):
        if name not in functions:
            raise ApiNotUnderstood(f"{where} defines no {name}()")
    main = functions["main"]
    parsed_names = _parse_arguments_targets(main, where)
    returned = _returned_names(functions["parse_arguments"])
    if returned is not None and len(returned) != len(parsed_names):
        raise ApiNotUnderstood(
            f"{where}: parse_arguments returns {len(returned)} values but main() unpacks "
            f"{len(parsed_names)}"
        )
    if METADATA not in parsed_names:
        raise ApiNotUnderstood(f"{where}: parse_arguments returns no {METADATA}")
    built = _built_values(main, set(parsed_names))
    call = _train_call(main, where)
    train_parameters = {
        a.arg for a in (*functions["train"].args.args, *functions["train"].args.kwonlyargs)
    }
    sources: list[tuple[str, str | Built | Constant]] = []
    for keyword in call.keywords:
        if keyword.arg is None:
            raise ApiNotUnderstood(f"{where}: main() calls train(**...), which cannot be read")
        if keyword.arg not in train_parameters:
            raise ApiNotUnderstood(
                f"{where}: main() passes train({keyword.arg}=...), which train() does not take"
            )
        if keyword.arg in WRAPPER_INPUTS:
            continue
        sources.append((keyword.arg, _source_of(keyword, parsed_names, built, where)))
    missing = [k for k in (*ROLES, *WRAPPER_INPUTS) if k not in train_parameters]
    if missing:
        raise ApiNotUnderstood(f"{where}: train() takes no {', '.join(missing)}")
    api = FmsApi(tuple(parsed_names), tuple(sources))
    for role in ROLES:
        api.parsed_name_of(role)
    return api


def read_installed(sft_trainer: Any) -> FmsApi:  # tuning is untyped
    """The API of the imported `tuning.sft_trainer` module, from its own file."""
    path = inspect.getsourcefile(sft_trainer) or "tuning/sft_trainer.py"
    return read_api(Path(path).read_text(), path)


def _parse_arguments_targets(main: ast.FunctionDef, where: str) -> list[str]:
    for node in ast.walk(main):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "parse_arguments"
        ):
            target = node.targets[0]
            names = [e.id for e in getattr(target, "elts", ()) if isinstance(e, ast.Name)]
            if isinstance(target, ast.Tuple) and len(names) == len(target.elts):
                return names
            raise ApiNotUnderstood(f"{where}: main() does not unpack parse_arguments() into names")
    raise ApiNotUnderstood(f"{where}: main() does not call parse_arguments()")


def _returned_names(function: ast.FunctionDef) -> list[str] | None:
    """The names parse_arguments returns in its last `return a, b, ...` (None: not a tuple)."""
    returns = [n for n in ast.walk(function) if isinstance(n, ast.Return)]
    if returns and isinstance(returns[-1].value, ast.Tuple):
        return [ast.unparse(e) for e in returns[-1].value.elts]
    return None


def _built_values(main: ast.FunctionDef, parsed: set[str]) -> dict[str, Built]:
    """Names main() binds to `Constructor(keyword=parsed, ...)`, with attributes it sets after."""
    built: dict[str, Built] = {}
    for node in _statements(main):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        # `keyword=parsed` pairs only: `**parsed` (arg None) names no keyword to rebuild
        pairs = tuple(
            (k.arg, k.value.id)
            for k in getattr(value, "keywords", ())
            if k.arg is not None and isinstance(k.value, ast.Name) and k.value.id in parsed
        )
        if (
            isinstance(target, ast.Name)
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and not value.args
            and len(pairs) == len(value.keywords)
        ):
            built[target.id] = Built(value.func.id, pairs)
        elif (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id in built
            and isinstance(value, ast.Name)
            and value.id in parsed
        ):
            old = built[target.value.id]
            built[target.value.id] = dataclasses.replace(
                old, attributes=(*old.attributes, (target.attr, value.id))
            )
    return built


def _statements(function: ast.FunctionDef) -> list[ast.stmt]:
    """Every statement in `function`, nested ones included, in source order."""
    statements = [n for n in ast.walk(function) if isinstance(n, ast.stmt) and n is not function]
    return sorted(statements, key=lambda n: (n.lineno, n.col_offset))


def _train_call(main: ast.FunctionDef, where: str) -> ast.Call:
    for node in ast.walk(main):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "train"
        ):
            return node
    raise ApiNotUnderstood(f"{where}: main() does not call train()")


def _source_of(
    keyword: ast.keyword, parsed: list[str], built: dict[str, Built], where: str
) -> str | Built | Constant:
    value = keyword.value
    if isinstance(value, ast.Name) and value.id in parsed:
        return value.id
    if isinstance(value, ast.Name) and value.id in built:
        return built[value.id]
    if isinstance(value, ast.Constant):
        return Constant(value.value)
    raise ApiNotUnderstood(
        f"{where}: main() passes train({keyword.arg}={ast.unparse(value)}), which is neither a "
        f"value parse_arguments returns nor one built from them"
    )
