"""Adjustments that let a spec command line train where it otherwise could not, and the
last line of defence against settings that would be silently dropped.

Each adjustment returns a note for RankReport.notes, so a user can see what was done. None of
them changes what is measured, except flash attention where no CUDA device exists (it can never
run there). A requested setting the training environment cannot honour raises
SettingUnavailable: the rank fails, saying how to fix it, instead of measuring something else.
(Environments that cannot provide a feature are refused before launch where that is known;
this module catches what is only visible inside the training process.)
"""

from __future__ import annotations

import importlib.util
import os


class SettingUnavailable(RuntimeError):
    """A requested setting this process cannot honour. Training without it would store a
    figure under a configuration that did not run, so the rank fails with the fix instead."""


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def flash_attn_import_problem() -> str | None:
    """Why flash_attn's CUDA extension does not load here, or None. transformers only checks
    that the package is installed; a wheel built for another torch or CUDA then fails at model
    load ("undefined symbol" from flash_attn_2_cuda), deep in a traceback."""
    try:
        from flash_attn import flash_attn_func  # noqa: F401 - imports flash_attn_2_cuda
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def device_capability() -> tuple[tuple[int, int], str]:
    """(compute capability, name) of the GPU this rank trains on."""
    import torch

    index = int(os.environ.get("LOCAL_RANK", "0")) % max(1, torch.cuda.device_count())
    return torch.cuda.get_device_capability(index), torch.cuda.get_device_name(index)


FLASH_MIN_CAPABILITY = (8, 0)
"""Flash attention 2 runs on Ampere and newer (its README): not on V100 (7.0) or T4 (7.5)."""
FLASH_DTYPES = ("float16", "bfloat16")
"""transformers refuses flash attention 2 in any other dtype (at model load, with a traceback)."""


def require_cuda_for_gpus(gpu_indices: list[int], *, cuda: bool | None = None) -> None:
    """The job names GPUs (number_gpus > 0) but this process sees no CUDA device: training
    would run on the CPU and be stored as a GPU measurement."""
    if not gpu_indices or (cuda_available() if cuda is None else cuda):
        return
    import torch

    why = (
        f"torch {torch.__version__} in the training environment has no CUDA support"
        if torch.version.cuda is None
        else "CUDA found no device (check the driver and CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
    )
    raise SettingUnavailable(
        f"number_gpus > 0 (GPUs {gpu_indices} of this node) but the training process sees no "
        f"CUDA device: {why}. Install a CUDA build of torch in the training environment, or "
        "measure on the CPU with number_gpus: 0"
    )


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_flash_attention(
    model_args,
    *,
    cuda: bool | None = None,
    installed: bool | None = None,
    import_problem: str | None = None,
    capability: tuple[tuple[int, int], str] | None = None,
) -> str | None:
    """`--use_flash_attn True` (fms's default and the experiments'), checked before training:

    - no CUDA device (number_gpus 0): flash attention can never run here, so training goes on
      without it and the returned note says so;
    - on a CUDA device, SettingUnavailable naming the fixes when the flash_attn package is
      missing, when its CUDA extension does not load, when torch_dtype is not float16 or
      bfloat16, or when the GPU is older than Ampere.

    The keywords stand in for what is otherwise asked of this machine (unit tests): `cuda`,
    `installed`, `import_problem` (how the extension failed to load; "": it loads),
    `capability` ((major, minor), GPU name).
    """
    if not model_args.use_flash_attn:
        return None
    if not (cuda_available() if cuda is None else cuda):
        model_args.use_flash_attn = False
        return (
            "use_flash_attn=True was requested but CUDA is not available (number_gpus 0): "
            "trained without flash attention"
        )
    _refuse_flash_attention_where_it_cannot_run(model_args, installed, import_problem, capability)
    return None


def _refuse_flash_attention_where_it_cannot_run(
    model_args,
    installed: bool | None,
    import_problem: str | None,
    capability: tuple[tuple[int, int], str] | None,
) -> None:
    """On a CUDA device: SettingUnavailable, naming the fixes, where flash attention cannot
    run (check_flash_attention says when; its keywords stand in for this machine)."""
    without = "or set flash_attn: false in the space to measure without flash attention"
    if not (flash_attn_installed() if installed is None else installed):
        raise SettingUnavailable(
            "flash_attn: true (fms-hf-tuning --use_flash_attn True) was requested on a CUDA "
            "device, but the flash_attn package is not installed in the training environment. "
            "Install it there (pip install flash-attn --no-build-isolation), or set the actuator "
            "parameter match_exact_dependencies: true so the measurement runs in the requested "
            f"fms-hf-tuning version's pinned environment, {without}"
        )
    dtype = _dtype_name(getattr(model_args, "torch_dtype", None))
    if dtype not in (*FLASH_DTYPES, "auto"):  # auto: the checkpoint's own, known only at load
        raise SettingUnavailable(
            f"flash_attn: true needs torch_dtype float16 or bfloat16, but torch_dtype is {dtype} "
            f"(flash attention 2 has no float32 kernels): set torch_dtype: bfloat16, {without}"
        )
    problem = flash_attn_import_problem() if import_problem is None else import_problem
    if problem:
        import torch

        raise SettingUnavailable(
            f"flash_attn is installed but its CUDA extension does not load ({problem[:500]}): "
            f"it was built for another torch or CUDA than this environment's torch "
            f"{torch.__version__} (CUDA {torch.version.cuda}). Reinstall it against this torch "
            "(pip install --force-reinstall --no-cache-dir --no-build-isolation flash-attn), "
            f"or set match_exact_dependencies: true, {without}"
        )
    (major, minor), name = device_capability() if capability is None else capability
    if (major, minor) < FLASH_MIN_CAPABILITY:
        raise SettingUnavailable(
            f"flash_attn: true needs a GPU of compute capability 8.0 or newer (Ampere, Ada, "
            f"Hopper); this rank's GPU {name} is {major}.{minor} (V100: 7.0, T4: 7.5): "
            f"measure on a newer GPU, {without}"
        )


