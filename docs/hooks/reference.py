"""mkdocs hook: the reference, generated at build time from the code's own declarations.

A page asks for a generated block with a marker, `<!-- reference: NAME -->`; the hook
replaces it with the block rendered from the package (catalog/, engine/settings.py, the console
scripts' typer apps, the device tables), so the reference cannot drift from the code. An unknown
name fails the build. Nothing here imports torch: the catalog, the settings and the CLIs' modules
import it lazily, and `make test` builds the site.
"""

from __future__ import annotations

import importlib
import json
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- reference: ([\w-]+) -->")


# ---- rendering helpers ------------------------------------------------------------------------


def cell(text: Any) -> str:
    """Text made safe for one cell of a Markdown table: one line, pipes escaped (but in code
    spans, where the table already leaves them alone and a backslash would show)."""
    parts = re.split(r"(`[^`]*`)", " ".join(str(text).split()))
    return "".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def prose(text: str) -> str:
    """Plain text (a help string, a description) as Markdown that shows it as written: outside
    its code spans, nothing may turn into HTML, emphasis or a link."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"([\\*_\[\]])", r"\\\1", parts[i])
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "".join(parts)


def code(value: Any) -> str:
    """A value as YAML would spell it, in a code span."""
    if isinstance(value, str) and not value.isprintable():
        return f"`{json.dumps(value)}`"
    if value is None:
        shown = "null"
    elif isinstance(value, bool):
        shown = str(value).lower()
    elif isinstance(value, list | tuple):
        shown = json.dumps(list(value))
    else:
        shown = str(value)
    return f"`{shown}`"


def number(value: float) -> str:
    """1000000, not 1e+06: a bound as a reader types it."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def type_name(annotation: Any) -> str:
    """`str | None`, `list[str]`, `bool`: a field's type as a reader writes it."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(annotation))
        return f"{origin.__name__}[{args}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


# ---- the experiments and their entity fields --------------------------------------------------


def _catalog() -> Any:
    from ado_actuators.sfttrainer.catalog.experiments import catalog_data

    return catalog_data()


def experiments() -> str:
    """One row per experiment: what it runs and what it measures."""
    rows = []
    for d in _catalog().experiments.values():
        ids = code(d.identifier) + "".join(f" (also {code(a)})" for a in d.aliases)
        runs = f"{d.method} (`--peft_method {d.peft_method}`), {d.weights_format} weights"
        if d.repeats > 1:
            runs += f"; {d.repeats} runs"
        rows.append((ids, d.purpose, runs, f"{len(d.targets)} properties"))
    return table(["experiment", "purpose", "what it runs", "measures"], rows)


def _domain(field: Any, override: Any = None) -> str:
    from ado_actuators.sfttrainer.catalog.entity import Domain

    if field.domain is Domain.DISCRETE:
        low, high = field.range
        return f"{number(low)} to {number(high - 1)}, step 1"
    if field.domain is Domain.BINARY:
        return "`true` or `false`"
    values = override.values if override and override.values is not None else field.values
    if values is None:
        return "open: any name" if field.name != "model_name" else "open: see [Models](#models)"
    listed = ", ".join(code(v) for v in values)
    return listed + ("; other names too" if field.domain is Domain.OPEN_CATEGORICAL else "")


def _default(field: Any) -> str:
    return "required" if field.required else code(field.default)


def _taken_by(taken: set[str], every: set[str], required: bool) -> str:
    if required or taken == every:
        return "all"
    if len(every - taken) < len(taken):
        return "all but " + ", ".join(code(i) for i in sorted(every - taken))
    return ", ".join(code(i) for i in sorted(taken))


def entity_fields() -> str:
    """Every entity field, declared once in catalog/entity.py: domain, default, meaning."""
    from ado_actuators.sfttrainer.catalog.entity import FIELDS

    every = set(_catalog().experiments)
    taken: dict[str, set[str]] = {name: set() for name in FIELDS}
    for d in _catalog().experiments.values():
        for name in d.optional_fields:
            taken[name].add(d.identifier)
    rows = []
    for name, field in FIELDS.items():
        where = _taken_by(taken[name], every, field.required)
        flag = code(field.fms_flag) if field.fms_flag else ""
        rows.append((code(name), _default(field), _domain(field), where, flag, prose(field.help)))
    return table(["field", "default", "values", "experiments", "sft_trainer flag", "meaning"], rows)


def _experiment_section(d: Any) -> list[str]:
    from ado_actuators.sfttrainer.catalog.entity import FIELDS, REQUIRED

    out = [f"### `{d.identifier}`", "", prose(d.description), ""]
    if d.aliases:
        out += ["Also answers to " + ", ".join(code(a) for a in d.aliases) + ".", ""]
    out += [
        f"- **method**: {d.method}; `--peft_method {d.peft_method}`; {d.weights_format} weights",
        "- **required fields**: " + ", ".join(code(n) for n in REQUIRED),
        "- **optional fields**: " + ", ".join(code(n) for n in sorted(d.optional_fields)),
        "- **measures**: " + ", ".join(code(t) for t in d.targets),
    ]
    if d.repeats > 1:
        out.append(f"- **runs**: {d.repeats} per measurement")
    if d.fixed:
        out.append("- **fixed**: " + ", ".join(f"`{k}: {v}`" for k, v in d.fixed.items()))
    for name, override in d.field_overrides.items():
        out.append(
            f"- **`{name}`** here: default {code(override.default)}, "
            f"values {_domain(FIELDS[name], override)}"
        )
    for flag, values in d.sft_trainer_arguments.items():
        out.append(f"- **always passes** `--{flag} {' '.join(values)}`")
    if d.models:
        out.append("- **models**: " + ", ".join(code(m) for m in d.models))
    if d.peft_method == "lora":
        out.append("- **`--target_modules`**: per model, [below](#lora-target-modules)")
    return [*out, ""]


def experiment_details() -> str:
    """Per experiment: its description, inputs, fixed values and properties."""
    lines: list[str] = []
    for d in _catalog().experiments.values():
        lines += _experiment_section(d)
    return "\n".join(lines)


def sft_trainer_constants() -> str:
    """The arguments every experiment passes to sft_trainer."""
    rows = [(f"`--{k}`", code(v)) for k, v in _catalog().sft_trainer_constants.items()]
    return table(["argument", "value"], rows)


def lora_target_modules() -> str:
    data = _catalog()
    rows = [(code(m), ", ".join(code(t) for t in ts)) for m, ts in data.lora_target_modules.items()]
    rows.append(("any other model", ", ".join(code(t) for t in data.lora_default_target_modules)))
    return table(["model_name", "target modules"], rows)


def models() -> str:
    """The shipped model map (catalog/models.yaml): where each model's weights are read."""
    from ado_actuators.sfttrainer.catalog.models import WEIGHTS_FORMATS, shipped_model_map

    shipped = shipped_model_map()
    rows = [
        (
            code(name),
            *(code(shipped[name][f]) if f in shipped[name] else "" for f in WEIGHTS_FORMATS),
        )
        for name in sorted(shipped)
    ]
    return table(["model_name", *WEIGHTS_FORMATS], rows)


