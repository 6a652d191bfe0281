"""The predicted peak of an architecture the hand-written counter does not know, from a trace of
the model's own code (plan/memory/trace/step.py): the model built from its config.json at full width
under FakeTensorMode (sizes, no memory), one training step at the device's batch and length
through transformers, PEFT and torch's AdamW, every live tensor counted by phase and part. Exact
for that code: a deep model is traced on shallow copies and extrapolated per layer of each kind
where that gives its full depth's bytes (plan/memory/trace/layer_extrapolation.py), else at full depth. Each
(configuration, batch, length) is traced once, in a subprocess of this Python (torch,
transformers and peft are imported there, never here), and kept on disk under hf_home.

What a single-device trace cannot hold is added as plan/memory/peak.py adds it: FSDP's sharding
of the model states, its gathered units and the input gradients it holds.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ado_actuators.sfttrainer.contract import memory_trace
from ado_actuators.sfttrainer.contract.memory_trace import StepSpec, TracedStep, attention_named
from ado_actuators.sfttrainer.host.atomic import write_atomically
from ado_actuators.sfttrainer.plan.memory import fsdp
from ado_actuators.sfttrainer.plan.memory.bound import MemoryBound, weight_bits
from ado_actuators.sfttrainer.plan.memory.peak import (
    PeakPrediction,
    ReleaseBehaviour,
    paged_state,
    upcast_by_fsdp,
)
from ado_actuators.sfttrainer.plan.model.architecture import (
    ADAPTER_BYTES,
    DTYPE_BYTES,
    PROMPT_TUNING_VIRTUAL_TOKENS,
    LinearShape,
    ParameterCounts,
)
from ado_actuators.sfttrainer.plan.model.mamba import mamba_layers, scan_path
from ado_actuators.sfttrainer.plan.model.optimizers import optimizer_state
from ado_actuators.sfttrainer.plan.model.shape import language_config
from ado_actuators.sfttrainer.plan.model.training import TrainingConfiguration

TRACE_DIRECTORY = Path("sfttrainer") / "memory-traces"
"""Under hf_home: one JSON file per traced configuration."""
TRACE_TIMEOUT_SECONDS = 900
LIBRARIES = ("torch", "transformers", "peft")
TRACE_PACKAGE = "ado_actuators.sfttrainer.plan.memory.trace"
"""The tracing code: run as the subprocess (its __main__), and every file of it is in the key."""


class TraceUnavailable(RuntimeError):
    """The model's code could not be traced here; the message says why and what to do."""


@functools.cache
def versions() -> dict[str, str]:
    """The releases whose code is traced, read without importing them."""
    found = {}
    for library in LIBRARIES:
        try:
            found[library] = importlib.metadata.version(library)
        except importlib.metadata.PackageNotFoundError:
            found[library] = ""
    return found


def tracing_files() -> list[Path]:
    """Every file of the trace package and the boundary's own module, whatever they are called:
    a file added, moved or changed there traces anew."""
    package = Path(__file__).parent / "trace"
    return [*sorted(package.rglob("*.py")), Path(memory_trace.__file__)]


@functools.cache
def _code_digest() -> str:
    root = Path(__file__).parents[3]
    digest = hashlib.sha256()
    for path in tracing_files():
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def request(configuration: TrainingConfiguration) -> StepSpec:
    """The StepSpec of a measurement: a trace at the device's batch and length, with the code
    paths the release takes (the attention that runs), a second micro-batch when
    accumulating (its forward then runs beside the first's gradients)."""
    checkpointing = configuration.kernels.checkpointing
    return StepSpec(
        config=configuration.config or {},
        peft_method=configuration.tuning.method,
        target_modules=configuration.tuning.adapted_modules,
        lora_r=configuration.tuning.lora_r,
        lora_alpha=configuration.tuning.lora_alpha,
        prompt_tokens=PROMPT_TUNING_VIRTUAL_TOKENS,
        # under FSDP's mixed precision the layers compute with 16-bit gathered units: traced
        # so, the states kept at rest rescaled after (`_kept_by_fsdp`)
        torch_dtype=fsdp.layer_dtype(configuration),
        attention=attention_named(configuration.kernels.attention),
        checkpointing=None if checkpointing == "none" else checkpointing,
        mixed_precision=configuration.precision.mixed_precision,
        batch=configuration.batch.per_device_batch,
        length=configuration.batch.model_max_length,
        accumulation=2 if configuration.batch.gradient_accumulation_steps > 1 else 1,
        steps=1,
        mamba_scan=_scan(configuration),
    )


