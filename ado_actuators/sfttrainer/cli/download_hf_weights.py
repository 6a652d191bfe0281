"""`sfttrainer_download_hf_weights`: pre-fetch the Hugging Face weights a models.yaml names.

models.yaml maps model names to {weights format: hub id or local path}:

    smollm2-135m:
      Vanilla: HuggingFaceTB/SmolLM2-135M

Hub ids are downloaded into the hub cache of `-o HF_HOME`, i.e. `HF_HOME/hub`, the cache that
transformers reads when the training processes run with `HF_HOME=<that dir>`; measurements can
then run with the hub offline. Only what loading with transformers/PyTorch needs is fetched
(hf_cache.training_files: no TF/Flax/ONNX/GGUF/`original/` files, no `.bin`/`consolidated*`
duplicates of safetensors weights). Local paths are checked (config.json present), not copied.
Completeness is decided by hf_cache.cache_state; see that module.
"""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from ado_actuators.sfttrainer.catalog.models import WEIGHTS_FORMAT_ALIASES, WEIGHTS_FORMATS
from ado_actuators.sfttrainer.cli.errors import UsageError
from ado_actuators.sfttrainer.cli.hf_weights_run import Entry, Row, fetch_all, survey

FAILED = ("missing", "failed")
PLAIN_WIDTH_CAP = 48


# ----------------------------------------------------------------------------------------
# models.yaml
# ----------------------------------------------------------------------------------------


def normalise_format(fmt: object, where: str) -> str:
    text = str(fmt)
    text = WEIGHTS_FORMAT_ALIASES.get(text, text)
    if text in WEIGHTS_FORMATS:
        return text
    known = {f.lower(): f for f in (*WEIGHTS_FORMATS, *WEIGHTS_FORMAT_ALIASES)}
    low = text.lower()
    guess = known.get(low) or next(
        (known[k] for k in known if low and (low in k or k in low)), None
    )
    if guess is None:
        close = difflib.get_close_matches(low, list(known), n=1, cutoff=0.4)
        guess = known[close[0]] if close else None
    hint = f"did you mean {WEIGHTS_FORMAT_ALIASES.get(guess, guess)!r}? " if guess else ""
    raise UsageError(
        f"{where}: unknown weights format {text!r}; {hint}use one of {', '.join(WEIGHTS_FORMATS)}"
    )


def load_models(path: Path) -> list[Entry]:
    import yaml

    where = f"-i/--input {str(path)!r}"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{where}: cannot read it ({err})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UsageError(f"{where}: not valid YAML{line}: {problem}") from None
    if not data:
        raise UsageError(f"{where} is empty; expected entries like `name: {{Vanilla: hub-id}}`")
    if not isinstance(data, dict):
        raise UsageError(
            f"{where}: expected a mapping of model names to {{format: hub id or path}}, "
            f"got a {type(data).__name__}"
        )
    entries = []
    for name, formats in data.items():
        if not isinstance(formats, dict):
            raise UsageError(
                f"{where}: entry {str(name)!r} must map a weights format to a hub id or path, "
                f"e.g. `{name}: {{Vanilla: {formats}}}`; got {type(formats).__name__} {formats!r}"
            )
        if not formats:
            raise UsageError(f"{where}: entry {str(name)!r} has no weights formats")
        seen: set[str] = set()
        for fmt, location in formats.items():
            canonical = normalise_format(fmt, f"{where}: entry {str(name)!r}")
            label = f"{where}: entry {str(name)!r}.{fmt}"
            if canonical in seen:
                raise UsageError(f"{label}: {canonical} is given twice")
            if not isinstance(location, str):
                raise UsageError(f"{label}: expected a hub id or path, got {location!r}")
            if not location.strip():
                raise UsageError(f"{label}: empty hub id or path")
            seen.add(canonical)
            entries.append(Entry(str(name), canonical, location.strip()))
    return entries


# ----------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------

HEADERS = ("model", "format", "source", "status", "reason")


def print_summary(rows: list[Row]) -> None:
    values = [(r.entry.name, r.entry.fmt, r.entry.location, r.status, r.reason) for r in rows]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    totals = f"{len(rows)} entries: " + ", ".join(f"{n} {s}" for s, n in counts.items())
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*HEADERS)
        style = {"missing": "red", "failed": "red", "would fetch": "yellow"}
        for value in values:
            table.add_row(*value[:3], f"[{style.get(value[3], 'green')}]{value[3]}", value[4])
        Console().print(table)
        print(totals)
        return
    # Plain text for logs (ray job logs, pipes): aligned columns, the reason never wrapped.
    widths = [
        min(PLAIN_WIDTH_CAP, max(len(h), *(len(v[i]) for v in values)))
        for i, h in enumerate(HEADERS[:-1])
    ]
    for value in (HEADERS, *values):
        cells = [str(v).ljust(w) for v, w in zip(value, widths, strict=False)]
        print("  ".join([*cells, value[-1]]).rstrip())
    print(totals)


