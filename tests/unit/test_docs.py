"""The README stays a front door, and the docs' reference stays complete as the code grows.

The reference pages are generated at build time by docs/hooks/reference.py from the code's own
declarations; these tests check that the generator covers every experiment, entity field,
actuator parameter and command-line option (the strict build, `make docs-build`, checks links,
anchors and the navigation).
"""

import importlib.util
import re
import tomllib
import types
from pathlib import Path

import yaml
from ado.metastore.project import ProjectContext
from ado.modules.actuators.executor_supervisor import ExperimentExecutorSupervisorParameters
from markdown.extensions.toc import slugify

from ado_actuators.sfttrainer.actuator.parameters import SFTTrainerParameters
from ado_actuators.sfttrainer.catalog.entity import FIELDS
from ado_actuators.sfttrainer.catalog.experiments import catalog_data
from ado_actuators.sfttrainer.engine.settings import MeasurementSettings

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = (REPO / "README.md").read_text()


def _generator():
    spec = importlib.util.spec_from_file_location("reference", DOCS / "hooks" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REFERENCE = _generator()


def _rows(block: str) -> dict[str, list[str]]:
    """First cell (a code span) -> the row's cells, for a generated table."""
    rows = {}
    for line in block.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if cells and re.fullmatch(r"`[^`]+`", cells[0]):
            rows[cells[0].strip("`")] = cells
    return rows


def test_the_readme_is_a_front_door_with_the_two_commands():
    assert "make demo" in README and "make test" in README
    assert len(README.splitlines()) <= 250


def test_the_readmes_links_into_the_docs_reach_a_page():
    """mkdocs checks the links between pages; the README is not one of them."""
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README)
    assert len(links) >= 5
    for link in links:
        assert (REPO / link).is_file(), link


def test_every_actuator_parameter_is_in_the_reference_with_its_default_and_description():
    rows = _rows(REFERENCE.parameters())
    assert set(rows) == set(MeasurementSettings.model_fields)
    for name, info in MeasurementSettings.model_fields.items():
        default = info.default_factory() if info.default_factory else info.default
        assert rows[name][2] == REFERENCE.code(default), name
        assert info.description and rows[name][3], f"{name} has no description"


def test_actuator_parameters_are_the_engine_settings_plus_ado_supervisor_fields():
    """Each field declared once: ado-core documents and owns its supervisor timings."""
    supervisor = set(ExperimentExecutorSupervisorParameters.model_fields)
    assert (
        set(SFTTrainerParameters.model_fields) == set(MeasurementSettings.model_fields) | supervisor
    )
    assert not supervisor & set(MeasurementSettings.model_fields)
    assert set(_rows(REFERENCE.supervisor_parameters())) == supervisor


def test_every_experiment_its_aliases_and_its_properties_are_in_the_reference():
    summary, details = REFERENCE.experiments(), REFERENCE.experiment_details()
    for definition in catalog_data().experiments.values():
        for identifier in (definition.identifier, *definition.aliases):
            assert f"`{identifier}`" in summary, identifier
        section = details.split(f"### `{definition.identifier}`", 1)[1].split("### ", 1)[0]
        for name in (*definition.targets, *definition.optional_fields):
            assert f"`{name}`" in section, (definition.identifier, name)


def test_every_entity_field_is_in_the_reference_with_its_default():
    rows = _rows(REFERENCE.entity_fields())
    assert list(rows) == list(FIELDS)
    for name, field in FIELDS.items():
        expected = "required" if field.required else REFERENCE.code(field.default)
        assert rows[name][1] == expected, name


def test_every_console_script_and_every_option_is_in_the_reference():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert len(scripts) >= 5
    page = REFERENCE.cli()
    for script, entry in scripts.items():
        section = page.split(f"## `{script}`", 1)[1].split("\n## ", 1)[0]
        for param in REFERENCE._click_command(entry).params:
            for opt in param.opts if param.param_type_name == "option" else ():
                assert f"`{opt}`" in section, (script, opt)
            shown = REFERENCE.cell(REFERENCE.prose(param.help or ""))
            assert shown in section, (script, param.name)


def test_every_measured_property_is_described_in_the_guide():
    """The properties' meanings are prose in guide/properties.md; a new target property must
    be described there."""
    page = (DOCS / "guide" / "properties.md").read_text()
    targets = {t for d in catalog_data().experiments.values() for t in d.targets}
    assert len(targets) > 30
    for name in sorted(targets):
        assert f"`{name}`" in page, name


def test_a_page_asking_for_an_unknown_block_fails_the_build():
    import pytest
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="no-such-block"):
        REFERENCE.render("<!-- reference: no-such-block -->", "a page")
    assert "| `hf_home` |" in REFERENCE.render("<!-- reference: parameters -->")


