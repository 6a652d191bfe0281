"""The one atomic write: a file under its final name is always whole, the old one or the new one.

Every process of ours that leaves a file another may read at any moment (a rank's report the
watchdog polls, a download's marker, a generated dataset, a report's page) writes it here: into
a temporary file beside it, flushed to disk, then renamed over the final name. A rename within
one directory is atomic on POSIX file systems, so a reader, or a run killed half way, never
leaves half a file under the final name.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

MODE = 0o644
"""The published file's mode: mkstemp makes it 0600, but these files are read by other users'
processes too (a shared Hugging Face cache, a report's page served as is)."""


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yields an empty temporary file beside `path`, `.<name>.<random>.partial`; when the block
    completes, the file is flushed to disk and renamed to `path`.

    The name is hidden and ends in `.partial`, so no glob for the final names (`rank-*.json`)
    sees it, and it lies in `path`'s directory, so the rename never crosses file systems. On
    any exception the temporary file is removed and the exception goes on; `path` is untouched.
    The directory must exist (callers that create it say so, and a mistyped one stays an error).
    """
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    os.close(fd)
    partial = Path(name)
    try:
        yield partial
        # Without the fsync a crash just after the rename can leave the final name holding an
        # empty file on ext4 and xfs: the rename reaches the disk before the data does.
        with open(partial, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(partial, MODE)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, data: str | bytes) -> None:
    """`data` as the whole of `path` (a str as UTF-8, its newlines as given), via `replacing`."""
    with replacing(path) as partial:
        partial.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