# ----------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

InputFile = Annotated[
    Path | None, typer.Option("-i", "--input", metavar="FILE", help="models.yaml to read.")
]
HfHome = Annotated[
    Path | None,
    typer.Option(
        "-o",
        "--output",
        metavar="HF_HOME",
        help="HF_HOME of the training processes; weights go to HF_HOME/hub.",
    ),
]
OnlyFormat = Annotated[
    str | None,
    typer.Option(
        "--format",
        metavar="FORMAT",
        help="Only entries of this format: " + " or ".join(WEIGHTS_FORMATS) + ".",
    ),
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Report what is local, cached or to fetch; no network.")
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="HF_TOKEN",
        show_envvar=True,
        metavar="TOKEN",
        help="Hub token for gated/private repos (default: HF_HOME/token if "
        "present, else huggingface_hub's own).",
    ),
]
MaxWorkers = Annotated[
    int, typer.Option("--max-workers", metavar="N", help="Files downloaded in parallel.")
]


@app.command(
    help="Download the Hugging Face hub weights named in a models.yaml ({name: {Vanilla|"
    "GPTQ-Quantized: hub-id-or-path}}) into the hub cache of HF_HOME (HF_HOME/hub), so "
    "SFTTrainer measurements with hf_home=HF_HOME run offline. Local paths are only checked. "
    "Exit status: 0 all present, 1 something missing or failed, 2 bad input. "
    "Example: sfttrainer_download_hf_weights -i models.yaml -o /my/hf_home"
)
def download_hf_weights(
    input_file: InputFile = None,
    output: HfHome = None,
    weights_format: OnlyFormat = None,
    dry_run: DryRun = False,
    token: Token = None,
    max_workers: MaxWorkers = 8,
) -> None:
    try:
        entries = _entries(input_file, output, weights_format, max_workers)
        assert output is not None  # _entries refused None
        hf_home = output.expanduser().absolute()
        # Before huggingface_hub is imported: its xet chunk cache goes under HF_HOME too.
        os.environ.setdefault("HF_XET_CACHE", str(hf_home / "xet"))
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        rows, pending = survey(entries, hf_home)
        if pending and not dry_run:
            _check_writable(hf_home)
        if token is None and (hf_home / "token").is_file():
            token = (hf_home / "token").read_text().strip() or None
        results = fetch_all(pending, hf_home, dry_run=dry_run, token=token, max_workers=max_workers)
    except UsageError as err:
        typer.echo(f"Error: {err}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        typer.echo(
            "Interrupted: a model being fetched stays marked incomplete; run the "
            "command again to resume it.",
            err=True,
        )
        sys.stderr.flush()
        os._exit(130)  # download threads would otherwise finish their files first
    rows = [r or Row(e, *results[e.location]) for r, e in zip(rows, entries, strict=True)]
    print_summary(rows)
    if any(r.status in FAILED for r in rows):
        raise typer.Exit(1)


def _entries(
    input_file: Path | None, output: Path | None, weights_format: str | None, max_workers: int
) -> list[Entry]:
    """The entries to fetch, once the options were checked; UsageError names a bad one."""
    if input_file is None:
        raise UsageError("no models file given; add -i models.yaml")
    if output is None:
        raise UsageError("no HF_HOME given; add -o DIR (weights go to DIR/hub)")
    if output.exists() and not output.is_dir():
        raise UsageError(f"-o/--output {str(output)!r} is a file; give the HF_HOME directory")
    if max_workers < 1:
        raise UsageError(f"--max-workers {max_workers}: give a number >= 1")
    entries = load_models(input_file)
    if weights_format is not None:
        wanted = normalise_format(weights_format, "--format")
        entries = [e for e in entries if e.fmt == wanted]
        if not entries:
            raise UsageError(f"-i/--input {str(input_file)!r} has no {wanted} entries")
    return entries


def _check_writable(hf_home: Path) -> None:
    hub = hf_home / "hub"
    try:
        hub.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(
            f"-o/--output: cannot create {hub} ({err.strerror or err}); choose a writable HF_HOME"
        ) from None
    if not os.access(hub, os.W_OK | os.X_OK):
        raise UsageError(f"-o/--output: {hub} is not writable; choose a writable HF_HOME")


def main() -> None:
    app(prog_name="sfttrainer_download_hf_weights")


if __name__ == "__main__":
    main()
