"""The pinned versions of tools/versions.env, for the bench scripts that find cached artefacts."""
from __future__ import annotations

from pathlib import Path

VERSIONS = Path(__file__).resolve().parents[1] / "tools" / "versions.env"


def pins() -> dict[str, str]:
    out = {}
    for line in VERSIONS.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out[key] = value.strip('"')
    return out
