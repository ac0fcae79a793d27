"""Device selectors: ``kind``, ``plugin``, ``plugin:kind``, ``plugin:kind:index``,
with a trailing ``!`` for a required choice."""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, model_validator

__all__ = ["Selector", "KINDS", "DEFAULT_PREFERENCE", "KIND_PROVIDERS", "KIND_HINTS"]

KINDS: Final = ("cpu", "gpu", "tpu", "npu", "ipu", "other")
DEFAULT_PREFERENCE: Final = ("ipu", "tpu", "gpu", "npu", "cpu")
# Which plugin package brings which kind, for "not installed" hints.
KIND_PROVIDERS: Final = {
    "ipu": ("graphcore",),
    "tpu": ("tpu",),
    "gpu": ("tpu", "npu"),
    "npu": ("npu",),
    "cpu": ("npu", "tpu"),
}
# What a loaded provider needs to offer a kind it has none of.
KIND_HINTS: Final = {
    ("tpu", "tpu"): "a Cloud TPU VM and libtpu (the 'nx-hal-tpu[tpu]' extra)",
    ("gpu", "tpu"): "an NVIDIA GPU and a CUDA PJRT plugin (the 'nx-hal-tpu[cuda12]' or '[cuda13]' extra)",
    ("gpu", "npu"): "an Intel GPU with its OpenVINO driver",
    ("npu", "npu"): "an Intel NPU with its driver",
}


class Selector(BaseModel):
    """Which device(s) a choice accepts. Fields left None match anything."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plugin: str | None = None
    kind: str | None = None
    index: int | None = None
    required: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            return cls._parse_fields(value)
        return value

    @model_validator(mode="after")
    def _check(self) -> Selector:
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"unknown device kind '{self.kind}' (kinds: {', '.join(KINDS)})")
        if self.index is not None and self.index < 0:
            raise ValueError("device index must be >= 0")
        if self.plugin is None and self.kind is None:
            raise ValueError("a selector names a kind, a plugin, or both")
        return self

    @staticmethod
    def _parse_fields(text: str) -> dict[str, Any]:
        raw = text.strip()
        required = raw.endswith("!")
        parts = raw.removesuffix("!").strip().split(":")
        if len(parts) > 3 or any(not p or "!" in p for p in parts):
            raise ValueError(
                f"bad device selector '{text}': use kind, plugin, plugin:kind or plugin:kind:index "
                "(e.g. 'gpu', 'npu:cpu', 'tpu:cpu:0'), with '!' at the end for a required one"
            )
        fields: dict[str, Any] = {"required": required}
        if len(parts) == 1:
            fields["kind" if parts[0] in KINDS else "plugin"] = parts[0]
            return fields
        fields["plugin"], fields["kind"] = parts[0], parts[1]
        if len(parts) == 3:
            if not parts[2].isdigit():
                raise ValueError(f"bad device selector '{text}': index '{parts[2]}' is not a number")
            fields["index"] = int(parts[2])
        return fields

    @classmethod
    def parse(cls, text: str) -> Selector:
        """``"npu:cpu:0"`` as a Selector; a ValueError says what is wrong with it."""
        return cls.model_validate(text)

    def __str__(self) -> str:
        parts = [p for p in (self.plugin, self.kind) if p is not None]
        if self.index is not None:
            parts.append(str(self.index))
        return ":".join(parts) + ("!" if self.required else "")
