"""Binary byte units, declared once: every GiB and MiB a layer prints or compares is these.

Here because every layer that counts bytes (plan/, metrics/, trainer/, execute/, engine/)
already imports contract/, so the units add no arrow to the map of layers.
"""

from __future__ import annotations

MIB = 2**20
"""One mebibyte: nvidia-smi's memory figures are MiB."""
GIB = 2**30
"""One gibibyte: the unit of every memory property and figure a user reads (`*_gib`)."""
