"""`sfttrainer_generate_dataset_vision`: write a synthetic image-to-text dataset (parquet).

Every entry is one chat (`messages`) about one picture (`images`, a list holding a single
PNG); the picture is drawn once (vision_data.draw_image) and the same bytes are reused in
every entry -- "repeated copies of a single image". The layout follows what fms-hf-tuning
3.2.2 runs for vision models (`--dataset_text_field messages --dataset_image_field images`):

- setup_dataprocessor._process_raw_data_args picks _get_vision_dataset_handlers when a
  processor and both fields are set: first data_handlers.apply_tokenizer_chat_template, which
  renders the conversation found in the `messages` column (auto-detected: a list of dicts
  with `role`) with the processor's chat template into the `dataset_text_field` column, and
  checks that the rendered text holds the processor's image token when an `images` column
  exists -- hence the `{"type": "image"}` content item;
- then data_handlers.prepare_multimodal_data_processor, which turns `{bytes, path}` dicts
  into PIL images (utils.try_convert_bytes_dict_to_pil), keeps only the first image for
  LlavaProcessor / Granite's LlavaNextProcessor, and converts to RGB;
- collators.VisionDataCollator feeds text + images to the processor, which expands the
  image token; trl skips its own preparation (dataset_kwargs skip_prepare_dataset).

Rows are written in row groups through pyarrow's ParquetWriter (memory stays flat), to a
temporary file next to the target that is renamed into place only once complete; the same
options always give a byte-identical file (same Pillow / pyarrow versions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.cli import vision_data
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

#: Entries per parquet row group (~7 MB of text each at 16384 words per entry).
ROW_GROUP_ENTRIES = 64
_SIZES = ", ".join(
    f"{datasets.SHAPES[i].image_width}x{datasets.SHAPES[i].image_height}"
    for i in datasets.VISION_DATASET_IDS
)


def _name_shape(output: Path | None) -> datasets.DatasetShape | None:
    """The dataset `-o FILE` is named after, if any; a text dataset's name is an error."""
    if output is None:
        return None
    for suffix in (".parquet", ".jsonl"):
        if output.name.endswith(suffix):
            shape = datasets.SHAPES.get(output.name[: -len(suffix)])
            if shape is not None and shape.kind == "text":
                raise UsageError(
                    f"-o/--output {output.name!r} is a text dataset; create it with: "
                    + " ".join(datasets.creation_command(shape.id, output))
                )
            return shape if shape is not None and shape.suffix == suffix else None
    return None


def _resolve_shape(
    dataset_id: str | None, output: Path | None, width: int | None, height: int | None
) -> datasets.DatasetShape:
    from_name = _name_shape(output)
    if dataset_id is not None:
        shape = datasets.SHAPES.get(dataset_id)
        if shape is None:
            raise UsageError(
                f"--dataset-id {dataset_id!r} is unknown; use one of: "
                + ", ".join(datasets.VISION_DATASET_IDS)
            )
        if shape.kind != "vision":
            raise UsageError(
                f"--dataset-id {dataset_id!r} is a text dataset; create it with: "
                + " ".join(datasets.creation_command(dataset_id, output or shape.filename))
            )
        if from_name is not None and from_name.id != dataset_id:
            raise UsageError(
                f"-o/--output is named after dataset {from_name.id!r} but --dataset-id is "
                f"{dataset_id!r}; drop --dataset-id or pick a matching file name"
            )
    elif from_name is not None:
        shape = from_name
    elif width is not None and height is not None:
        matches = [
            datasets.SHAPES[i]
            for i in datasets.VISION_DATASET_IDS
            if (datasets.SHAPES[i].image_width, datasets.SHAPES[i].image_height) == (width, height)
        ]
        if not matches:
            raise UsageError(
                f"--image-width {width} --image-height {height}: no vision dataset has this "
                f"size; use one of {_SIZES}"
            )
        shape = matches[0]
    elif width is not None or height is not None:
        raise UsageError(
            f"give both --image-width and --image-height (or --dataset-id); known sizes: {_SIZES}"
        )
    else:
        shape = datasets.SHAPES[datasets.VISION_DATASET_IDS[0]]
    for option, given, own in (
        ("--image-width", width, shape.image_width),
        ("--image-height", height, shape.image_height),
    ):
        if given is not None and given != own:
            raise UsageError(
                f"{option} {given} does not match dataset {shape.id!r} "
                f"({shape.image_width}x{shape.image_height}); drop it or pick a matching "
                "--dataset-id / file name"
            )
    return shape


