"""`sfttrainer_generate_dataset_text`: write a synthetic text dataset for the SFTTrainer actuator.

Each line of the output is one JSON object, `{"output": "### Input: <prompt>\\n\\n### Response:
<response>"}` (the actuator trains with `--response_template "\\n### Response:"
--dataset_text_field output`). The text is news-like prose (news_text.py), so no
download is needed and the same options always give a byte-identical file.

The file is written entry by entry (memory stays flat, whatever the size) to a temporary
file next to the target, which is renamed into place only once complete: a file under the
final name is always a whole dataset.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli.news_text import MIN_CHARS, iter_entries
from ado_actuators.sfttrainer.cli.output_files import (
    EntriesOption,
    SeedOption,
    UsageError,
    check_length,
    output_dir_option,
    output_option,
    progress_bar,
    published_atomically,
    report_errors,
    resolve_output,
)

# ----------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------


def _resolve_shape(dataset_id: str | None, output: Path | None) -> datasets.DatasetShape:
    from_name = None
    if output is not None and output.name.endswith(".jsonl"):
        stem = output.name[: -len(".jsonl")]
        from_name = stem if stem in datasets.SHAPES else None
    if dataset_id is None:
        dataset_id = from_name or datasets.DEFAULT_DATASET_ID
    if dataset_id not in datasets.SHAPES:
        raise UsageError(
            f"--dataset-id {dataset_id!r} is unknown; use one of: "
            + ", ".join(datasets.TEXT_DATASET_IDS)
        )
    shape = datasets.SHAPES[dataset_id]
    if shape.kind != "text":
        raise UsageError(
            f"--dataset-id {dataset_id!r} is a vision dataset; create it with: "
            + " ".join(datasets.creation_command(dataset_id, output or shape.filename))
        )
    if from_name is not None and from_name != dataset_id:
        raise UsageError(
            f"-o/--output is named after dataset {from_name!r} but --dataset-id is "
            f"{dataset_id!r}; drop --dataset-id or pick a matching file name"
        )
    return shape


def generate(
    path: Path,
    shape: datasets.DatasetShape,
    *,
    entries: int,
    seed: int = 0,
    min_tokens: int | None = None,
    chars: int | None = None,
    progress: bool = True,
) -> int:
    """Write the dataset to `path` atomically; returns the bytes written."""
    written = 0
    rows = iter_entries(shape, entries=entries, seed=seed, min_tokens=min_tokens, chars=chars)
    with published_atomically(path) as tmp, tmp.open("wb") as handle, progress_bar(path) as bar:
        task = bar.add_task("generate", total=entries, visible=progress)
        for text in rows:
            written += handle.write(_line(text))
            bar.advance(task)
    return written


def _line(text: str) -> bytes:
    return (json.dumps({"output": text}, ensure_ascii=True) + "\n").encode("ascii")


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
OutputFile = Annotated[Path | None, output_option(".jsonl")]
OutputDir = Annotated[Path | None, output_dir_option(".jsonl")]


@app.command(
    help="Create a synthetic news-like text dataset (JSON lines, one "
    '{"output": "### Input: ...\\n\\n### Response: ..."} per line) for the SFTTrainer '
    "actuator. Example: sfttrainer_generate_dataset_text "
    "-o /data/fms-hf-tuning/artificial-dataset/news-tokens-16384plus-entries-4096.jsonl"
)
def generate_dataset_text(
    output: OutputFile = None,
    output_dir: OutputDir = None,
    dataset_id: Annotated[
        str | None,
        typer.Option(
            "--dataset-id",
            metavar="ID",
            help="Dataset shape: " + ", ".join(datasets.TEXT_DATASET_IDS) + ". Default: the "
            "one -o is named after, else " + datasets.DEFAULT_DATASET_ID + ".",
        ),
    ] = None,
    entries: EntriesOption = None,
    min_tokens: Annotated[
        int | None,
        typer.Option(
            "--min-tokens",
            metavar="N",
            help="news-tokens-* only: minimum tokens per entry (default: the dataset's own).",
        ),
    ] = None,
    chars: Annotated[
        int | None,
        typer.Option(
            "--chars",
            metavar="N",
            help="news-chars-* only: characters of the article and of the response "
            f"(default: the dataset's own; the instruction is always {datasets.PROMPT_CHARS}).",
        ),
    ] = None,
    seed: SeedOption = 0,
) -> None:
    def write() -> str:
        shape = _resolve_shape(dataset_id, output)
        path = resolve_output(output, output_dir, shape)
        if entries is not None and entries < 1:
            raise UsageError(f"--entries {entries}: give a number of entries >= 1")
        if min_tokens is not None:
            if shape.length_unit != "tokens":
                raise UsageError(
                    f"--min-tokens applies to news-tokens-* datasets, not {shape.id!r}; use --chars"
                )
            check_length("--min-tokens", min_tokens, 1)
        if chars is not None:
            if shape.length_unit != "chars":
                raise UsageError(
                    f"--chars applies to news-chars-* datasets, not {shape.id!r}; use --min-tokens"
                )
            check_length("--chars", chars, MIN_CHARS)
        n = entries or shape.entries
        size = generate(path, shape, entries=n, seed=seed, min_tokens=min_tokens, chars=chars)
        return f"Wrote {n} entries ({size / 1e6:.1f} MB) of {shape.id} to {path}"

    report_errors(write, output or output_dir)


def main() -> None:
    app(prog_name="sfttrainer_generate_dataset_text")


if __name__ == "__main__":
    main()