def _scan(configuration: TrainingConfiguration) -> str:
    """How a Mamba model's layers run (the version's package list decides: plan/model/mamba.py);
    "fused" for any other model, so its trace does not depend on the version."""
    if mamba_layers(language_config(configuration.config or {})) is None:
        return "fused"
    return scan_path(configuration.fms_hf_tuning_version)


def key(spec: StepSpec) -> str:
    """What decides a trace: the request, the traced libraries' releases, the tracing code."""
    text = json.dumps(
        {"spec": spec.as_json(), "versions": versions(), "code": _code_digest()}, sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


_MEMORY: dict[str, TracedStep] = {}


def traced(spec: StepSpec, directory: Path | None) -> TracedStep:
    """The trace of `spec`: from this process's memory, the directory's file, or a trace run
    now (a few seconds for a 7B model) and kept in both."""
    name = key(spec)
    if name in _MEMORY:
        return _MEMORY[name]
    path = directory / f"{name}.json" if directory is not None else None
    if path is not None and path.is_file():
        found = TracedStep.from_json(json.loads(path.read_text()))
    else:
        found = _run(spec)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, json.dumps(found.as_json()))
    _MEMORY[name] = found
    return found


def _run(spec: StepSpec) -> TracedStep:
    """A subprocess of this Python traces the step (plan/memory/trace/__main__.py) and prints it as JSON."""
    missing = [library for library, version in versions().items() if not version]
    if missing:
        raise TraceUnavailable(
            f"tracing the model's code needs {', '.join(missing)}: install this package's "
            f"'fms' extra (pip install 'ado-sfttrainer[fms]')"
        )
    try:
        done = subprocess.run(
            [sys.executable, "-m", TRACE_PACKAGE],
            input=json.dumps(spec.as_json()),
            capture_output=True,
            text=True,
            timeout=TRACE_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise TraceUnavailable(f"tracing took over {TRACE_TIMEOUT_SECONDS} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TraceUnavailable(
            f"transformers could not train the model from its config.json: {last}"
        )
    return TracedStep.from_json(json.loads(done.stdout))


def counts_of(inventory: dict[str, Any]) -> ParameterCounts:
    """The traced model's parameters as the bound counts them (the layers' weights as
    `attention`: the bound reads only the total and the linears)."""
    layers = inventory["total"] - inventory["embedding"] - inventory["lm_head"]
    layers -= inventory["norms"]
    linears = tuple(LinearShape(n, i, o, c) for n, i, o, c in inventory["linears"])
    return ParameterCounts(
        model_type=inventory["model_type"],
        hidden_size=inventory["hidden"],
        embedding=inventory["embedding"],
        attention=layers,
        mlp=0,
        norms=inventory["norms"],
        lm_head=inventory["lm_head"],
        quantizable=sum(i * o * c for _, i, o, c in inventory["linears"]),
        linears=linears,
    )


TRACE_PARTS = {
    "forward": "activations",
    "backward": "backward_transients",
    "weights": "weights",
    "gradients": "gradients",
    "optimizer_state": "optimizer_state",
    "optimizer_temporaries": "optimizer_temporaries",
}
"""The trace's parts (contract/memory_trace.PARTS) by the prediction's names."""


UPCAST_PARTS = ("weights", "gradients", "optimizer_temporaries")
"""The traced parts that scale with the trained parameters' dtype (`_kept_by_fsdp`)."""


def predict(
    found: TracedStep,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    behaviour: ReleaseBehaviour,
    quantized: float = 0.0,
) -> PeakPrediction:
    """The traced step's phases on one device: the optimizer state at rest beside every
    forward and backward after the first step; under FSDP the model states sharded, the root
    unit and the prefetched layers gathered, and (frozen layer units, reentrant checkpointing)
    every layer's input gradient held. `quantized`: the bytes a quantized checkpoint's block
    weights save against the traced model's dtype."""
    upcast, frozen = _kept_by_fsdp(found, configuration, behaviour)
    traced_state = found.rest.get("optimizer_state", 0) * upcast
    state, temporaries = _optimizer(found, configuration, bound, traced_state)
    phases = {}
    for phase, parts in found.phases.items():
        named = {TRACE_PARTS[part]: float(size) for part, size in parts.items() if size}
        named = {k: v * upcast if k in UPCAST_PARTS else v for k, v in named.items()}
        if phase == "optimizer_step":  # the first step's state is made in this phase
            traced = named.get("optimizer_temporaries", 0.0) - traced_state
            named["optimizer_temporaries"] = traced * temporaries
        named["optimizer_state"] = float(state)
        named["weights"] = named.get("weights", 0.0) + frozen - quantized
        phases[phase] = named
    notes = [
        f"parts from a trace of the model's own code (transformers {found.versions['transformers']}, "
        f"torch {found.versions['torch']}, peft {found.versions['peft']}, FakeTensorMode)",
        *(f"assumed: {what}" for what in found.assumed),
        *([found.depth] if found.depth else []),
    ]
    if quantized:
        notes.append(
            f"traced at {configuration.precision.torch_dtype}: the block weights at "
            f"{weight_bits(configuration)} bits as the bound counts them (dequantization not traced)"
        )
    if upcast != 1.0 or frozen:
        notes.append(
            f"traced at {fsdp.layer_dtype(configuration)}, the dtype FSDP's mixed precision gathers "
            f"every unit in; at rest trained parameters in fp32, frozen ones at "
            f"{configuration.precision.torch_dtype}"
        )
    if bound.shards > 1 and configuration.parallelism.backend == "FSDP":
        phases = _sharded(found, configuration, bound, behaviour, phases)
    return PeakPrediction(
        phases=phases,
        moments=dict.fromkeys(phases, "traced"),
        source="trace",
        notes=(*bound.notes, *notes),
        paged=paged_state(counts_of(found.inventory), configuration, bound),
    )


def _kept_by_fsdp(
    found: TracedStep, configuration: TrainingConfiguration, behaviour: ReleaseBehaviour
) -> tuple[float, float]:
    """What the states at rest are beside the trace's, traced in the dtype the layers compute in
    (fsdp.layer_dtype: FSDP's mixed precision's 16 bits over fp32 weights): the factor on the
    trained parameters' weights, gradients and optimizer states (accelerate's fp32 upcast:
    peak.upcast_by_fsdp, as peak.model_states counts it), and the bytes the frozen weights add
    at the loaded dtype (PEFT's adapters are fp32 in both)."""
    traced = DTYPE_BYTES[fsdp.layer_dtype(configuration)]
    if configuration.tuning.method == "none":
        upcast = upcast_by_fsdp(configuration, behaviour)
        return (ADAPTER_BYTES / traced if upcast else 1.0), 0.0
    loaded = DTYPE_BYTES[configuration.precision.torch_dtype]
    frozen = found.inventory["total"] - found.inventory["trainable"]
    return 1.0, float(frozen * (loaded - traced))


def _optimizer(
    found: TracedStep, configuration: TrainingConfiguration, bound: MemoryBound, traced: float
) -> tuple[float, float]:
    """The configuration's optimizer state (bytes, before sharding) and its step's temporaries
    as a multiple of the traced ones. The trace steps torch's foreach AdamW: two states
    zeros_like(param), in the dtype each parameter trains in, and one temporary of one state's
    size; an optimizer of another kind keeps its own (plan/model/optimizers.py)."""
    optimizer = optimizer_state(configuration.precision.optim)
    fixed = 0.0
    if bound.parts["optimizer_state"]:  # neither paged nor unstated
        fixed = optimizer.fixed_bytes * found.inventory["trainable"]
    return traced * optimizer.in_param_dtype / 2 + fixed, float(optimizer.temporaries)


def _sharded(
    found: TracedStep,
    configuration: TrainingConfiguration,
    bound: MemoryBound,
    behaviour: ReleaseBehaviour,
    phases: dict[str, dict[str, float]],
) -> dict[str, dict[str, float]]:
    """FSDP over `bound.shards` devices (plan/memory/fsdp.py, from the trace's parameters)."""
    inventory, shards = found.inventory, bound.shards
    layers, hidden = inventory["layers"], inventory["hidden"]
    embeddings = inventory["embedding"] + inventory["lm_head"]
    gathered = fsdp.gathered_bytes(
        inventory["total"], embeddings, layers, hidden, configuration, bound
    )
    tokens = configuration.batch.per_device_batch * configuration.model_length
    held = fsdp.held_input_gradient_bytes(layers, hidden, tokens, configuration, bound, behaviour)
    states = ("weights", "gradients", "optimizer_state", "optimizer_temporaries")
    sharded = {}
    for phase, parts in phases.items():
        parts = {k: v / shards if k in states else v for k, v in parts.items()}
        if phase != "optimizer_step":
            if "gradients" in parts:  # whole between micro-batches (FSDP's no_sync)
                parts["gradients"] *= shards / bound.gradient_shards
            parts["fsdp_gathered"] = gathered
        if phase == "backward" and held:
            parts["fsdp_held_input_gradients"] = held
        sharded[phase] = parts
    return sharded