def _resolve_path(output: Path | None, output_dir: Path | None, shape) -> Path:
    path = resolve_output(output, output_dir, shape)
    if not path.name.endswith(".parquet"):
        raise UsageError(
            f"-o/--output {str(path)!r} must end with .parquet (fms-hf-tuning picks the "
            f"loader by extension), e.g. {shape.filename}"
        )
    return path


def generate(
    path: Path,
    shape: datasets.DatasetShape,
    *,
    entries: int,
    min_tokens: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> int:
    """Write the dataset to `path` atomically; returns the file's size in bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert shape.kind == "vision" and shape.image_field and shape.image_width and shape.image_height
    schema = vision_data.arrow_schema(shape.text_field, shape.image_field)
    image = {
        "bytes": vision_data.draw_image(shape.image_width, shape.image_height, seed),
        "path": None,
    }
    messages = vision_data.iter_messages(
        entries=entries, min_tokens=min_tokens or shape.min_tokens or 1, seed=seed
    )
    with (
        published_atomically(path) as tmp,
        pq.ParquetWriter(
            tmp,
            schema,
            compression="zstd",
            write_statistics=False,
            # dictionary-encode only the image bytes: stored once per row group
            use_dictionary=[f"{shape.image_field}.list.element.bytes"],
        ) as writer,
        progress_bar(path) as bar,
    ):
        task = bar.add_task("generate", total=entries, visible=progress)
        done = 0
        while done < entries:
            rows = min(ROW_GROUP_ENTRIES, entries - done)
            batch = [next(messages) for _ in range(rows)]
            table = pa.Table.from_arrays(
                [
                    pa.array(batch, type=schema.field(0).type),
                    pa.array([[image]] * rows, type=schema.field(1).type),
                ],
                schema=schema,
            )
            writer.write_table(table, row_group_size=rows)
            done += rows
            bar.advance(task, rows)
    return path.stat().st_size


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
OutputFile = Annotated[Path | None, output_option(".parquet")]
OutputDir = Annotated[Path | None, output_dir_option(".parquet")]


@app.command(
    help="Create a synthetic image-to-text dataset (parquet: a `messages` chat about one "
    "image in `images` per entry, the same generated picture in every entry, at least "
    "--min-tokens words in each answer) for the SFTTrainer actuator. Example: "
    "sfttrainer_generate_dataset_vision --image-width 384 --image-height 384 "
    "-o /data/fms-hf-tuning/artificial-dataset/vision-384x384-16384plus-entries-4096.parquet"
)
def generate_dataset_vision(
    output: OutputFile = None,
    output_dir: OutputDir = None,
    image_width: Annotated[
        int | None,
        typer.Option("--image-width", metavar="W", help=f"Image width in pixels ({_SIZES})."),
    ] = None,
    image_height: Annotated[
        int | None,
        typer.Option("--image-height", metavar="H", help="Image height in pixels."),
    ] = None,
    dataset_id: Annotated[
        str | None,
        typer.Option(
            "--dataset-id",
            metavar="ID",
            help="Dataset shape: " + ", ".join(datasets.VISION_DATASET_IDS) + ". Default: the "
            "one -o is named after, else the one of --image-width/--image-height, else "
            + datasets.VISION_DATASET_IDS[0]
            + ".",
        ),
    ] = None,
    entries: EntriesOption = None,
    min_tokens: Annotated[
        int | None,
        typer.Option(
            "--min-tokens",
            metavar="N",
            help="Minimum tokens (words) of each answer (default: the dataset's own).",
        ),
    ] = None,
    seed: SeedOption = 0,
) -> None:
    def write() -> str:
        for option, value in (
            ("--image-width", image_width),
            ("--image-height", image_height),
            ("--entries", entries),
            ("--min-tokens", min_tokens),
        ):
            if value is not None and value < 1:
                raise UsageError(f"{option} {value}: give a number >= 1")
        check_length("--min-tokens", min_tokens, 1)
        shape = _resolve_shape(dataset_id, output, image_width, image_height)
        path = _resolve_path(output, output_dir, shape)
        n = entries or shape.entries
        size = generate(path, shape, entries=n, min_tokens=min_tokens, seed=seed)
        return f"Wrote {n} entries ({size / 1e6:.1f} MB) of {shape.id} to {path}"

    report_errors(write, output or output_dir)


def main() -> None:
    app(prog_name="sfttrainer_generate_dataset_vision")


if __name__ == "__main__":
    main()