def datasets() -> str:
    """Every dataset_id (catalog/datasets.py): its file, its shape, the command that makes it."""
    from ado_actuators.sfttrainer.catalog import datasets as catalog

    rows = []
    for shape in catalog.SHAPES.values():
        if shape.kind == "vision":
            length = (
                f"{shape.image_width} x {shape.image_height} images, {shape.min_tokens}+ tokens"
            )
        elif shape.length_unit == "chars":
            length = f"{shape.chars} + {catalog.PROMPT_CHARS} + {shape.chars} characters"
        else:
            length = f"a response of {shape.min_tokens}+ tokens"
        default = " (default)" if shape.id == catalog.DEFAULT_DATASET_ID else ""
        command = " ".join(catalog.creation_command(shape.id, "FILE"))
        rows.append((code(shape.filename) + default, shape.entries, length, code(command)))
    return table(["file under data_directory", "entries", "each entry", "made by"], rows)


def gpu_models() -> str:
    """The devices whose memory and peak the tool knows (metrics/*.yaml), with their sources."""
    from ado_actuators.sfttrainer.metrics.gpu_memory import memory_table
    from ado_actuators.sfttrainer.metrics.gpu_peaks import peak_table

    memory, peaks = memory_table(), peak_table()
    rows = []
    for name in dict.fromkeys([*memory, *peaks]):
        if name in getattr(memory.get(name), "aliases", ()) or name in getattr(
            peaks.get(name), "aliases", ()
        ):
            continue
        mem, peak = memory.get(name), peaks.get(name)
        rows.append(
            (
                code(name),
                f"{mem.gib:g} GiB" if mem else "unknown",
                f"{peak.tflops:g} ({peak.dtype})" if peak else "unknown",
                "; ".join(s for s in (mem and mem.source, peak and peak.source) if s),
            )
        )
    return table(["gpu_model", "memory", "dense peak TFLOP/s", "sources"], rows)


def stop_methods() -> str:
    from ado_actuators.sfttrainer.stopping import methods

    return ", ".join(code(m) for m in methods.AUTO_STOP_METHODS)


# ---- the actuator's parameters ----------------------------------------------------------------


def _field_default(info: Any) -> str:
    if info.default_factory is not None:
        return code(info.default_factory())
    return code(info.default)


