"""The ground truth for the predicted peak: the training step itself, run through the same code
the trainer runs, every live tensor counted (plan/memory/trace/step.py), against the prediction the
product makes for it (plan/memory/verdict.py's path: the formula of plan/memory/peak.py and
plan/memory/activations.py for the architectures it counts, a trace of the model's own code
(plan/memory/traced.py) for the others).

    python benchmarks/memory_truth.py            # the matrix, full size (minutes)
    python benchmarks/memory_truth.py --quick    # the slice make test runs (4 layers)
    python benchmarks/memory_truth.py --record   # the matrix, kept in data/memory_truth.json
    python benchmarks/memory_truth.py --append   # only the configurations the record lacks
                                                 # (the pairwise rows among them)

How the truth is taken:
- full size under FakeTensorMode: the model built from its config.json at full width and depth,
  its tensors fake (sizes, no memory, no arithmetic), two steps (the second holds the optimizer
  state); transformers 4.55, PEFT 0.19, torch's foreach AdamW as this environment pins them;
  flash-attn 2 emulated (its saved tensors and workspaces, plan/memory/trace/flash_emulation.py); routing
  balanced (a fake tensor has no values);
- fake against real: the same step with real tensors at a reduced width agrees to the byte
  (printed first), so the fake sizes are the real ones;
- FSDP: two gloo ranks on this CPU, real tensors at a reduced width, frozen (LoRA) and trained
  (full) layer units, accelerate's settings (transformer-layer units, use_orig_params,
  FULL_SHARD, BACKWARD_PRE); each rank's peak against the prediction for 2 devices.

Each configuration prints the traced and predicted bytes of its three phases (forward, backward,
optimizer step) and the peak's error; then the median and worst |error|, and the parts of the
worst one.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import socket
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory_bound import load_configs
from memory_truth_matrix import design, step

from ado_actuators.sfttrainer.catalog import datasets
from ado_actuators.sfttrainer.catalog.model_shapes import shipped_shapes
from ado_actuators.sfttrainer.contract.memory_trace import PHASES, StepSpec
from ado_actuators.sfttrainer.contract.units import GIB, MIB
from ado_actuators.sfttrainer.plan.memory import hybrid
from ado_actuators.sfttrainer.plan.memory import traced as traced_parts
from ado_actuators.sfttrainer.plan.memory.bound import memory_bound
from ado_actuators.sfttrainer.plan.memory.logits import loss_code
from ado_actuators.sfttrainer.plan.memory.peak import (
    Dimensions,
    PeakPrediction,
    ReleaseBehaviour,
    predict_peak,
)
from ado_actuators.sfttrainer.plan.memory.trace.step import trace_step
from ado_actuators.sfttrainer.plan.model.architecture import COUNTED, count_parameters
from ado_actuators.sfttrainer.plan.model.releases import checkpointing
from ado_actuators.sfttrainer.plan.model.shape import ModelShape
from ado_actuators.sfttrainer.plan.model.training import (
    Batch,
    Kernels,
    Parallelism,
    Precision,
    TrainingConfiguration,
    Tuning,
)
from ado_actuators.sfttrainer.plan.model.vision import VisionShape

RELEASE = "4.55.4"
"""The transformers release this environment trains with (fms-hf-tuning 3.2.2's)."""
TOLERANCE = 0.05

FAMILIES = {
    # the catalogue's families (catalog/models.yaml) and their LoRA targets (experiments.yaml)
    "mistralai/Mistral-7B-v0.1": ("q_proj", "v_proj"),
    "meta-llama/Meta-Llama-3-8B": ("q_proj", "k_proj"),
    "ibm-granite/granite-3.1-8b-instruct": ("q_proj", "v_proj"),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": ("q_proj", "v_proj"),
    "ibm-granite/granite-3.0-3b-a800m-instruct": ("q_proj", "v_proj"),
    "bigcode/gpt_bigcode-santacoder": ("c_attn", "c_proj"),
    "Qwen/Qwen2.5-7B": ("q_proj", "v_proj"),
    # architectures the hand-written counter does not know: traced
    "google/gemma-2-9b": ("q_proj", "v_proj"),
    "microsoft/Phi-3-mini-4k-instruct": ("qkv_proj",),
    "ibm-ai-platform/Bamba-9B": ("q_proj", "v_proj"),
    "ibm-granite/granite-4.0-h-small": ("q_proj", "v_proj"),
    # Granite 4.0's other hybrid sizes, by formula since issue 52 (plan/memory/hybrid.py)
    "ibm-granite/granite-4.0-h-tiny": ("q_proj", "v_proj"),
    "ibm-granite/granite-4.0-h-1b": ("q_proj", "v_proj"),
}
METHODS = ("none", "lora", "pt")
CHECKPOINTING = (None, "reentrant", "non_reentrant")
SIZES = ((1, 1024), (4, 1024), (1, 4096), (4, 4096))
EVERY_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    spec: StepSpec
    shards: int = 1
    entity: dict[str, Any] | None = None
    """The pairwise design's row it traces (memory_truth_matrix), its entity values."""

    def label(self) -> str:
        s = self.spec
        method = s.peft_method if s.peft_method != "lora" else "lora:" + "+".join(s.target_modules)
        ckpt = {None: "off", "reentrant": "reentrant", "non_reentrant": "non-reentr"}
        fsdp = f" FSDPx{self.shards}" if self.shards > 1 else ""
        mixed = " bf16-mixed" if s.mixed_precision else ""
        dtype = "" if s.torch_dtype == "bfloat16" else f" {s.torch_dtype}"
        scan = " torch-scan" if s.mamba_scan == "torch" else ""
        image = f" image {s.image[0]}x{s.image[1]}" if s.image else ""
        return (
            f"{self.name.split('/')[-1][:22]:22} {method[:16]:16} {ckpt[s.checkpointing]:10} "
            f"{s.attention[:5]:5} b{s.batch} s{s.length}{fsdp}{mixed}{dtype}{scan}{image}"
        )


def matrix(layers: int | None = None) -> list[Case]:
    """A sampled design: every family with every method, every checkpointing mode and every
    size over the design (Latin-square rotation), attention flash-attn 2 (the actuator's
    default) with sdpa and eager on a few."""
    configs = load_configs()
    cases = []
    for index, (name, targets) in enumerate(FAMILIES.items()):
        config = _sized(configs[name], layers)
        config.pop("quantization_config", None)
        for offset, method in enumerate(METHODS):
            ckpt = CHECKPOINTING[(index + offset) % 3]
            batch, length = SIZES[(index + 2 * offset) % 4]
            attention = "flash_attention_2"
            if method == "none" and index % 3 == 1:
                attention = "sdpa"
            spec = StepSpec(
                config,
                peft_method=method,
                target_modules=targets if method == "lora" else (),
                lora_r=8,
                lora_alpha=16,
                attention=attention,
                checkpointing=ckpt,
                batch=batch,
                length=length,
            )
            cases.append(Case(name, spec))
    return cases + _crossings(configs, layers) + mixed_precision(layers) + mlp_adapters(layers)


def _crossings(configs: dict[str, dict], layers: int | None) -> list[Case]:
    """The crossings that matter: LoRA at both sizes under all three checkpointing modes on
    Mistral-7B, eager attention, and LoRA on every linear."""
    mistral = _sized(configs["mistralai/Mistral-7B-v0.1"], layers)
    cases = []
    for ckpt, (batch, length) in itertools.product(CHECKPOINTING, ((2, 2048), (8, 4096))):
        spec = StepSpec(
            mistral, "lora", ("q_proj", "v_proj"), checkpointing=ckpt, batch=batch, length=length
        )
        cases.append(Case("mistralai/Mistral-7B-v0.1", spec))
    for method in ("lora", "pt"):
        spec = StepSpec(
            mistral,
            method,
            ("q_proj", "v_proj") if method == "lora" else (),
            attention="eager",
            batch=1,
            length=1024,
        )
        cases.append(Case("mistralai/Mistral-7B-v0.1", spec))
    for ckpt in (None, "non_reentrant"):
        spec = StepSpec(mistral, "lora", EVERY_LINEAR, checkpointing=ckpt, batch=2, length=2048)
        cases.append(Case("mistralai/Mistral-7B-v0.1", spec))
    return cases


MIXED = (
    ("mistralai/Mistral-7B-v0.1", "lora", "non_reentrant", 4, 4096),
    ("ibm-granite/granite-3.0-3b-a800m-instruct", "lora", "non_reentrant", 4, 4096),
    ("mistralai/Mistral-7B-v0.1", "none", None, 1, 1024),
    ("meta-llama/Meta-Llama-3-8B", "pt", "reentrant", 1, 4096),
    ("bigcode/gpt_bigcode-santacoder", "lora", "reentrant", 4, 1024),
)
"""Under accelerate's bf16 autocast (fms-hf-tuning's --bf16): the returned logits converted to
fp32 beside TRL's copy of them, for both loss codes transformers 4.55 has (the loss upcasts:
Mistral, Llama, GPTBigCode; the model does: GraniteMoE), under each method."""


def mixed_precision(layers: int | None = None) -> list[Case]:
    """The MIXED configurations."""
    configs = load_configs()
    cases = []
    for name, method, ckpt, batch, length in MIXED:
        config = _sized(configs[name], layers)
        spec = StepSpec(
            config,
            method,
            FAMILIES[name] if method == "lora" else (),
            lora_r=8,
            lora_alpha=16,
            checkpointing=ckpt,
            batch=batch,
            length=length,
            mixed_precision=True,
        )
        cases.append(Case(name, spec))
    return cases


MLP_ADAPTERS = (
    ("mistralai/Mistral-7B-v0.1", ("gate_proj", "up_proj", "down_proj"), None, 2, 2048),
    ("mistralai/Mistral-7B-v0.1", ("gate_proj",), "non_reentrant", 4, 4096),
    ("meta-llama/Meta-Llama-3-8B", ("up_proj", "down_proj"), None, 1, 4096),
    ("meta-llama/Meta-Llama-3-8B", EVERY_LINEAR, "reentrant", 2, 2048),
    ("ibm-granite/granite-3.1-8b-instruct", ("down_proj",), None, 1, 1024),
    ("Qwen/Qwen2.5-7B", ("o_proj", "up_proj"), None, 2, 1024),
    ("bigcode/gpt_bigcode-santacoder", ("c_fc",), None, 4, 1024),
    ("bigcode/gpt_bigcode-santacoder", ("c_fc", "c_proj"), None, 1, 4096),
    ("bigcode/gpt_bigcode-santacoder", ("c_attn", "c_proj", "c_fc"), None, 4, 1024),
)
"""LoRA on the MLP's linears alone (and on every linear): in the first layer, whose input
needs no gradient, only what an adapter's output reaches is kept (plan/memory/activations.py's
`needs`), and an MLP adapter's forward is the layer's largest. (model, targets, checkpointing,
batch, length); GPTBigCode's layers ignore checkpointing in transformers 4.55."""


def mlp_adapters(layers: int | None = None) -> list[Case]:
    """The MLP_ADAPTERS configurations, then the same on models whose layers, not their
    logits, decide the peak (LAYERED and its GPTBigCode kin: the last layer's forward is the
    peak, an MLP adapter's its largest moment)."""
    configs = load_configs()
    cases = []
    for name, targets, ckpt, batch, length in MLP_ADAPTERS:
        config = _sized(configs[name], layers)
        spec = StepSpec(config, "lora", targets, checkpointing=ckpt, batch=batch, length=length)
        cases.append(Case(name, spec))
    for name, config, targets in (
        ("small llama (h 512, 8 layers)", LAYERED, ("gate_proj",)),
        ("small llama (h 512, 8 layers)", LAYERED, ("down_proj",)),
        ("small gpt_bigcode (h 512, 8 layers)", LAYERED_BIGCODE, ("c_fc",)),
    ):
        cases.append(Case(name, StepSpec(dict(config), "lora", targets, batch=2, length=512)))
    return cases


def pairwise_cases() -> list[Case]:
    """The pairwise design over the entity's declared domains (memory_truth_matrix), one
    case per row, named by its index and family."""
    return [
        Case(f"pw{index:02d} {entity['family']}", step(entity), entity=entity)
        for index, entity in enumerate(design())
    ]


def _sized(config: dict[str, Any], layers: int | None) -> dict[str, Any]:
    """A copy of `config`, at `layers` layers where given (the --quick slice)."""
    return _depth(config, layers) if layers else dict(config)


def _depth(config: dict[str, Any], layers: int) -> dict[str, Any]:
    """The same model with `layers` layers (hybrids keep their kinds' order; a vision-language
    model's language model, its vision tower whole)."""
    config = dict(config)
    if isinstance(config.get("text_config"), dict):
        return {**config, "text_config": _depth(config["text_config"], layers)}
    for key in ("num_hidden_layers", "n_layer"):
        if key in config:
            config[key] = layers
    if "layer_types" in config:
        kinds = config["layer_types"]
        chosen = [kinds[i * len(kinds) // layers] for i in range(layers)]
        if "attention" in kinds and "attention" not in chosen:
            chosen[layers // 2] = "attention"
        config["layer_types"] = chosen
    if "attn_layer_indices" in config:
        config["attn_layer_indices"] = [layers // 2]
    return config


def case_spec(
    config: dict[str, Any],
    method: str,
    *,
    torch_dtype: str,
    mixed_precision: bool,
    checkpointing: str | None,
    attention: str,
    batch: int,
    length: int,
) -> StepSpec:
    """The step of a sweep's or a harness's case: LoRA on q and v, no dropout (ATen's CPU
    dropout keeps a noise tensor where CUDA keeps a one-byte mask)."""
    return StepSpec(
        dict(config),
        method,
        ("q_proj", "v_proj") if method == "lora" else (),
        lora_dropout=0.0,
        torch_dtype=torch_dtype,
        attention=attention,
        checkpointing=checkpointing,
        mixed_precision=mixed_precision,
        batch=batch,
        length=length,
    )


def image_dataset(image: tuple[int, int] | None) -> str:
    """The catalogue's vision dataset of images of `image`'s (height, width); "" for text."""
    if image is None:
        return ""
    height, width = image
    for dataset_id, shape in datasets.SHAPES.items():
        if shape.kind == "vision" and (shape.image_height, shape.image_width) == (height, width):
            return dataset_id
    raise ValueError(f"no vision dataset of {height}x{width} images in the catalogue")


def training_of(spec: StepSpec, shards: int = 1) -> TrainingConfiguration:
    return TrainingConfiguration(
        config=spec.config if spec.image else None,
        dataset_id=image_dataset(spec.image),
        tuning=Tuning(
            method=spec.peft_method, lora_r=spec.lora_r, target_modules=spec.target_modules
        ),
        parallelism=Parallelism(gpus=shards),
        batch=Batch(
            per_device_batch=spec.batch,
            model_max_length=spec.length,
            gradient_accumulation_steps=spec.accumulation,
        ),
        kernels=Kernels(attention=spec.attention, checkpointing=spec.checkpointing or "none"),
        precision=Precision(
            torch_dtype=spec.torch_dtype,
            mixed_precision=spec.mixed_precision,
            autocast_dtype="bfloat16",  # the trace's autocast
        ),
    )


def behaviour_of(spec: StepSpec, model_type: str) -> ReleaseBehaviour:
    """What plan/memory/verdict.behaviour_of builds for the same entity under fms-hf-tuning 3.2.2."""
    style = checkpointing(RELEASE, model_type)
    return ReleaseBehaviour(
        checkpointing_honoured=style != "none",
        checkpointed_by_model=style == "model",
        loss=loss_code(RELEASE, model_type),
        logits_copy=True,
        lora_dropout=spec.lora_dropout > 0,
        fsdp_upcast=spec.mixed_precision,  # FSDP's, where it runs (more than one device)
    )


SCAN_VERSIONS = {"fused": "3.1.0", "torch": "3.2.2"}
"""fms-hf-tuning versions whose transformers is RELEASE, by the Mamba scan path their package
lists give (mamba-ssm and causal-conv1d listed, or not): the trace runs the step's."""


def predicted(spec: StepSpec, shards: int = 1) -> PeakPrediction:
    """The product's prediction for the step: by formula where plan/model/architecture.py counts the
    model or it is a Granite 4.0 hybrid (plan/memory/hybrid.py), else from a trace of its code
    (plan/memory/traced.py, run as the product runs it)."""
    model_type = ModelShape.of(spec.config).model_type
    training = training_of(spec, shards)
    behaviour = behaviour_of(spec, model_type)
    if hybrid.is_hybrid(spec.config):
        twin = ModelShape.of(hybrid.twin_config(spec.config)).model_type
        stated = dataclasses.replace(
            training,
            config=spec.config,
            shape=None,
            fms_hf_tuning_version=SCAN_VERSIONS[spec.mamba_scan],
        )
        return hybrid.predict_hybrid(stated, behaviour_of(spec, twin)).prediction
    if model_type in COUNTED:
        counts = count_parameters(spec.config)
        bound = memory_bound(counts, training)
        adapted = spec.target_modules if spec.peft_method == "lora" else ()
        return predict_peak(counts, Dimensions.of(spec.config), training, bound, behaviour, adapted)
    # the request the product sends for this step (plan/memory/traced.request): one step, a
    # second micro-batch only to show the first's gradients beside its forward
    request = dataclasses.replace(spec, steps=1, accumulation=min(spec.accumulation, 2))
    found = traced_parts.traced(request, None)
    bound = memory_bound(traced_parts.counts_of(found.inventory), training)
    return traced_parts.predict(found, training, bound, behaviour)


@dataclasses.dataclass(frozen=True)
class Row:
    case: Case
    traced: dict[str, dict[str, int]]
    prediction: PeakPrediction
    seconds: float

    def total(self, phase: str) -> float:
        return sum(self.traced[phase].values())

    @property
    def peak(self) -> float:
        return max(self.total(phase) for phase in self.traced)

    @property
    def error(self) -> float:
        return self.prediction.total / self.peak - 1


def run(case: Case) -> Row:
    start = time.monotonic()
    trace = trace_step(case.spec)
    return Row(case, trace.phases, predicted(case.spec), time.monotonic() - start)


SMALL = {
    "model_type": "llama",
    "vocab_size": 2048,
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": False,
}
"""A Llama at a reduced width: real tensors on this CPU (fake against real, FSDP)."""


def fake_against_real() -> list[tuple[str, dict[str, int], dict[str, int]]]:
    """The same step traced with fake and with real tensors: (what, fake totals, real)."""
    found = []
    for method, ckpt, attention in (
        ("none", None, "flash_attention_2"),
        ("lora", "reentrant", "sdpa"),
        ("pt", "non_reentrant", "eager"),
    ):
        targets = ("q_proj", "v_proj") if method == "lora" else ()
        spec = StepSpec(
            SMALL, method, targets, attention=attention, checkpointing=ckpt, batch=2, length=128
        )
        totals = []
        for fake in (True, False):
            trace = trace_step(dataclasses.replace(spec, fake=fake))
            totals.append({phase: trace.total(phase) for phase in PHASES})
        found.append((f"{method} {ckpt or 'off'} {attention}", *totals))
    return found


FSDP_CASES = (
    ("none", None, False),
    ("none", "reentrant", False),
    ("lora", "reentrant", False),
    ("lora", "non_reentrant", False),
    ("pt", "reentrant", False),
    ("none", None, True),
    ("none", "reentrant", True),
    ("lora", "non_reentrant", True),
)
"""(method, checkpointing, fp32 weights under bf16 mixed precision: FSDP's policy gathers each
unit in bf16, accelerate's upcast keeps what trains in fp32)."""


LAYERED = dict(SMALL, vocab_size=512, hidden_size=512, intermediate_size=1408, num_hidden_layers=8)
"""A Llama whose layers, not its logits, decide the peak: FSDP's terms show."""
LAYERED_BIGCODE = {
    "model_type": "gpt_bigcode",
    "vocab_size": 512,
    "n_embd": 512,
    "n_inner": 1408,
    "n_layer": 8,
    "n_head": 4,
    "n_positions": 1024,
    "multi_query": True,
}
"""LAYERED's GPTBigCode kin (multi-query attention, resid_pdrop's default 0.1)."""


def fsdp_cases(batch: int = 2, length: int = 512) -> list[Case]:
    """The FSDP rows' steps: the small Llama over two devices."""
    cases = []
    for method, ckpt, mixed in FSDP_CASES:
        targets = ("q_proj", "v_proj") if method == "lora" else ()
        spec = StepSpec(
            LAYERED, method, targets, checkpointing=ckpt, batch=batch, length=length, fake=False
        )
        if mixed:
            spec = dataclasses.replace(spec, torch_dtype="float32", mixed_precision=True)
        cases.append(Case("small llama (h 512, 8 layers)", spec, shards=2))
    return cases


def fsdp_rows(cases: list[Case] | None = None) -> list[Row]:
    """Two gloo ranks train the small Llama under FSDP as accelerate wraps it; each case's
    row is the trace of the rank whose peak is larger (both are printed)."""
    import tempfile

    import torch.multiprocessing as mp

    rows = []
    for case in fsdp_cases() if cases is None else cases:
        with tempfile.TemporaryDirectory() as directory:
            start = time.monotonic()
            port = _free_port()
            mp.start_processes(
                _rank, (case.spec, directory, port), nprocs=2, join=True, start_method="spawn"
            )
            ranks = [json.loads(Path(directory, f"{r}.json").read_text()) for r in range(2)]
        row = Row(case, ranks[0], predicted(case.spec, shards=2), time.monotonic() - start)
        rows.append(
            dataclasses.replace(
                row, traced=max(ranks, key=lambda r: max(sum(p.values()) for p in r.values()))
            )
        )
    return rows


def branch_cases() -> list[Case]:
    """Small models (fake tensors, seconds each) that reach branches of the formula the matrix
    does not: a one-layer model (its first layer is also its last), a tied LM head trained
    with a vocabulary small enough that a layer's backward is the peak, a LoRA rank and
    dropout off the defaults, Qwen3's q/k norms, GraniteMoE's shared MLP with two experts, a
    one-expert MoE (still its experts' code), mixed precision's 16-bit adapter inputs and fp32
    logits, an attention adapter's forward outgrowing a narrow MLP's."""
    qv = ("q_proj", "v_proj")
    one = dict(LAYERED, num_hidden_layers=1)
    moe = dict(LAYERED, num_hidden_layers=4, intermediate_size=512, num_experts_per_tok=1)
    shared = dict(moe, model_type="granitemoeshared", shared_intermediate_size=1024)
    cases = [
        ("llama, 1 layer", StepSpec(one, checkpointing="reentrant")),
        ("llama, 1 layer", StepSpec(one, "lora", qv, checkpointing="reentrant")),
        ("llama, 1 layer", StepSpec(one, "lora", qv, checkpointing="non_reentrant")),
        ("llama, r16, dropout 0", StepSpec(LAYERED, "lora", qv, lora_r=16, lora_dropout=0.0)),
        ("llama, tied, vocab 64", StepSpec(dict(LAYERED, tie_word_embeddings=True, vocab_size=64))),
        ("qwen3 (h 512)", StepSpec(dict(LAYERED, model_type="qwen3", head_dim=128), "lora", qv)),
        ("granitemoeshared 2 exp", StepSpec(dict(shared, num_local_experts=2), "lora", qv)),
        (
            "granitemoe, 1 expert",
            StepSpec(dict(moe, model_type="granitemoe", num_local_experts=1), "lora", qv),
        ),
        (
            "llama vocab 16k, mixed",
            StepSpec(dict(LAYERED, vocab_size=16384), "lora", qv, mixed_precision=True),
        ),
        (
            "llama, MLP 128, vocab 64",
            StepSpec(dict(LAYERED, intermediate_size=128, vocab_size=64), "lora", ("o_proj",)),
        ),
    ]
    found = [Case(name, dataclasses.replace(spec, batch=2, length=512)) for name, spec in cases]
    return found + hybrid_scan_cases() + vision_cases()


SMALL_HYBRID = {
    "model_type": "granitemoehybrid",
    "vocab_size": 512,
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["mamba", "attention", "mamba", "mamba"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "intermediate_size": 128,
    "shared_intermediate_size": 256,
    "mamba_n_heads": 8,
    "mamba_d_head": 64,
    "mamba_d_state": 32,
    "mamba_chunk_size": 64,
    "tie_word_embeddings": True,
}
"""A Granite 4.0 hybrid whose Mamba layers, not its logits, decide the peak."""


SMALL_VISION = {
    "model_type": "llava_next",
    "text_config": {**LAYERED, "num_hidden_layers": 2, "vocab_size": 1024},
    "vision_config": {
        "model_type": "siglip_vision_model",
        "hidden_size": 128,
        "intermediate_size": 512,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "image_size": 64,
        "patch_size": 8,
    },
    "image_token_index": 1000,
    "vision_feature_layer": [-3, -1],
    "vision_feature_select_strategy": "full",
    "image_grid_pinpoints": [[64, 64], [64, 128], [128, 64], [128, 128]],
}
"""A tiny LLaVA-NeXT as granite-vision is built (a SigLIP tower, several feature layers, "full"
features), whose tower keeps as much as its language model: traced with real tensors too."""
VISION_IMAGES = ((384, 384), (768, 384))
"""The catalogue's vision datasets' images, (height, width)."""


def vision_cases() -> list[Case]:
    """granite-vision-3.2-2b (its language model at 4 layers, its tower whole) on the taller
    image under each method and checkpointing mode, and the tiny LLaVA-NeXT on both images:
    the vision tower's and projector's kept tensors (plan/memory/vision.py)."""
    granite = _depth(dict(shipped_shapes()["granite-vision-3.2-2b"]["config"]), 4)
    image = VISION_IMAGES[1]
    tokens = VisionShape.of(granite).image_tokens(*image)  # type: ignore[union-attr]  # a vision config
    cases = []
    for method, ckpt in itertools.product(METHODS, CHECKPOINTING):
        targets = ("q_proj", "v_proj") if method == "lora" else ()
        spec = StepSpec(
            granite, method, targets, checkpointing=ckpt, image=image, length=tokens + 256
        )
        cases.append(Case("ibm-granite/granite-vision-3.2-2b", spec))
    for image, method in itertools.product(VISION_IMAGES, ("none", "lora")):
        tiny = VisionShape.of(SMALL_VISION).image_tokens(*image)  # type: ignore[union-attr]  # a vision config
        targets = ("q_proj", "v_proj") if method == "lora" else ()
        spec = StepSpec(SMALL_VISION, method, targets, image=image, batch=2, length=tiny + 64)
        cases.append(Case("small llava_next (siglip)", spec))
    return cases


def hybrid_scan_cases() -> list[Case]:
    """SMALL_HYBRID on both scan paths (issue 52): the fused kernel as emulated, and
    transformers' torch_forward as it runs, under LoRA, full fine-tuning and prompt tuning
    (whose virtual tokens make a sample no whole number of chunks: torch_forward pads it);
    granite-4.0-h-1b's prompt tuning on the torch path at its own sizes."""
    qv = ("q_proj", "v_proj")
    h1b = _depth(load_configs()["ibm-granite/granite-4.0-h-1b"], 4)
    spec = StepSpec(h1b, "pt", checkpointing="reentrant", length=1024, mamba_scan="torch")
    cases = [Case("ibm-granite/granite-4.0-h-1b", spec)]
    for scan, (method, ckpt) in itertools.product(
        ("fused", "torch"), (("lora", None), ("none", "reentrant"), ("pt", "reentrant"))
    ):
        spec = StepSpec(
            SMALL_HYBRID,
            method,
            qv if method == "lora" else (),
            attention="sdpa",
            checkpointing=ckpt,
            batch=2,
            length=256,
            mamba_scan=scan,
        )
        cases.append(Case("granite 4.0 hybrid (h 256)", spec))
    return cases


def _rank(rank: int, spec: StepSpec, directory: str, port: int) -> None:
    import json

    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        trace = trace_step(spec, wrap=functools.partial(_fsdp, mixed=spec.mixed_precision))
        Path(directory, f"{rank}.json").write_text(json.dumps(trace.phases))
    finally:
        dist.destroy_process_group()


def _fsdp(model: Any, mixed: bool = False) -> Any:
    """accelerate's FSDP as the actuator configures it (plan/launch/accelerate.py): FULL_SHARD,
    BACKWARD_PRE, use_orig_params; the decoder layers as units, or, under PEFT, PEFT's own
    policy (the adapters units of their own) as transformers' Trainer installs it. `mixed`:
    under bf16 mixed precision, the policy accelerate gives FSDP (every dtype bf16)."""
    import torch
    from torch.distributed.fsdp import (
        BackwardPrefetch,
        FullyShardedDataParallel,
        MixedPrecision,
        ShardingStrategy,
    )
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    if hasattr(model, "peft_config"):
        from peft.utils.other import fsdp_auto_wrap_policy

        policy = fsdp_auto_wrap_policy(model)
    else:
        names = set(model._no_split_modules)
        layers = {type(m) for m in model.modules() if type(m).__name__ in names}
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layers)
    return FullyShardedDataParallel(
        model,
        auto_wrap_policy=policy,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
        use_orig_params=True,
        device_id=torch.device("cpu"),
        mixed_precision=MixedPrecision(*(torch.bfloat16,) * 3) if mixed else None,
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def summary(rows: list[Row]) -> dict[str, Any]:
    errors = [abs(r.error) for r in rows]
    worst = max(rows, key=lambda r: abs(r.error))
    return {
        "configurations": len(rows),
        "within_tolerance": sum(e <= TOLERANCE for e in errors),
        "median_abs_error": statistics.median(errors),
        "worst": worst,
    }


def phase_errors(rows: list[Row]) -> dict[str, tuple[float, float]]:
    """Each phase's median and worst |error| (its total, predicted against traced) over the
    rows: the peak is one phase, the others are reported too."""
    found = {}
    for phase in PHASES:
        errors = [
            abs(sum(r.prediction.phases.get(phase, {}).values()) / r.total(phase) - 1)
            for r in rows
            if r.total(phase)
        ]
        found[phase] = (statistics.median(errors), max(errors))
    return found


def _gib(value: float) -> str:
    return f"{value / GIB:7.2f}"


def report(rows: list[Row]) -> str:
    lines = [
        f"{'configuration':<66} {'from':5} {'fwd':>15} {'bwd':>15} {'step':>15} {'peak':>7} {'error':>7}",
        f"{'':<66} {'':5} {'trace / pred':>15} {'trace / pred':>15} {'trace / pred':>15}",
    ]
    for row in rows:
        cells = []
        for phase in PHASES:
            predicted_total = sum(row.prediction.phases.get(phase, {}).values())
            cells.append(f"{_gib(row.total(phase))}/{_gib(predicted_total).strip():>7}")
        lines.append(
            f"{row.case.label():<66} {row.prediction.source[:5]:5} {' '.join(cells)} "
            f"{_gib(row.peak)} {row.error:+7.2%}"
        )
    return "\n".join(lines)


def parts(row: Row) -> str:
    """The worst configuration, part by part: the trace's parts at each phase's peak beside
    the prediction's (the trace names a tensor by where it was made)."""
    lines = [f"parts of {row.case.label()} (MiB), prediction's moments {row.prediction.moments}"]
    for phase in PHASES:
        traced = ", ".join(f"{k} {v / MIB:.1f}" for k, v in row.traced[phase].items() if v)
        mine = ", ".join(f"{k} {v / MIB:.1f}" for k, v in row.prediction.phases[phase].items() if v)
        lines.append(f"  {phase:<15} trace: {traced}\n  {'':<15} pred:  {mine}")
    return "\n".join(lines)


RECORD = Path(__file__).resolve().parent / "data" / "memory_truth.json"
"""The last full run's rows (`--record`): tests/unit/test_memory_truth_record.py holds the
formula to the predictions recorded beside the traces they were checked against."""


def record(rows: list[Row]) -> list[dict[str, Any]]:
    """Each row as JSON: its step (StepSpec's fields), shards, the traced parts of each phase
    and the predicted ones."""
    return [
        {
            "label": row.case.label(),
            "name": row.case.name,
            "spec": dataclasses.asdict(row.case.spec),
            "shards": row.case.shards,
            "source": row.prediction.source,
            "traced": row.traced,
            "predicted": row.prediction.phases,
            **({"entity": row.case.entity} if row.case.entity else {}),
        }
        for row in rows
    ]


def append(rows: list[Row]) -> int:
    """Adds the rows whose labels the record lacks, after its entries (which stay as they
    are); how many were added."""
    kept = json.loads(RECORD.read_text())
    known = {entry["label"] for entry in kept}
    added = [entry for entry in record(rows) if entry["label"] not in known]
    RECORD.write_text(json.dumps(kept + added, indent=1) + "\n")
    return len(added)


def unrecorded() -> tuple[list[Case], list[Case]]:
    """The configurations of a full run whose labels the record lacks, traced in one process
    and on FSDP's ranks: what `--append` runs after cases are added to the matrix, to
    branch_cases() or to FSDP_CASES."""
    known = {entry["label"] for entry in json.loads(RECORD.read_text())}
    single = [case for case in matrix() + branch_cases() if case.label() not in known]
    return single, [case for case in fsdp_cases() if case.label() not in known]


def pairwise_entries(cases: list[Case]) -> list[dict[str, Any]]:
    """The record's entries of pairwise cases: each distinct step traced once (several design
    rows differ only in what stands in for what a CPU cannot run), its traced and predicted
    parts; a step the code itself refuses (an exception from transformers, PEFT or torch) is
    kept as `fails`, with what it raised."""
    traced: dict[str, dict[str, Any]] = {}
    entries = []
    for case in cases:
        key = json.dumps(dataclasses.asdict(case.spec), sort_keys=True)
        if key not in traced:
            try:
                traced[key] = {"traced": trace_step(case.spec).phases}
            except Exception as error:  # the configuration cannot run: what it raised
                traced[key] = {"fails": f"{type(error).__name__}: {error}"}
        entry = {
            "label": case.label(),
            "name": case.name,
            "spec": dataclasses.asdict(case.spec),
            "shards": case.shards,
            "source": "formula",
            **traced[key],
            "entity": case.entity,
        }
        if "traced" in entry:
            entry["predicted"] = predicted(case.spec).phases
        entries.append(entry)
    return entries


def append_pairwise() -> int:
    """Traces the pairwise rows (memory_truth_matrix) whose labels the record lacks, and adds
    them after its entries; how many were added."""
    kept = json.loads(RECORD.read_text())
    known = {entry["label"] for entry in kept}
    added = pairwise_entries([c for c in pairwise_cases() if c.label() not in known])
    RECORD.write_text(json.dumps(kept + added, indent=1) + "\n")
    return len(added)


def spec_of(recorded: dict[str, Any]) -> StepSpec:
    return StepSpec.from_json(recorded["spec"])


def main(argv: list[str]) -> int:
    warnings.filterwarnings("ignore")
    quick = "--quick" in argv
    print("fake against real tensors (the small Llama, total bytes per phase):")
    for what, fake, real in fake_against_real():
        print(f"  {what:<32} fake {fake}  real {real}  {'equal' if fake == real else 'DIFFER'}")
    chosen = "--append" in argv
    if chosen:
        single, sharded = unrecorded()
        rows = [run(case) for case in single] + (fsdp_rows(sharded) if sharded else [])
    else:
        rows = [run(case) for case in matrix(layers=4 if quick else None)]
    if not quick and not chosen:
        rows += [run(case) for case in branch_cases()] + fsdp_rows()
    if chosen:
        print(f"{append(rows)} added to {RECORD}, and {append_pairwise()} pairwise rows")
    if not rows:
        return 0
    print(report(rows))
    found = summary(rows)
    print(
        f"\n{found['configurations']} configurations, {found['within_tolerance']} within "
        f"±{TOLERANCE:.0%} of the traced peak, median |error| {found['median_abs_error']:.2%}, "
        f"worst {found['worst'].error:+.2%}: {found['worst'].case.label()}"
    )
    for phase, (median, worst) in phase_errors(rows).items():
        print(f"  {phase:<15} total: median |error| {median:.2%}, worst {worst:.2%}")
    print(parts(found["worst"]))
    if "--record" in argv:
        entries = record(rows) + pairwise_entries(pairwise_cases())
        RECORD.write_text(json.dumps(entries, indent=1) + "\n")
        print(f"recorded in {RECORD}")
    return 0 if found["within_tolerance"] == found["configurations"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