def refuse_ignored_arguments(ignored: list[str], fms_version: str | None) -> None:
    """fms-hf-tuning's parser drops arguments it does not know without a word."""
    if ignored:
        raise SettingUnavailable(
            f"fms-hf-tuning {fms_version or '(unknown version)'} does not recognise "
            f"{' '.join(ignored)}: it would train without them. Measure with an "
            "fms_hf_tuning_version that supports these settings, or leave the fields that "
            "produce them at their defaults"
        )


def use_cpu_for_multi_process(world_size: int, environ=os.environ) -> str | None:
    """Several ranks and no GPU: make accelerate set up gloo DDP (MULTI_CPU).

    accelerate 1.x's multi-GPU launcher ignores `use_cpu: true` from the config file; without
    ACCELERATE_USE_CPU the Trainer sees no distributed setup and every rank trains on the whole
    dataset alone. Must run before fms parses its arguments (TrainingArguments sets up devices).
    """
    import torch

    if world_size <= 1 or torch.cuda.is_available():
        return None
    if environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"):
        return None
    environ["ACCELERATE_USE_CPU"] = "true"
    return (
        f"{world_size} ranks without CUDA: set ACCELERATE_USE_CPU=true so they train as one "
        "gloo DDP job (accelerate launch ignores use_cpu from its config file)"
    )


def same_shuffle_on_every_rank(train_args, world_size: int) -> str | None:
    """Several ranks: give the data sampler one seed, so the ranks split the dataset.

    fms-hf-tuning calls set_seed(seed, device_specific=True) after building the Trainer, and
    accelerate seeds its sampler from torch's initial seed when `data_seed` is unset: each rank
    then shuffles differently and the ranks' shards overlap (entries trained twice, others
    never). HF documents `data_seed` as defaulting to `seed`; this makes that true.
    """
    if world_size <= 1 or train_args.data_seed is not None:
        return None
    train_args.data_seed = train_args.seed
    return (
        f"data_seed unset with {world_size} ranks: using seed {train_args.seed} so every rank "
        "shuffles alike and the ranks train disjoint shards of the dataset"
    )


def keep_the_vision_columns(data_args, train_args) -> str | None:
    """A vision dataset: keep the columns Trainer would remove (remove_unused_columns=True, the
    spec's default). The vision collator reads the text and image columns, which are not the
    model's forward arguments: Trainer would drop them all and stop with "No columns in the
    dataset match the model's forward method signature". fms-hf-tuning's vision guide
    (docs/vision-language-model-tuning.md) asks for False; what is trained is the same."""
    if not getattr(data_args, "dataset_image_field", None) or not train_args.remove_unused_columns:
        return None
    train_args.remove_unused_columns = False
    return (
        "remove_unused_columns=True was requested, but a vision dataset's text and image columns "
        "must reach fms-hf-tuning's vision collator: trained with remove_unused_columns=False"
    )


def _is_prefixing_prompt_learner(model) -> bool:
    """Prompt tuning / P-tuning prepend virtual tokens to the input embeddings, so the logits
    are longer than the labels; prefix tuning works through past_key_values and does not."""
    try:
        from peft import PeftModel
        from peft.utils import PeftType
    except ImportError:
        return False
    if not isinstance(model, PeftModel):
        return False
    config = model.active_peft_config
    prefixing = {PeftType.PROMPT_TUNING, PeftType.P_TUNING, PeftType.MULTITASK_PROMPT_TUNING}
    return bool(config.is_prompt_learning and config.peft_type in prefixing)


def align_prompt_learning_logits(model) -> str | None:
    """Make a prompt-tuning model's logits line up with its labels again.

    PEFT computes the loss inside the model (labels padded with -100 for the virtual tokens),
    then returns logits for virtual + real positions. Every consumer outside pairs them with
    the real positions' labels: TRL 0.19's token accuracy crashes ("The size of tensor a (38)
    must match the size of tensor b (30)") and fms's sum-loss trainer would misalign the loss.
    Dropping the virtual positions from the returned logits fixes all of them and leaves the
    model's own loss untouched. Only needed where TRL does not slice them itself (< 0.20).
    """
    if not _is_prefixing_prompt_learner(model):
        return None

    def trim(module, args, kwargs, output):
        ref = kwargs.get("input_ids")
        if ref is None:
            ref = kwargs.get("inputs_embeds")
        logits = getattr(output, "logits", None)
        if ref is None or logits is None or logits.shape[1] <= ref.shape[1]:
            return output
        output.logits = logits[:, logits.shape[1] - ref.shape[1] :, :]
        return output

    model.register_forward_hook(trim, with_kwargs=True)
    n = model.active_peft_config.num_virtual_tokens
    return (
        f"prompt tuning: logits of the {n} virtual tokens are dropped from the model output so "
        "TRL's token accuracy lines up with the labels (TRL < 0.20 bug; loss unaffected)"
    )
