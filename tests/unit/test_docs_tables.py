"""Table cells on the site wrap between words and at a name's joints, never mid-word
(issue 53, part 9): docs/hooks/reference.py puts a <wbr> after each underscore and slash of a
cell's text, and stylesheets/extra.css wraps there, keeping a row's name whole where the table
has room."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import markdown

from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _hook():
    spec = importlib.util.spec_from_file_location("reference", DOCS / "hooks" / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = _hook()


def test_cells_wrap_at_a_names_joints_and_the_text_stays_whole():
    html = (
        "<p>match_exact_dependencies</p><table><tr>\n<td><code>hf_home</code></td>\n"
        '<td><a href="/data/fms_hf/">/data/fms-hf-tuning/artificial-dataset/</a></td>\n'
        "<td>rules 1-7, <code>news-tokens-16384plus-entries-4096</code></td>\n</tr></table>"
    )
    wrapped = reference.wrap_points(html)
    assert "<p>match_exact_dependencies</p>" in wrapped  # outside tables: untouched
    assert '<td class="name"><code>hf_<wbr>home</code></td>' in wrapped
    assert 'href="/data/fms_hf/"' in wrapped  # attributes untouched
    assert ">/<wbr>data/<wbr>fms-hf-tuning/<wbr>artificial-dataset/<" in wrapped
    assert "rules 1-7" in wrapped  # a range is not a joint
    assert "news-tokens-<wbr>16384plus-entries-<wbr>4096" in wrapped
    # <wbr> is no character: what a reader copies is the name as written
    assert wrapped.replace("<wbr>", "") == html.replace("<td>", '<td class="name">', 1)


def test_every_parameter_row_is_a_name_cell():
    html = reference.wrap_points(markdown.markdown(reference.parameters(), extensions=["tables"]))
    names = re.findall(r'<td class="name"><code>(.*?)</code></td>', html)
    assert [n.replace("<wbr>", "") for n in names] == list(MeasurementSettings.model_fields)
    assert "match_<wbr>exact_<wbr>dependencies" in names


def test_the_stylesheet_never_breaks_a_table_cell_mid_word():
    css = (DOCS / "stylesheets" / "extra.css").read_text()
    rules = dict(re.findall(r"([^{}]+)\{([^}]*)\}", re.sub(r"/\*.*?\*/", "", css, flags=re.S)))
    rules = {" ".join(k.split()): v for k, v in rules.items()}
    assert "anywhere" not in css.replace("break anywhere", "")
    cells = rules[".md-typeset table:not([class]) td, .md-typeset table:not([class]) td code"]
    assert "overflow-wrap: break-word" in cells and "word-break: normal" in cells
    name = ".md-typeset table:not([class]):not(:has(th:nth-child(5))) td.name"
    assert "white-space: nowrap" in rules[f"{name} code"]
    assert "display: none" in rules[f"{name} wbr"]  # Chromium would wrap at it even so