def parameters() -> str:
    """engine/settings.MeasurementSettings: the actuator's own parameters, declared once."""
    from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

    rows = [
        (
            code(name),
            type_name(info.annotation),
            _field_default(info),
            prose(info.description or ""),
        )
        for name, info in MeasurementSettings.model_fields.items()
    ]
    return table(["parameter", "type", "default", "meaning"], rows)


def supervisor_parameters() -> str:
    """ado-core's executor-supervisor timings, which the actuator's parameters accept too."""
    from ado.modules.actuators.executor_supervisor import ExperimentExecutorSupervisorParameters

    fields = ExperimentExecutorSupervisorParameters.model_fields
    rows = [(code(n), type_name(i.annotation), _field_default(i)) for n, i in fields.items()]
    return table(["parameter", "type", "default"], rows)


# ---- the command-line tools -------------------------------------------------------------------


def console_scripts() -> dict[str, str]:
    """Script name -> `module:function`, as pyproject.toml installs them."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return dict(project["scripts"])


def _click_command(entry: str) -> Any:
    import typer

    module = importlib.import_module(entry.split(":")[0])
    return typer.main.get_command(module.app)


def _param_row(param: Any, ctx: Any) -> tuple[str, str, str, str]:
    if param.param_type_name == "argument":
        name = param.make_metavar(ctx) if hasattr(param, "make_metavar") else param.name
        needed = "required" if param.required else "optional"
        return (code(name), "argument", needed, prose(param.help or ""))
    names = ", ".join(code(o) for o in [*param.opts, *param.secondary_opts])
    value = "" if param.is_flag else code(param.metavar or param.type.name.upper())
    shown = param.show_default and param.default is not None and not param.is_flag
    default = code(param.default) if shown else ("required" if param.required else "")
    return (names, value, default, prose(param.help or ""))


def cli() -> str:
    """Each console script: its usage, what it does, every argument and option."""
    import click

    lines = []
    for script, entry in console_scripts().items():
        command = _click_command(entry)
        ctx = click.Context(command, info_name=script)
        usage = " ".join([script, *command.collect_usage_pieces(ctx)])
        rows = [_param_row(p, ctx) for p in command.get_params(ctx)]
        lines += [f"## `{script}`", "", f"```console\n{usage}\n```", "", prose(command.help or "")]
        lines += ["", table(["argument or option", "value", "default", "meaning"], rows), ""]
    return "\n".join(lines)


BLOCKS: dict[str, Callable[[], str]] = {
    "experiments": experiments,
    "experiment-details": experiment_details,
    "entity-fields": entity_fields,
    "sft-trainer-constants": sft_trainer_constants,
    "lora-target-modules": lora_target_modules,
    "models": models,
    "datasets": datasets,
    "gpu-models": gpu_models,
    "stop-methods": stop_methods,
    "parameters": parameters,
    "supervisor-parameters": supervisor_parameters,
    "cli": cli,
}


def render(markdown: str, where: str = "a page") -> str:
    """`markdown` with every reference marker replaced by its block."""

    def block(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in BLOCKS:
            from mkdocs.exceptions import PluginError

            raise PluginError(
                f"{where} asks for <!-- reference: {name} -->; known: {sorted(BLOCKS)}"
            )
        return BLOCKS[name]()

    return MARKER.sub(block, markdown)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    return render(markdown, page.file.src_uri)


# ---- table cells that wrap between words ------------------------------------------------------

CELL = re.compile(r"(<td[^>]*>)(.*?)(</td>)", re.S)
TAG = re.compile(r"(<[^>]+>)")
# A row's first cell that is one code span: the name the row is about (a parameter, a field).
NAME = re.compile(r"(<tr>\s*)<td>(<code>[^<]*</code>)</td>")
# After an underscore or a slash, before a letter or a digit, and after a hyphen that follows
# two word characters, before a digit (browsers do not wrap "vision-384x768-16384plus-"; "rules
# 1-7" stays whole): where a long name (a field, a parameter, a path, a dataset) may wrap.
# <wbr> is no character: a name copied from the page is whole.
JOINT = re.compile(r"(?<=[_/])(?=\w)|(?<=\w\w-)(?=\d)")


def wrap_points(html: str) -> str:
    """`html` with a <wbr> at each joint of the text in its table cells (not in tags, nor in
    attributes), and a row's name cell marked `name`: stylesheets/extra.css lets cells wrap
    there and between words, never mid-word, and keeps a name whole where the table has room."""

    def cell(match: re.Match[str]) -> str:
        parts = TAG.split(match.group(2))
        text = [p if i % 2 else JOINT.sub("<wbr>", p) for i, p in enumerate(parts)]
        return match.group(1) + "".join(text) + match.group(3)

    return CELL.sub(cell, NAME.sub(r'\1<td class="name">\2</td>', html))


def on_page_content(html: str, **_: Any) -> str:
    return wrap_points(html)
