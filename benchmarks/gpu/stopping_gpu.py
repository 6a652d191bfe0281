"""benchmarks/stopping.py's comparison on one GPU: STEADY_CI95_1PCT against the spec's method,
a run of at least 10x the steps as the truth, through the engine (no ado, no Ray).

    python benchmarks/gpu/stopping_gpu.py [--workdir DIR] [--truth-factor 10]

Model: the granite-3.1-2b shape with random bfloat16 weights (random_models.py), full
fine-tuning at batch 4 and 8 x 1024 tokens of the default dataset shape, one step per batch
(gradient_accumulation_steps 1), flash attention where the package is importable. About 12
minutes on an H100: the spec's method alone trains at least 180 s per configuration. The
figures land in DIR/stopping.json, with the same ratio and coverage lines as on the CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(1, str(HERE.parent))  # benchmarks/: the comparison itself

from rows import GRANITE  # noqa: E402
from runs import DATASET_ID, prepare_dataset, prepare_models  # noqa: E402
from stopping import compare  # noqa: E402

from ado_actuators.sfttrainer.engine.settings import MeasurementSettings  # noqa: E402
from ado_actuators.sfttrainer.execute.environment import installed_fms_hf_tuning  # noqa: E402
from ado_actuators.sfttrainer.metrics.gpu_peaks import gpu_model_from_device_name  # noqa: E402

CONFIGURATIONS = ((4, 1024, 1), (8, 1024, 1))  # (batch_size, model_max_length, accumulation)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--truth-factor", type=int, default=10)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: benchmarks/stopping.py is the CPU comparison")
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[name] = "1"
    root = args.workdir or Path(tempfile.mkdtemp(prefix="sfttrainer-stopping-gpu-"))
    models = prepare_models(root, False, {GRANITE})
    dataset = prepare_dataset(root, 4096)
    settings = MeasurementSettings(
        data_directory=str(dataset.parent),
        hf_home=str(root / "hf"),
        output_dir=str(root / "out"),
        model_map={GRANITE: {"Vanilla": str(models[GRANITE])}},
        stall_timeout_seconds=1800,
    )
    base = {
        "model_name": GRANITE,
        "number_gpus": 1,
        "gpu_model": gpu_model_from_device_name(torch.cuda.get_device_name(0)),
        "dataset_id": DATASET_ID,
        "torch_dtype": "bfloat16",
        "flash_attn": importlib.util.find_spec("flash_attn") is not None,
        "fms_hf_tuning_version": installed_fms_hf_tuning(),
    }
    compare(settings, base, CONFIGURATIONS, args.truth_factor, root)


if __name__ == "__main__":
    main()