def test_every_test_the_promise_map_names_exists():
    """tests/README.md maps promises to tests: a renamed or deleted test must not leave the
    map pointing at nothing."""
    tests = Path(__file__).resolve().parents[1]
    text = (tests / "README.md").read_text()
    names = 0
    for line in text.splitlines():
        current = None
        for file, name in re.findall(r"`(?:([\w/]+\.py))?::(\w+)`", line):
            current = file or current
            assert current, f"no file before ::{name} in: {line}"
            source = (tests / current).read_text()
            assert re.search(rf"^def {name}\b", source, re.MULTILINE), f"{current}::{name}"
            names += 1
    assert names > 100  # the map was read


def test_every_page_the_promise_map_names_exists():
    """Each section of tests/README.md names the docs page that makes its promises."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    pages = re.findall(r"\(\.\./(docs/[\w/-]+\.md)(?:#[\w-]*)?\)", text)
    assert len(pages) >= 10
    for page in pages:
        assert (REPO / page).is_file(), page


# ---- what the pages show: examples, commands, cluster, words, widths ---------------------------


def _hook(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHOWN = _hook("generated")
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^ *(`{3,})([^\n]*)\n(.*?)^ *\1$", re.MULTILINE | re.DOTALL)


def _page(path: Path) -> str:
    return str(path.relative_to(DOCS))


def test_every_yaml_the_docs_show_is_a_file_of_examples_included_at_build_time():
    """No page holds a YAML example of its own: each shows a file (`<!-- example: PATH -->`),
    which the build includes as it is, so the page and the file cannot differ."""
    shown = 0
    for path in PAGES:
        text = path.read_text()
        for _, info, _ in FENCE.findall(text):
            assert not info.startswith(("yaml", "yml")), f"{_page(path)}: a YAML block of its own"
        assert "--8<--" not in text, f"{_page(path)}: a raw include line (GitHub shows it)"
        for shown_path in SHOWN.EXAMPLE.findall(text) + SHOWN.INCLUDE.findall(text):
            assert (REPO / shown_path).is_file(), (_page(path), shown_path)
            shown += 1
    assert shown >= 8
    block = SHOWN.example("examples/remote-raycluster/space.yaml")
    assert (REPO / "examples/remote-raycluster/space.yaml").read_text() in block + "\n"


def test_code_lines_in_the_docs_fit_88_columns():
    """At 1280 px a code block shows about 88 columns; a longer line is cut off. The preview's
    120-column table is output the hook inserts, in a smaller font (docs/stylesheets)."""
    long = []
    included = {REPO / i for page in PAGES for i in SHOWN.INCLUDE.findall(page.read_text())}
    for path in [*PAGES, REPO / "README.md", *included]:
        for _, _, body in FENCE.findall(path.read_text()):
            long += [f"{path.name}: {line}" for line in body.splitlines() if len(line) > 88]
    for path in (REPO / "examples").rglob("*.y*ml"):
        long += [f"{path.name}: {line}" for line in path.read_text().splitlines() if len(line) > 88]
    assert not long, "\n".join(long)


PRIVATE = re.compile(r"\bthe spec\b|\bspec's\b|\bG31\b|\bG40\b|\(2B column\)", re.IGNORECASE)


def test_the_docs_use_no_private_words():
    """ "The spec" named documents a reader could not see; the shape sources' shorthand (G31)
    named a list only the shapes file holds. The pages name what they mean, linked."""
    for path in [*PAGES, REPO / "README.md", REPO / "examples/remote-raycluster/README.md"]:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            assert not PRIVATE.search(line), f"{path.name}:{number}: {line}"
    for name in ("experiments", "experiment_details", "entity_fields", "cli", "parameters"):
        generated = getattr(REFERENCE, name)()
        assert not PRIVATE.search(generated), (name, PRIVATE.search(generated))


def test_guides_carry_no_commit_dates():
    """Dates and commits belong to the benchmark pages and the changelog."""
    dated = re.compile(r"\b20\d\d-\d\d-\d\d\b|\bcommit [0-9a-f]{7,}\b")
    for path in [*(DOCS / "guide").glob("*.md"), DOCS / "index.md"]:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            assert not dated.search(line), f"{_page(path)}:{number}: {line}"


def test_the_cluster_page_offers_the_resources_a_measurement_asks_for():
    """The `ray start` lines and the KubeRay fragment offer each worker its GPU model and
    `full-worker` under the names a two-node measurement asks for, and the tests' local
    cluster offers `full-worker` under the same name."""
    import json
    import sys

    import yaml

    from ado_actuators.sfttrainer.catalog.entity import entity_values
    from ado_actuators.sfttrainer.plan.launch.launch_plan import FULL_WORKER, plan_resources

    values = {"model_name": "granite-3.1-2b", "model_max_length": 512, "batch_size": 16}
    values |= {"number_gpus": 16, "number_nodes": 2, "gpu_model": "NVIDIA-A100-SXM4-80GB"}
    asked = plan_resources(entity_values(values)).custom
    page = (DOCS / "guide" / "ray-clusters.md").read_text()
    assert "RAY_AUTH_MODE=token" in page and "ray start --head" in page
    (offered,) = [json.loads(r) for r in re.findall(r"--resources '([^']+)'", page)]
    fragment = yaml.safe_load((REPO / "examples/ray-cluster/raycluster.yaml").read_text())
    (group,) = fragment["spec"]["workerGroupSpecs"]
    in_kuberay = json.loads(json.loads(group["rayStartParams"]["resources"]))
    for offer in (offered, in_kuberay):
        assert set(asked) <= set(offer) and all(offer[k] >= v for k, v in asked.items()), offer
    sys.path.insert(0, str(REPO / "tests"))
    try:
        import ray_cluster
    finally:
        sys.path.remove(str(REPO / "tests"))
    assert ray_cluster.WHOLE_MACHINE == {FULL_WORKER: 1.0} and FULL_WORKER in asked


def test_the_preview_the_pages_show_is_run_at_build_time_and_names_each_gpu():
    output, picture = SHOWN.preview("realistic")
    assert picture.startswith(b"\x89PNG")
    lines = [line for line in output.splitlines() if line.startswith(("full ", "lora "))]
    assert len(lines) == 32 and max(len(line) for line in output.splitlines()) <= 120
    assert {line.split()[2] for line in lines} == {"A100-80GB", "H100-80GB"}
    marked = [p for p in PAGES if SHOWN.PREVIEW.search(p.read_text())]
    assert {_page(p) for p in marked} >= {"index.md", "guide/preview.md", "guide/how-to.md"}


def test_every_generated_part_says_where_it_is_on_github():
    """GitHub shows a marker as nothing: each is next to a GitHub-only line that links the file
    or says how to make the output, so the page reads sensibly there too."""
    marker = re.compile(r"^<!-- (?:example|include|preview|preview-picture): \S+ -->$")
    for path in PAGES:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if marker.match(line):
                near = lines[max(0, number - 1) : number + 2]
                assert "<!-- github-only -->" in near or "<!-- /github-only -->" in near, (
                    f"{_page(path)}:{number + 1}: {line}"
                )


def test_the_readme_lists_every_guide_page_and_the_example_readme_every_file():
    guides = {f"docs/guide/{p.name}" for p in (DOCS / "guide").glob("*.md")}
    assert guides <= set(re.findall(r"\]\((docs/guide/[^)#]+)", README))
    folder = REPO / "examples" / "remote-raycluster"
    listed = (folder / "README.md").read_text()
    for path in folder.glob("*.yaml"):
        assert f"`{path.name}`" in listed, path.name


def test_the_remote_example_context_is_a_valid_context_in_both_its_forms():
    """`ado create context -f finetuning-context.yaml` accepts the MySQL form as shipped and the
    SQLite form of its comment (the 2-node test creates that one)."""
    text = (REPO / "examples/remote-raycluster/finetuning-context.yaml").read_text()
    mysql = ProjectContext.model_validate(yaml.safe_load(text))
    assert (mysql.project, mysql.metadataStore.database) == ("finetuning", "finetuning")
    lines = text.splitlines()
    commented = lines[lines.index("# metadataStore:") :]
    sqlite = yaml.safe_load("\n".join(line.removeprefix("# ") for line in commented))
    context = ProjectContext.model_validate(yaml.safe_load(text) | sqlite)
    assert context.metadataStore.scheme == "sqlite", context


def test_a_page_shows_each_preview_command_once_and_gives_its_table_the_width():
    """The preview block prints its command above its output: a page that also writes the
    command shows it twice. Its table is 120 columns: the page has no table of contents."""
    commands = [f"```console\n{SHOWN.command(name)}\n```" for name in SHOWN.PREVIEWS]
    for path in PAGES:
        markdown = path.read_text()
        page = types.SimpleNamespace(meta={}, file=types.SimpleNamespace(src_uri=_page(path)))
        rendered = SHOWN.on_page_markdown(markdown, page=page)
        for command in commands:
            assert rendered.count(command) <= 1, (_page(path), command)
        tables = [p for p, _ in SHOWN.PREVIEW.findall(markdown) if not p]
        assert ("toc" in page.meta.get("hide", [])) == bool(tables), _page(path)


def test_a_link_to_a_section_above_or_below_points_the_right_way():
    link = re.compile(r"\]\(#([\w-]+)\)\)? (above|below)\b")
    for path in PAGES:
        text = path.read_text()
        headings = {
            slugify(m.group(1), "-"): m.start()
            for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)
        }
        for found in link.finditer(text):
            anchor, way = found.groups()
            assert anchor in headings, (_page(path), anchor)
            below = headings[anchor] > found.start()
            assert below == (way == "below"), (_page(path), anchor, way)
