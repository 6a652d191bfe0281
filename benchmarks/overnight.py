"""A night of measurements, rehearsed on this machine: killed halfway, run again, then audited.

    .venv/bin/python benchmarks/overnight.py            # 72 measurements (`make overnight`)
    .venv/bin/python benchmarks/overnight.py --small    # 24 measurements, for a CI test

On a local cluster of two raylets (tests/ray_cluster.py: `ray start --head` plus one
`ray start --address`, token authentication, CPU ranks) one `ado create operation`
(random_walk, sequential, batchSize 3) over a space of
    2 tuning methods (finetune_full / finetune_lora) x model_max_length x batch_size 2, 3, 4
    x number_nodes 1, 2 x number_gpus 0, 1 (gpu_model an A100 no node has),
tiny random Llama, max_steps 2. Mixed into it, as a night has them:
- configuration-invalid entities: number_gpus 1 over number_nodes 2 (is_valid = 0, nothing
  launched) and batch_size 3 over number_nodes 2 with CPU ranks (not divisible: Failed);
- unsatisfiable entities: number_gpus 1 of a gpu_model no node has (Failed at once);
- injected OOMs and crashes (the test hook tests/e2e/inject/sitecustomize.py, FAULT_ENV
  `oom@1` / `exception@1`): batch_size 3 at the shortest sequence length runs out of memory,
  batch_size 2 there crashes;
- the entities that OOM answers without launching (single-node CPU, batch_size >= 3 and any
  length, the OOM itself aside), and the smaller batches at longer lengths it must not answer:
  each asks the record of measured OOMs only once the OOM is recorded (the test hook's
  SFTTRAINER_TEST_AWAIT_OOM), the largest only in the run after the kill.
Once half of the trainings have started and both OOMs are recorded, the `ado` process itself
is SIGKILLed; the same operation file is then run again. Afterwards it checks and prints:
- every (entity, experiment) has exactly one request in the last run's trace, and exactly
  one stored row (Success) or none (Failed); nothing stored twice over both runs;
- no trainer or launcher process and no placement group (read from the cluster's state) is
  left after the kill, nor after the last run;
- every entity the OOM answers never launched, in either run, and its reason names the OOM's
  entity and its log (benchmarks/overnight_dominance.py); the one held back until after the
  kill was answered from the OOM the killed run recorded; the record holds one OOM per method;
- the per-measurement overhead (from ado issuing the request to the measurement's last file
  write, minus the trainer's train_runtime and minus the measurement's own wait for
  resources, `placement_wait_seconds`: with batchSize 3 on two nodes that wait is the
  schedule's, not the tool's) of the last ten trainings vs the first ten (both runs, in the
  order ado issued them): the aim is within 20 %. The waits are printed beside it.
and a table: measurements, valid, invalid, failed, duplicates, leftovers, overhead first/last.
Exit status 1 when a check fails. The cluster is always stopped (by pid).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
INJECT = TESTS / "e2e" / "inject"
sys.path[:0] = [str(TESTS), str(REPO)]  # the tests' helpers; this checkout before any install

import demo_kit  # noqa: F401,E402  (examples/local-cpu on the path)
import run_marks  # noqa: E402  (tests/)
from ado_cli import AdoCLI, generate_text_dataset  # noqa: E402
from ado_operations import leftover_processes, operation_id  # noqa: E402
from overnight_dominance import audit, experiments_recorded, record_of  # noqa: E402
from overnight_records import entities_of, key_of, overheads, stored_rows, trace  # noqa: E402
from overnight_space import (  # noqa: E402
    BATCH_SIZE_OP,
    DATASET,
    EXPERIMENTS,
    MODEL,
    awaited,
    expected,
    faults,
    method_of,
    operation_document,
    space_document,
    trainings,
    write_yaml,
)
from ray_cluster import live_placement_groups, start_cluster  # noqa: E402
from tiny_model import build_tiny_model  # noqa: E402

LEFTOVER_WAIT = 90  # seconds the killed operation's processes and placement groups may take to go
OVERHEAD_TOLERANCE = 0.20
TRAINER = "ado_actuators.sfttrainer.trainer"


# ---- what runs ---------------------------------------------------------------------------


def trainer_processes(out: Path) -> dict[int, str]:
    """pid -> command line of every launcher and rank of a measurement under `out`."""
    found = {}
    for line in leftover_processes(out):
        pid, _, cmdline = line.partition(": ")
        if TRAINER in cmdline or "accelerate" in cmdline:
            found[int(pid)] = cmdline
    return found


def measurement_dirs(out: Path) -> list[Path]:
    """Every launched measurement's directory (a multi-node one's node-K/ share one)."""
    found = set()
    for job in out.glob("*/*/job.json"):
        found.add(job.parent)
    for job in out.glob("*/*/node-*/job.json"):
        found.add(job.parent.parent)
    return sorted(found)


def run_killed_halfway(
    ado: AdoCLI, operation: Path, out: Path, half: int, log: Path, ready
) -> dict:
    """`ado create operation`, SIGKILLed once `half` trainings have started, one of them is
    training and `ready()`; then waits for what it started to go."""
    started = time.monotonic()
    with log.open("w") as handle:
        proc = subprocess.Popen(
            [ado.executable, "create", "operation", "-f", str(operation)],
            env=ado.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    killed_with: dict[int, str] = {}
    try:
        while proc.poll() is None:
            running = trainer_processes(out)
            if len(measurement_dirs(out)) >= half and running and ready():
                killed_with = running
                proc.send_signal(signal.SIGKILL)  # the ado process itself
                break
            time.sleep(0.5)
    finally:
        if proc.poll() is None and not killed_with:
            proc.kill()  # an error here: never leave it running
        proc.wait()
    killed_at = time.monotonic()
    print(
        f"first run: {'SIGKILLed' if killed_with else f'ENDED by itself (exit {proc.returncode})'} "
        f"after {killed_at - started:.1f} s, {len(measurement_dirs(out))} trainings launched, "
        f"{len(killed_with)} trainer/launcher processes running",
        flush=True,
    )
    return {"killed": bool(killed_with), "pids": killed_with, "seconds": killed_at - started}


def wait_for_leftovers(cluster, out: Path, pids: dict[int, str]) -> tuple[list[str], float]:
    """What the killed operation still has running `LEFTOVER_WAIT` s after the kill: its
    trainer/launcher processes (those running at the kill and any under `out`) and the
    cluster's placement groups; and the seconds until nothing was left."""
    started = time.monotonic()
    while True:
        alive = [f"pid {pid}: {cmd[:160]}" for pid, cmd in pids.items() if _alive(pid)]
        alive += [
            f"pid {pid}: {cmd[:160]}"
            for pid, cmd in trainer_processes(out).items()
            if pid not in pids
        ]
        groups = [f"placement group {state}" for state in live_placement_groups(cluster)]
        waited = time.monotonic() - started
        if not (alive or groups) or waited > LEFTOVER_WAIT:
            return alive + groups, waited
        time.sleep(2)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---- the rehearsal ---------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--small",
        action="store_true",
        help="two sequence lengths: 48 measurements, 14 trainings (a CI test)",
    )
    parser.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=None,
        help="model_max_length values, shortest first (default 32 64 128; --small: 32 64)",
    )
    parser.add_argument("--cpus", type=int, default=4, help="logical CPUs each raylet offers")
    parser.add_argument(
        "--report-overhead-only",
        action="store_true",
        help="print the overhead but do not judge it (a test: timings are "
        "the benchmark's claims, not a test's)",
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="kept; default: a temporary one, deleted"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the cluster on SIGTERM too
    lengths = args.lengths or ([32, 64] if args.small else [32, 64, 128])
    injected = faults(lengths)
    promised = expected(lengths, injected)
    total_trainings = trainings(promised)
    print(
        f"space: {len(promised)} measurements ({len(promised) // 2} entities x 2 methods), "
        f"{total_trainings} of them train; faults {injected}",
        flush=True,
    )

    # short: Ray's socket paths (under the cluster's own /tmp/sftc-*) and the labels
    root = (args.workdir or Path(tempfile.mkdtemp(prefix="sfton-", dir="/tmp"))).absolute()
    root.mkdir(parents=True, exist_ok=True)
    run = run_marks.Run.start()  # a killed benchmark's cluster is stopped by the next test session
    os.environ[run_marks.MARK_ENV] = str(run.directory)
    if args.workdir is None:
        run.record_path(root)
    out = root / "out"
    second_run = root / "second-run"  # what the entity held back until after the kill waits for
    offline = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(root / "hf"),
        "TMPDIR": str(root / "tmp"),
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }
    (root / "tmp").mkdir(exist_ok=True)
    started = time.monotonic()
    cluster = None
    failures: list[str] = []
    try:
        model = build_tiny_model(root / MODEL)
        data = root / "data"
        generate_text_dataset(data, DATASET, 64)
        # The raylets' workers (which run the measurements and start the trainers) import this
        # checkout and the fault hook: a `ray start` cluster's workers take the raylet's env.
        python_path = os.pathsep.join(
            filter(None, [str(INJECT), str(REPO), os.environ.get("PYTHONPATH")])
        )
        node_env = {
            **offline,
            "PYTHONPATH": python_path,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "SFTTRAINER_TEST_FAULTS": ";".join(f"{n}={f}" for n, f in injected.items()),
            "SFTTRAINER_TEST_AWAIT_OOM": ";".join(
                f"{n}@{f}" if f else n for n, f in awaited(lengths, second_run).items()
            ),
        }
        cluster = start_cluster([{}, {}], env=node_env, cpus=args.cpus)
        ado_proc_env = {
            **offline,
            "RAY_ADDRESS": cluster.address,
            **cluster.auth_env,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        print(
            f"cluster of 2 raylets x {args.cpus} CPUs at {cluster.address}; inputs ready after "
            f"{time.monotonic() - started:.1f} s",
            flush=True,
        )
        ado = AdoCLI(home=root / "ado", extra_env=ado_proc_env)
        config_id = ado.create(
            "actuatorconfiguration",
            write_yaml(
                root / "ac.yaml",
                {
                    "actuatorIdentifier": "SFTTrainer",
                    "parameters": {
                        "data_directory": str(data),
                        "hf_home": offline["HF_HOME"],
                        "output_dir": str(out),
                        "model_map": {MODEL: {"Vanilla": str(model)}},
                        "stall_timeout_seconds": 120,
                        "placement_timeout_seconds": 120,
                    },
                },
            ),
        )
        space_id = ado.create(
            "space", write_yaml(root / "space.yaml", space_document(lengths)), "--new-sample-store"
        )
        operation = write_yaml(root / "operation.yaml", operation_document(space_id, config_id))

        record = record_of(data)
        first = run_killed_halfway(
            ado,
            operation,
            out,
            math.ceil(total_trainings / 2),
            root / "first.log",
            ready=lambda: len(experiments_recorded(record)) == len(EXPERIMENTS),
        )
        if not first["killed"]:
            failures.append("the first run ended before half of the trainings had started")
        at_kill = {e.proof.get("experiment"): e.proof for e in record.ooms()}
        after_kill, cleared_in = wait_for_leftovers(cluster, out, first["pids"])
        print(
            f"after the kill: {len(after_kill)} left after {cleared_in:.1f} s {after_kill}",
            flush=True,
        )
        second_run.touch()

        second_started = time.monotonic()
        result = ado.run("create", "operation", "-f", str(operation), check=False, timeout=3600)
        second_seconds = time.monotonic() - second_started
        output = result.stdout + result.stderr
        (root / "second.log").write_text(output)
        last_id = operation_id(output)
        print(f"second run: {second_seconds:.1f} s, exit {result.returncode}", flush=True)
        at_end = [f"pid {pid}: {cmd[:160]}" for pid, cmd in trainer_processes(out).items()]
        at_end += [f"placement group {state}" for state in live_placement_groups(cluster)]

        every_request, every_result = trace(ado, space_id, False), trace(ado, space_id, True)
        operations = Counter(r.get("Operation ID") for r in every_request)
        print(f"requests per operation: {dict(operations)} (the last: {last_id})", flush=True)
        print(f"trace columns: {list(every_result[0]) if every_result else None}")
        last = [r for r in every_request if r.get("Operation ID") == last_id]
        last_results = [r for r in every_result if r.get("Operation ID") == last_id]
        first_results = [r for r in every_result if r.get("Operation ID") != last_id]
        stored, is_valid = stored_rows(ado, space_id)

        # every (entity, experiment): one request in the last trace, one row or one Failed
        in_trace = Counter(key_of(r) for r in last)
        status = {key_of(r): r["Status"] for r in last}
        reasons = {}
        for row in last_results:
            if str(row.get("Valid")).lower() != "true":
                reasons[(entities_of(row)[0], method_of(row.get("Experiment ID", "")))] = row.get(
                    "Invalid Reason", ""
                )
        # stored twice over both runs: a measurement recorded by the killed run and again by the last
        recorded = Counter(
            (entities_of(r)[0], method_of(r.get("Experiment ID", "")))
            for r in first_results + last_results
            if r.get("Request type") == "measured" and str(r.get("Valid")).lower() == "true"
        )
        counts = Counter()
        problems = [
            f"{key}: in the last trace, not in the space" for key in in_trace if key not in promised
        ]
        outcome_of = {}
        for key, promise in sorted(promised.items()):
            if in_trace[key] != 1:
                problems.append(f"{key}: {in_trace[key]} requests in the last trace")
                counts["duplicates" if in_trace[key] > 1 else "missing"] += 1
                continue
            rows = stored[key]
            if status[key] == "Failed":
                outcome = "failed"
                if rows:
                    problems.append(f"{key}: Failed but {rows} stored row(s)")
                    counts["duplicates"] += 1
            elif rows == 1:
                outcome = "valid" if float(is_valid[key][0] or "nan") == 1 else "invalid"
            else:
                problems.append(f"{key}: {status[key]} with {rows} stored rows")
                counts["duplicates" if rows > 1 else "missing"] += 1
                continue
            if recorded[key] > 1:
                problems.append(f"{key}: recorded {recorded[key]} times over both runs")
                counts["duplicates"] += 1
            counts[outcome] += 1
            outcome_of[key] = outcome
            if outcome != promise.split(":")[0]:
                problems.append(
                    f"{key}: {outcome}, the design promises {promise}: {reasons.get(key, '')[:200]}"
                )
        found, dominance = audit(
            promised,
            first_results + last_results,
            last_results,
            out,
            record,
            at_kill,
            lengths,
            second_run,
        )
        problems += found
        breakdown = Counter(
            f"{outcome_of[k]} (promised {p})" for k, p in promised.items() if k in outcome_of
        )
        failed_reasons = Counter(
            reasons[k].splitlines()[0][:90]
            for k, o in outcome_of.items()
            if o == "failed" and k in reasons
        )

        timed = overheads(first_results + last_results)
        per = [operation - train - queued for _, _, operation, train, _, queued in timed]
        waits = [before - queued for *_, before, queued in timed]
        queues = [queued for *_, queued in timed]
        n = min(10, len(per) // 2)
        head, tail = (
            (statistics.mean(per[:n]), statistics.mean(per[-n:])) if n else (math.nan, math.nan)
        )
        wait_head, wait_tail = (
            (statistics.mean(waits[:n]), statistics.mean(waits[-n:])) if n else (math.nan, math.nan)
        )
        within = n > 0 and abs(tail / head - 1) <= OVERHEAD_TOLERANCE

        print("\nper outcome (last run):")
        for line, number in sorted(breakdown.items()):
            print(f"  {number:3d}  {line}")
        print("failure reasons (last run):")
        for line, number in failed_reasons.most_common():
            print(f"  {number:3d}  {line}")
        print(
            f"timed trainings (both runs): {len(per)}; overhead per measurement (of which before "
            "launch), s: " + " ".join(f"{x:.1f} ({w:.1f})" for x, w in zip(per, waits, strict=True))
        )
        if problems:
            print("problems:\n  " + "\n  ".join(problems))
        leftovers = len(after_kill) + len(at_end)
        if at_end:
            print(f"left after the last run: {at_end}")
        rows = [
            ("measurements", len(promised)),
            ("valid", counts["valid"]),
            ("invalid (is_valid = 0)", counts["invalid"]),
            ("failed", counts["failed"]),
            ("missing", counts["missing"]),
            ("duplicates", counts["duplicates"]),
            ("answered by a measured OOM, never launched", dominance["dominated"]),
            (
                "  of which after the kill, from the killed run's record",
                dominance["answered after the kill"],
            ),
            ("OOMs recorded", dominance["recorded"]),
            (
                "leftovers after kill / at end",
                f"{len(after_kill)} / {len(at_end)} (cleared in {cleared_in:.0f} s)",
            ),
            (
                f"overhead first/last {n}, s",
                f"{head:.1f} / {tail:.1f} ({tail / head - 1:+.0%})" if n else "n/a",
            ),
            ("  of which before launch, s", f"{wait_head:.1f} / {wait_tail:.1f}" if n else "n/a"),
            (
                "waited for resources (left out), s",
                f"{statistics.mean(queues[:n]):.1f} / {statistics.mean(queues[-n:]):.1f}"
                if n
                else "n/a",
            ),
            ("runs, s", f"killed after {first['seconds']:.0f}, re-run {second_seconds:.0f}"),
        ]
        print(
            f"\novernight rehearsal ({'--small' if args.small else 'full'}, lengths {lengths}, "
            f"batchSize {BATCH_SIZE_OP}, 2 raylets x {args.cpus} CPUs)"
        )
        print("| what | value |\n|---|---|")
        for name, value in rows:
            print(f"| {name} | {value} |")
        if counts["duplicates"] or counts["missing"] or problems:
            failures.append(f"{len(problems)} measurement(s) not answered as the design promises")
        if leftovers:
            failures.append(f"{leftovers} process(es)/placement group(s) left")
        if not within and not args.report_overhead_only:
            failures.append(
                f"overhead of the last {n} not within {OVERHEAD_TOLERANCE:.0%} of the first {n}"
            )
    finally:
        if cluster is not None:
            cluster.stop()
        run.finish()
        if args.workdir is None:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    print(f"total {time.monotonic() - started:.0f} s")
    for failure in failures:
        print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
