"""Where a model's config.json comes from, in this order:

1. the model's directory (a path in the model map), when it holds a config.json;
2. hf_home's Hugging Face cache, for a hub id;
3. the shapes shipped with the package (model_shapes.yaml: the fields the predictors read, for
   every model of the shipped map, each with its source; an internal checkpoint's shape is
   estimated from public facts where they determine it, and says so);
4. when asked and online, the hub's config.json alone (no weights), downloaded into hf_home's
   cache, where step 2 finds it next time.

A model found nowhere gets a message saying where it was looked for and how to add it, and a
one-line brief of it for the terminal. Only the config.json is ever read or fetched here: no
weights, no tokenizer.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ado_actuators.sfttrainer.catalog.models import VANILLA

DIRECTORY = "model directory"
CACHE = "hf_home cache"
SHIPPED = "shipped shape"
ESTIMATED = "estimated shape"
HUB = "hub config.json"

ADD_A_MODEL = (
    "add a model: model_map: {NAME: {Vanilla: /path/to/model}} in the actuator configuration, "
    "or its config.json there"
)
"""The fix for every model found nowhere, said once under the preview's list of them."""


class ModelConfigUnavailable(LookupError):
    """No config.json: the message says where it was looked for and how to add one; `brief`
    says where in one short line (the fix is ADD_A_MODEL)."""

    def __init__(self, message: str, brief: str | None = None) -> None:
        super().__init__(message)
        self.brief = brief or message


@dataclasses.dataclass(frozen=True)
class FoundConfig:
    config: dict[str, Any]  # config.json as json.load reads it: any JSON
    source: str  # one of DIRECTORY, CACHE, SHIPPED, ESTIMATED, HUB
    where: (
        str  # the path, the cached file, the shipped entry's citation or its estimate's reasoning
    )
    checked: bool = True  # False: a shipped shape no public copy could confirm


@functools.cache
def shipped_shapes() -> dict[str, dict[str, Any]]:  # config.json fields, from YAML
    text = resources.files("ado_actuators.sfttrainer.catalog").joinpath("model_shapes.yaml")
    raw = yaml.safe_load(text.read_text())
    return {name: entry for name, entry in raw.items() if not name.startswith("_")}


def shipped_shape(model_name: str, weights_format: str = VANILLA) -> FoundConfig | None:
    """The shipped fields of `model_name` in `weights_format` (a format's own fields over the
    model's), None where none are shipped. An internal checkpoint's shape, estimated from public
    facts, says so in its source."""
    entry = shipped_shapes().get(model_name)
    if entry is None or "config" not in entry:
        return None
    own = entry.get(weights_format) or {}
    config = {**entry["config"], **own.get("config", {})}
    if "estimated" in entry:
        return FoundConfig(config, ESTIMATED, entry["estimated"])
    source = own.get("source") or entry["source"]
    return FoundConfig(
        config, SHIPPED, f"{entry['hub']}: {source}", checked=entry.get("checked", True)
    )


def _is_hub_id(location: str) -> bool:
    return not location.startswith(("/", ".", "~")) and location.count("/") == 1


def _read(path: Path, source: str) -> FoundConfig:
    try:
        return FoundConfig(json.loads(path.read_text()), source, str(path))
    except (OSError, ValueError) as error:
        raise ModelConfigUnavailable(f"cannot read {path}: {error}") from error


def _cache_dir(hf_home: str | None) -> Path | None:
    return Path(hf_home).expanduser() / "hub" if hf_home else None


def _cached(location: str, hf_home: str | None) -> Path | None:
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        found = try_to_load_from_cache(location, "config.json", cache_dir=_cache_dir(hf_home))
    except HFValidationError:
        return None
    return Path(found) if isinstance(found, str) else None


@functools.cache
def _from_hub(location: str, cache_dir: Path | None) -> Path | None:
    """config.json alone from the hub (HF_ENDPOINT, HF_HUB_OFFLINE and HF_TOKEN as
    huggingface_hub reads them), None when the hub cannot give it; asked once per process."""
    from huggingface_hub import constants, hf_hub_download

    if constants.HF_HUB_OFFLINE:
        return None
    try:
        return Path(hf_hub_download(location, "config.json", cache_dir=cache_dir))
    except (OSError, ValueError):  # offline, unknown repository, no such file, no write access
        return None


def how_to_add(model_name: str | None, location: str, hf_home: str | None) -> str:
    """One line: where the config.json was looked for, and the two ways to add it."""
    name = model_name or location
    if _is_hub_id(location):
        looked = f"{_cache_dir(hf_home) or 'the Hugging Face cache'} for {location}"
    else:
        looked = f"{location}/config.json"
    shipped = shipped_shapes().get(name, {}).get("missing")
    return (
        f"no config.json for model {name!r}: none at {looked}"
        + (f", and no shipped shape ({shipped})" if shipped else " nor among the shipped shapes")
        + f"; add a directory holding it to the actuator configuration's model_map "
        f"({{{name}: {{Vanilla: /path/to/model}}}}), or put the model's config.json there"
    )


def where_looked(location: str, hub: bool) -> str:
    """How_to_add's where, in a few words: a terminal line's worth."""
    if not _is_hub_id(location):
        return "no config.json in its directory nor the shipped shapes"
    if hub:
        return "no config.json in hf_home's cache, the shipped shapes or the hub"
    return "no config.json in hf_home's cache nor the shipped shapes"


def find_model_config(
    location: str,
    hf_home: str | None,
    *,
    model_name: str | None = None,
    weights_format: str = VANILLA,
    hub: bool = False,
) -> FoundConfig:
    """The model's config.json from the first place that has it (the module's docstring)."""
    local = Path(location).expanduser() / "config.json"
    if local.is_file():
        return _read(local, DIRECTORY)
    if _is_hub_id(location) and (cached := _cached(location, hf_home)) is not None:
        return _read(cached, CACHE)
    if model_name and (shipped := shipped_shape(model_name, weights_format)) is not None:
        return shipped
    if hub and _is_hub_id(location):
        downloaded = _from_hub(location, _cache_dir(hf_home))
        if downloaded is not None:
            return _read(downloaded, HUB)
    raise ModelConfigUnavailable(
        how_to_add(model_name, location, hf_home), brief=where_looked(location, hub)
    )
