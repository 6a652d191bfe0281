"""Models with the architecture and size of real ones, random weights, built offline.

A benchmark of throughput, memory and energy needs the shapes, not the trained values: the
configs below are those published with the models (config.json on the hub), the weights are
drawn at random and written in bfloat16, and the tokenizer is the tests' locally trained BPE
(ids below 512, well inside each vocabulary; the embedding and LM head keep their full size).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

DEMO = Path(__file__).resolve().parents[2] / "examples" / "local-cpu"

# ibm-granite/granite-3.1-2b-base, config.json (2.5 B parameters, tied embeddings)
GRANITE_3_1_2B: dict[str, Any] = {
    "model_type": "granite",
    "architectures": ["GraniteForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 40,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 49155,
    "max_position_embeddings": 131072,
    "rope_theta": 5_000_000.0,
    "rms_norm_eps": 1e-5,
    "attention_multiplier": 0.015625,
    "embedding_multiplier": 12.0,
    "logits_scaling": 8.0,
    "residual_multiplier": 0.22,
    "attention_dropout": 0.1,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": True,
}

# meta-llama/Llama-3.1-8B, config.json (8.0 B parameters)
LLAMA_3_1_8B: dict[str, Any] = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_theta": 500_000.0,
    "rms_norm_eps": 1e-5,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
}

CONFIGS = {"granite-3.1-2b": GRANITE_3_1_2B, "llama3.1-8b": LLAMA_3_1_8B}


def build_random_model(name: str, out_dir: Path, *, device: str = "cuda") -> Path:
    """Writes config, random bfloat16 weights and a local tokenizer; reuses a finished one."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    sys.path.insert(0, str(DEMO))  # the demo's tiny model builder, outside the wheel
    from tiny_model import build_tokenizer

    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file() and any(out_dir.glob("*.safetensors")):
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = dict(CONFIGS[name])
    tokenizer = build_tokenizer(out_dir, model_max_length=spec["max_position_embeddings"])
    config = AutoConfig.for_model(
        spec.pop("model_type"),
        **spec,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    with torch.device(device):  # initialising 8 B parameters on a CPU takes minutes
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out_dir


if __name__ == "__main__":  # run in its own process, so the benchmark's own holds no GPU memory
    import sys

    print(build_random_model(sys.argv[1], Path(sys.argv[2]), device=sys.argv[3]))
