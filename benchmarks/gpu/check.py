"""The GPU check's steps, each in its own process under its own time budget, within one overall
deadline (a device call ends at 10 minutes): one step that hangs is stopped and reported, and
the steps after it still run. Results go to DIR/device-check.json after every step (a call cut
short still returns what was done) and the table to stdout and DIR/device-check.txt.

    python benchmarks/gpu/check.py --out DIR [--cpu] [--deadline SECONDS]

device-check.sh runs it after installing the kit; see README.md here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from rows import SETS, Config
from table import aligned, as_expected, format_table

HERE = Path(__file__).resolve().parent
RESERVE_SECONDS = 15.0
"""Kept back from the deadline for writing the results."""
MIN_STEP_SECONDS = 20.0
KILL_GRACE_SECONDS = 10.0
OOM_FORMS = {"torch_oom": 30, "context": 45, "cublas": 30, "nccl": 45}
"""Each form and its budget (seconds): each takes ~10 s when it behaves."""
LAST = ("nccl",)
"""Forms run after the training rows: NCCL is the likeliest to hang instead of failing."""
ALWAYS = ("environment", "prepare")
"""Steps every run needs, whatever --only says."""
ENTRIES = 256
"""Dataset entries (16k+ tokens each): the largest row takes 32 x 3."""
ENTRY = "device-entry.yaml"
"""What the rates step measured, as a device entry of metrics/gpu_peaks.yaml (rates.py)."""


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    argv: list[str]
    budget: float
    gpu_only: bool = False


def steps(python: str, work: Path, results: Path, cpu: bool) -> list[Step]:
    """In priority order: what a short call must not lose comes first."""
    mode = ["--cpu"] if cpu else []
    run = [python, str(HERE / "run.py"), "--set", "check", "--workdir", str(work), *mode]
    scale = 3.0 if cpu else 1.0  # the CPU rehearsal's 2 shared cores start Python slowly

    def row(config: Config) -> Step:
        # an OOM fails at its first step; one-rank FSDP/DDP check the launch, not the figures
        count = 3 if config.expect_oom else (20 if config.launcher == "single" else 10)
        budget = 120 if config.expect_oom else (200 if config.bare else 150)
        return Step(
            f"row {config.label}",
            [
                *run,
                "--label",
                config.label,
                "--steps",
                str(count),
                "--json",
                str(results / f"row-{config.label}.json"),
            ],
            budget * scale,
        )

    plan = [
        Step(
            "environment",
            [
                python,
                str(HERE / "probes.py"),
                "environment",
                "--result",
                str(results / "environment.json"),
            ],
            90 * scale,
        ),
        Step("prepare", [*run, "--prepare-only", "--entries", str(ENTRIES)], 240 * scale),
        Step(
            "nvml",
            [python, str(HERE / "probes.py"), "nvml", "--result", str(results / "nvml.json")],
            60,
            gpu_only=True,
        ),
        Step(
            "rates",
            [
                python,
                str(HERE / "rates.py"),
                "--result",
                str(results / "rates.json"),
                "--entry",
                str(results / ENTRY),
            ],
            90,
            gpu_only=True,
        ),
    ]
    forms = {
        form: Step(
            f"oom {form}",
            [
                python,
                str(HERE / "oom_forms.py"),
                form,
                "--result",
                str(results / f"oom-{form}.json"),
            ],
            budget,
            gpu_only=True,
        )
        for form, budget in OOM_FORMS.items()
    }
    rows = [row(config) for config in SETS["check"]["cpu" if cpu else "gpu"]]
    return [*plan, *(forms[f] for f in forms if f not in LAST), *rows, *(forms[f] for f in LAST)]


def _stop_tree(process: subprocess.Popen) -> None:
    """The step and everything it started (torchrun puts ranks in sessions of their own)."""
    try:
        tree = [process, *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in tree:
        try:
            proc.send_signal(signal.SIGTERM)
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    _, alive = psutil.wait_procs(
        [p for p in tree if isinstance(p, psutil.Process)], timeout=KILL_GRACE_SECONDS
    )
    for proc in [*alive, process]:
        try:
            proc.kill()
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    process.wait()


def run_step(step: Step, deadline: float, logs: Path, result_file: Path | None) -> dict:
    left = deadline - time.monotonic() - RESERVE_SECONDS
    if left < MIN_STEP_SECONDS:
        return {"status": "skipped", "why": f"no time left in the call ({left:.0f} s)"}
    timeout = min(step.budget, left)
    log = logs / (step.name.replace(" ", "-") + ".log")
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            step.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode = process.wait(timeout=timeout)
            status = "ok" if returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            _stop_tree(process)
            returncode, status = None, "timeout"
    record = {
        "status": status,
        "seconds": round(time.monotonic() - started, 1),
        "budget": round(timeout),
        "returncode": returncode,
        "log_tail": log.read_text(errors="replace")[-3000:],
    }
    if status == "timeout":
        record["why"] = f"stopped after its budget of {timeout:.0f} s"
    if result_file and result_file.is_file():
        record["result"] = json.loads(result_file.read_text())
    return record


def result_file(step: Step) -> Path | None:
    for flag in ("--result", "--json"):
        if flag in step.argv:
            return Path(step.argv[step.argv.index(flag) + 1])
    return None


def summary(report: dict) -> str:
    """The steps, the OOM forms and NVML, as text; the training rows come from print_table."""
    lines = [["step", "status", "seconds", "note"]]
    for name, record in report["steps"].items():
        note = record.get("why", "")
        if record["status"] == "failed":
            note = record["log_tail"].strip().splitlines()[-1][:100] if record["log_tail"] else ""
        lines.append([name, record["status"], str(record.get("seconds", "-")), note])
    text = [aligned(lines)]
    forms = [["OOM form", "exception", "trainer says", "log says", "message"]]
    for form in OOM_FORMS:
        result = report["steps"].get(f"oom {form}", {}).get("result")
        if result and result.get("raised"):
            first = result["message"].strip().splitlines()[0][:90] if result["message"] else ""
            forms.append(
                [
                    form,
                    result["exception_type"].rsplit(".", 1)[-1],
                    result["trainer_classifier"],
                    result["log_classifier"],
                    first,
                ]
            )
        elif result:
            forms.append([form, "(did not fail)", "-", "-", ""])
    if len(forms) > 1:
        text.append(aligned(forms))
    nvml = report["steps"].get("nvml", {}).get("result")
    if nvml:
        text.append(
            f"NVML: {json.dumps(nvml.get('load', nvml))}; energy "
            f"{nvml.get('energy_joules')} J; failures {nvml.get('failures', '-')}"
        )
    if nvml and nvml.get("machine"):
        text.append(machine_line(nvml["machine"]))
    return "\n\n".join(text)


def machine_line(machine: dict) -> str:
    """The node as every row records it (trainer/machine.py), in one line."""
    gpus = machine.get("gpus") or []
    first = gpus[0] if gpus else {}
    return (
        f"machine: {len(gpus)} x {first.get('name')}, driver {machine.get('gpu_driver')}, CUDA "
        f"{machine.get('cuda_runtime')} (driver's {machine.get('cuda_driver')}), NCCL "
        f"{machine.get('nccl')}, links: {machine.get('interconnect')}; GPU 0 SM "
        f"{first.get('sm_clock_mhz')}/{first.get('max_sm_clock_mhz')} MHz, power limit "
        f"{first.get('power_limit_watts')} W; CPU {machine.get('cpu_model')} x "
        f"{machine.get('cpu_cores')}; NVML refused {len(machine.get('problems') or [])} readings"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="the tiny model; GPU-only steps skipped")
    parser.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="seconds for all steps (default 520 on a GPU, 3000 with --cpu)",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--only",
        default=None,
        help="only the steps whose name contains this (e.g. 'oom', 'fsdp'); "
        "environment and prepare always run",
    )
    args = parser.parse_args(argv)
    deadline = time.monotonic() + (args.deadline or (3000 if args.cpu else 520))
    out = args.out.absolute()
    work = (args.workdir or Path(tempfile.mkdtemp(prefix="sft-device-check-"))).absolute()
    results, logs = work / "results", work / "logs"
    for directory in (out, results, logs):
        directory.mkdir(parents=True, exist_ok=True)
    report = {"mode": "cpu" if args.cpu else "gpu", "workdir": str(work), "steps": {}, "rows": []}
    for step in steps(sys.executable, work, results, args.cpu):
        if step.gpu_only and args.cpu:
            report["steps"][step.name] = {"status": "skipped", "why": "needs a GPU (--cpu)"}
            continue
        if args.only and args.only not in step.name and step.name not in ALWAYS:
            continue
        print(f"=== {step.name}", flush=True)
        record = run_step(step, deadline, logs, result_file(step))
        report["steps"][step.name] = record
        print(
            f"    {record['status']} {record.get('seconds', '')} s {record.get('why', '')}",
            flush=True,
        )
        if step.name.startswith("row ") and "result" in record:
            report["device"] = record["result"]["device"]
            report["gpu_model"] = record["result"]["gpu_model"]
            report["rows"] += record["result"]["rows"]
        (out / "device-check.json").write_text(json.dumps(report, indent=1))
    if (results / ENTRY).is_file():
        (out / ENTRY).write_text((results / ENTRY).read_text())
    text = summary(report) + "\n" + format_table(report["rows"], report.get("device", "?"), 300)
    print("\n" + text)
    (out / "device-check.txt").write_text(text + "\n")
    bad = [n for n, r in report["steps"].items() if r["status"] not in ("ok", "skipped")]
    bad += [f"row {r['label']} (unexpected outcome)" for r in report["rows"] if not as_expected(r)]
    if not args.cpu:  # on a GPU, the FSDP config must shard (on a CPU accelerate runs DDP)
        bad += [
            f"row {r['label']} ran as {r.get('distributed_type')}, not FSDP"
            for r in report["rows"]
            if r["config"]["launcher"] == "FSDP"
            and not r["config"]["expect_oom"]
            and r.get("distributed_type") != "FSDP"
        ]
    if bad:
        print(f"\nnot as expected: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
