"""Which input file a training exception is about, and what is wrong with it.

Libraries report damaged inputs without naming them: fms-hf-tuning turns a dataset with one
malformed line into "Failed to generate the dataset from the provided builder json", and
safetensors says "incomplete metadata" without the file. The files they were reading are
in their frames' locals; this module finds them and looks at the files themselves (only on
this failure path, so a successful run pays nothing).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

DATASET_SUFFIXES = (".jsonl", ".json", ".parquet")
WEIGHTS_SUFFIX = ".safetensors"
_DATASET_ERRORS = ("DatasetGenerationError", "ArrowInvalid", "JSONDecodeError")


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _paths_in(value: object) -> Iterator[str]:
    if isinstance(value, (str, os.PathLike)):
        yield os.fspath(value)
    elif isinstance(value, (list, tuple)) and len(value) < 10_000:
        for item in value:
            if isinstance(item, (str, os.PathLike)):
                yield os.fspath(item)


def paths_in_traceback(exc: BaseException, suffixes: tuple[str, ...]) -> list[Path]:
    """Existing files ending in `suffixes` held by local variables of the failing frames,
    innermost first."""
    found: dict[str, None] = {}
    for link in _chain(exc):
        frames = []
        tb = link.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            for value in list(frame.f_locals.values()):
                for path in _paths_in(value):
                    if path.endswith(suffixes) and os.path.isfile(path):
                        found.setdefault(path)
    return [Path(p) for p in found]


def first_bad_json_line(path: Path) -> tuple[int, str] | None:
    """(1-based line number, why) of the first non-blank line that is not one JSON object.

    Streams the file and stops at that line.
    """
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as error:
                return number, str(error)
            if not isinstance(record, dict):
                return number, f"a JSON {type(record).__name__}, not an object"
    return None


def _dataset_explanation(exc: BaseException, extra_paths: list[Path]) -> str | None:
    for path in extra_paths:
        # fms fails on an empty file with a bare StopIteration
        if path.is_file() and path.stat().st_size == 0:
            return f"dataset {path} is empty (0 bytes); create the file again"
    if not any(type(e).__name__ in _DATASET_ERRORS for e in _chain(exc)):
        return None
    candidates = paths_in_traceback(exc, DATASET_SUFFIXES)
    candidates += [p for p in extra_paths if p.suffix in DATASET_SUFFIXES and p.is_file()]
    for path in dict.fromkeys(candidates):
        if path.suffix == ".parquet":
            if why := unreadable_parquet(path):
                return (
                    f"dataset {path} cannot be read as parquet ({why}): it is truncated or "
                    f"damaged; create the file again"
                )
            continue
        if path.suffix != ".jsonl":
            continue
        bad = first_bad_json_line(path)
        if bad:
            line, why = bad
            return (
                f"dataset {path}: line {line} does not parse as a JSON object ({why}); "
                f"repair or delete that line, or create the file again"
            )
    return None


def unreadable_parquet(path: Path) -> str | None:
    """Why `path` is not a readable parquet file (reads its footer only), or None."""
    try:
        import pyarrow.parquet as pq

        _ = pq.ParquetFile(path).metadata  # reading the footer is the check
        return None
    except ImportError:
        return None
    except Exception as error:
        return str(error) or type(error).__name__


def unreadable_safetensors(path: Path) -> str | None:
    """Why `path` cannot be opened as safetensors (reads the header only), or None."""
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy"):
            return None
    except ImportError:
        return None
    except Exception as error:
        return str(error) or type(error).__name__


def _weights_explanation(exc: BaseException) -> str | None:
    if not any("safetensor" in type(e).__name__.lower() for e in _chain(exc)):
        return None
    for path in paths_in_traceback(exc, (WEIGHTS_SUFFIX,)):
        if why := unreadable_safetensors(path):
            return (
                f"the weights file {path} cannot be read ({why}): it is truncated or damaged; "
                f"download or copy the model's weights again"
            )
    return None


def explain(exc: BaseException, extra_paths: list[Path] | None = None) -> str | None:
    """A first line naming the damaged input file and the fix, when `exc` is about one."""
    try:
        return _dataset_explanation(exc, extra_paths or []) or _weights_explanation(exc)
    except Exception:
        return None
