"""What `make test` prints of coverage (tests/coverage/summary.py): the total, and every
module under the bar with its recorded reason, or a call to record one."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coverage"))

import summary


def test_modules_under_the_bar_are_named_with_their_reason_or_a_call_for_one():
    modules = {"a.py": 95.0, "b.py": 50.0, "c.py": 79.9, "d.py": 80.0}
    printed = summary.lines(91.24, modules, {"b.py": "GPU only: see the GPU kit", "d.py": "old"})
    assert printed[0] == "coverage (every process the tests started): 91.2 % of lines"
    assert printed[1] == "modules under 80 %:"
    assert printed[2] == "   50.0 %  b.py: GPU only: see the GPU kit"
    assert printed[3].startswith("   79.9 %  c.py: NO REASON RECORDED")
    assert printed[4] == "at or over the bar now, their reasons can go: d.py"
    assert len(printed) == 5


def test_every_recorded_reason_names_a_module_of_the_package():
    package = Path(__file__).resolve().parents[2] / "ado_actuators" / "sfttrainer"
    for module in summary.reasons():
        assert (package / module).is_file(), (
            f"tests/coverage/gaps.toml names {module}, which is gone"
        )


def test_the_json_report_is_read_per_module_under_the_package():
    report = {
        "files": {
            "/x/ado_actuators/sfttrainer/execute/node.py": {"summary": {"percent_covered": 81.5}},
            "/x/elsewhere/other.py": {"summary": {"percent_covered": 10.0}},
        }
    }
    assert summary.per_module(report) == {"execute/node.py": 81.5}
