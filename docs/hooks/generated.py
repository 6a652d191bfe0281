"""mkdocs hook: the files and the output the pages show, read and run at build time.

A page asks with an HTML comment, which GitHub shows as nothing:

- `<!-- example: PATH -->`: the file at PATH (a path from the repository's root, e.g.
  examples/remote-raycluster/space.yaml) as a code block, titled with its path, exactly as it is
  in the repository: an example cannot differ from the file it shows.
- `<!-- include: PATH -->`: a Markdown file (a README beside its code) as part of the page,
  less its own first-level heading.
- `<!-- preview: NAME -->` and `<!-- preview-picture: NAME -->`: `sfttrainer_preview`'s table
  (its terminal output) and its `--html` picture, run now on one of PREVIEWS: the output shown is
  the output of this checkout. The preview of a space takes about a second; the picture is
  written into the built site only.
- `<!-- github-only -->` ... `<!-- /github-only -->`: text for a reader of the page on GitHub
  (where the markers above show nothing), left out of the site.

An unknown name, a missing file or a preview that fails fails the build.
"""

from __future__ import annotations

import functools
import posixpath
import re
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PREVIEWS = {
    "example": (
        "examples/remote-raycluster/space.yaml",
        "examples/remote-raycluster/actuator_configuration.yaml",
    ),
    "realistic": ("examples/preview/space.yaml", None),
}
"""The spaces the pages preview: name -> (space file, actuator configuration file or None)."""
PICTURES = "generated"
"""Where in the built site the preview pictures go (they are not in docs/)."""
LANGUAGES = {".yaml": "yaml", ".yml": "yaml", ".py": "python", ".md": "markdown", ".sh": "bash"}
EXAMPLE = re.compile(r"^<!-- example: (\S+) -->$", re.MULTILINE)
INCLUDE = re.compile(r"^<!-- include: (\S+) -->$", re.MULTILINE)
PREVIEW = re.compile(r"^<!-- preview(-picture)?: ([\w-]+) -->$", re.MULTILINE)
GITHUB_ONLY = re.compile(r"^<!-- github-only -->\n.*?^<!-- /github-only -->\n?", re.M | re.S)


def _fail(message: str) -> None:
    from mkdocs.exceptions import PluginError

    raise PluginError(message)


def _file(path: str, where: str) -> Path:
    found = REPO / path
    if not found.is_file():
        _fail(f"{where} shows {path}, which is not a file of the repository")
    return found


def example(path: str, where: str = "a page") -> str:
    """The file as a titled code block, unchanged (a longer fence where it holds one)."""
    text = _file(path, where).read_text()
    fence = "`" * max([3, *(len(m) + 1 for m in re.findall(r"`{3,}", text))])
    language = LANGUAGES.get(Path(path).suffix, "text")
    return f'{fence}{language} title="{path}"\n{text.rstrip(chr(10))}\n{fence}'


def include(path: str, where: str = "a page") -> str:
    """A Markdown file's text, its first-level heading left out (the page has its own)."""
    text = _file(path, where).read_text()
    return re.sub(r"\A# [^\n]*\n+", "", text)


@functools.cache
def preview(name: str) -> tuple[str, bytes]:
    """`sfttrainer_preview SPACE --html ...` on PREVIEWS[name]: its terminal output and picture."""
    from typer.testing import CliRunner

    from ado_actuators.sfttrainer.cli.preview import app

    if name not in PREVIEWS:
        _fail(f"no preview {name!r}; known: {sorted(PREVIEWS)}")
    space, actuator = PREVIEWS[name]
    with tempfile.TemporaryDirectory() as scratch:
        page = Path(scratch) / f"{Path(space).stem}.html"
        args = [str(REPO / space), "--html", str(page)]
        args += ["--actuator-config", str(REPO / actuator)] if actuator else []
        result = CliRunner().invoke(app, args)
        if result.exit_code != 0:
            said = result.output[-2000:] or repr(result.exception)
            _fail(f"sfttrainer_preview {space} failed: {said}")
        picture = page.with_suffix(".png").read_bytes()
    shown = [line.rstrip() for line in result.output.splitlines() if "written to" not in line]
    return "\n".join(shown), picture


def command(name: str) -> str:
    """The command line a reader types for PREVIEWS[name]."""
    space, actuator = PREVIEWS[name]
    return f"sfttrainer_preview {space}" + (
        f" \\\n    --actuator-config {actuator}" if actuator else ""
    )


def preview_block(name: str) -> str:
    """The command, then what it printed (in a smaller font: its table is 120 columns wide)."""
    output, _ = preview(name)
    return f"```console\n{command(name)}\n```\n\n```{{ .text .preview-output }}\n{output}\n```"


def picture_path(name: str, page_uri: str) -> str:
    """The preview picture's address relative to the page at `page_uri`."""
    return posixpath.relpath(f"{PICTURES}/preview-{name}.png", posixpath.dirname(page_uri) or ".")


def picture(name: str, page_uri: str) -> str:
    space, _ = PREVIEWS[name]
    alt = (
        f"sfttrainer_preview's picture of {space}: predicted dataset tokens/s per GPU and GPU "
        "memory per device against batch size, one panel per experiment and GPU, one line per "
        "sequence length, the configurations predicted not to fit marked with an X"
    )
    return f"![{alt}]({picture_path(name, page_uri)})"


def render(markdown: str, page_uri: str = "index.md") -> str:
    """`markdown` with every marker replaced, and the GitHub-only text left out."""
    markdown = GITHUB_ONLY.sub("", markdown)
    markdown = EXAMPLE.sub(lambda m: example(m.group(1), page_uri), markdown)
    markdown = INCLUDE.sub(lambda m: include(m.group(1), page_uri), markdown)

    def shown(match: re.Match[str]) -> str:
        is_picture, name = match.groups()
        if name not in PREVIEWS:
            _fail(f"{page_uri} asks for a preview {name!r}; known: {sorted(PREVIEWS)}")
        return picture(name, page_uri) if is_picture else preview_block(name)

    return PREVIEW.sub(shown, markdown)


def on_config(config: Any, **_: Any) -> Any:
    preview.cache_clear()  # `make docs` rebuilds after a change: run the previews again
    return config


def on_files(files: Any, config: Any, **_: Any) -> Any:
    """The preview pictures join the site's files, so the pages' links to them are checked."""
    from mkdocs.structure.files import File

    for name in PREVIEWS:
        _, png = preview(name)
        files.append(File.generated(config, f"{PICTURES}/preview-{name}.png", content=png))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if any(not picture for picture, _ in PREVIEW.findall(markdown)):
        # the preview's table is 120 columns wide: the table of contents' column lets it fit
        # at the size of the other code blocks (stylesheets/extra.css), as `hide: [toc]` would
        hidden = page.meta.setdefault("hide", [])
        if "toc" not in hidden:
            hidden.append("toc")
    return render(markdown, page.file.src_uri)
