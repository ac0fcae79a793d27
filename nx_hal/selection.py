"""Choosing a device: walk the preference list, skip loudly, fail strictly."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nx_hal._warnings import warn_at_caller
from nx_hal.device import Device
from nx_hal.plugin import PluginRecord
from nx_hal.registry import Registry

if TYPE_CHECKING:
    from nx_hal.selectors import Selector

__all__ = ["Skip", "Report", "select", "FallbackWarning"]


class FallbackWarning(UserWarning):
    """A preferred device was skipped; the message says why."""


@dataclass(frozen=True)
class Skip:
    """A selector that chose nothing, and why; ``absent`` when only because
    what it names is not on this machine (no such device, the plugin not
    installed, unavailable or disabled), not because something failed."""

    selector: str
    reason: str
    absent: bool = False


@dataclass
class Report:
    """The explanation of a choice. ``str()`` reads as a report; ``to_dict()`` for tools."""

    selectors: list[str]
    explicit: bool
    program_format: str | None
    chosen: Device | None = None
    chosen_by: str | None = None
    skipped: list[Skip] = field(default_factory=list)
    # Further usable devices in preference order, for fallback at compile time.
    alternatives: list[tuple[Device, str]] = field(default_factory=list)
    plugins: list[PluginRecord] = field(default_factory=list)
    config_files: list[str] = field(default_factory=list)

    def quiet(self) -> bool:
        """Whether the choice is worth one line: a device was chosen, every
        preference before it named hardware this machine does not have, and
        no plugin failed. Anything else is said in full."""
        return (self.chosen is not None and all(s.absent for s in self.skipped)
                and not any(p.state == "failed" for p in self.plugins))

    def absent_line(self) -> str:
        """"no ipu, tpu or gpu device here": the skipped preferences, for the one line."""
        if not self.skipped:
            return ""
        *rest, last = [s.selector for s in self.skipped]
        listed = f"{', '.join(rest)} or {last}" if rest else last
        return f"no {listed} device here"

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data, for ``--json`` and tools."""
        return {
            "selectors": self.selectors,
            "explicit": self.explicit,
            "program_format": self.program_format,
            "chosen": self.chosen.info() if self.chosen else None,
            "chosen_by": self.chosen_by,
            "skipped": [s.__dict__ for s in self.skipped],
            "plugins": [p.to_dict() for p in self.plugins],
            "config_files": self.config_files,
        }

    def __str__(self) -> str:
        lines = []
        how = "requested" if self.explicit else "preference order"
        fmt = f", programs in '{self.program_format}'" if self.program_format else ""
        # The headline says the outcome; the lines under it say why.
        if self.chosen is not None:
            d = self.chosen
            outcome = f"chosen {d.selector} ({d.name}) for '{self.chosen_by}'"
        else:
            outcome = "no device chosen"
        lines.append(f"device selection ({how}: {', '.join(self.selectors)}{fmt}): {outcome}")
        for skip in self.skipped:
            lines.append(f"  skipped {skip.selector}: {skip.reason}")
        lines.append("plugins:")
        if not self.plugins:
            lines.append("  none installed (pip install nx-hal-npu, nx-hal-tpu or nx-hal-graphcore)")
        for p in self.plugins:
            if p.state == "loaded":
                lines.append(f"  {p.name}: loaded, {len(p.devices)} device(s): "
                             + ", ".join(f"{d.selector} ({d.name})" for d in p.devices))
            else:
                lines.append(f"  {p.name}: {p.status_text()}")
            for diag in p.diagnostics.splitlines():
                lines.append(f"    {diag}")
        return "\n".join(lines)


def _matches(sel: Selector, device: Device) -> bool:
    if sel.plugin is not None and device.plugin != sel.plugin:
        return False
    if sel.kind is not None and device.kind != sel.kind:
        return False
    return True


# Plugin states that mean "not on this machine" (no SDK or device, or turned
# off), as opposed to "failed".
_ABSENT_STATES = ("unavailable", "disabled")


def _why_none(sel: Selector, registry: Registry, program_format: str | None,
              matching: list[Device]) -> tuple[str, bool]:
    """(why ``sel`` chose nothing, whether only because its hardware is absent)."""
    from nx_hal.selectors import KIND_HINTS, KIND_PROVIDERS  # (with pydantic: only when choosing)

    if matching and program_format is not None:  # devices exist but refuse the format
        refusals = dict.fromkeys(d.accepts(program_format) or "" for d in matching)
        return "; ".join(r for r in refusals if r), False
    records = registry.records
    if sel.plugin is not None:
        record = records.get(sel.plugin)
        if record is None:
            return f"plugin '{sel.plugin}' is not installed (pip install nx-hal-{sel.plugin})", True
        if record.state != "loaded":
            return f"plugin '{sel.plugin}' {record.status_text()}", record.state in _ABSENT_STATES
        kinds = sorted({d.kind for d in record.devices})
        extra = f"; {record.diagnostics}" if record.diagnostics else ""
        return (f"plugin '{sel.plugin}' has no {sel.kind or ''} device (it has: {', '.join(kinds) or 'none'}){extra}",
                True)
    reasons: list[str] = []
    absent = True
    kind = sel.kind or ""
    for name in KIND_PROVIDERS.get(kind, ()):
        record = records.get(name)
        if record is None:
            reasons.append(f"plugin '{name}' not installed (pip install nx-hal-{name})")
        elif record.state != "loaded":
            reasons.append(f"plugin '{name}' {record.status_text()}")
            absent = absent and record.state in _ABSENT_STATES
        else:
            has = sorted({d.kind for d in record.devices})
            hint = KIND_HINTS.get((kind, name))
            reasons.append(f"plugin '{name}' has no {kind} device (it has: {', '.join(has) or 'none'})"
                           + (f"; that needs {hint}" if hint else ""))
    for record in records.values():
        notes = [line.strip() for line in record.diagnostics.splitlines() if kind and kind in line.lower()]
        if record.state == "loaded" and notes:
            reasons.append(f"plugin '{record.name}' says: " + "; ".join(notes))
    if not reasons:
        reasons.append("no installed plugin offers one")
    return f"no {sel.kind} device: " + "; ".join(reasons), absent


def select(
    registry: Registry,
    selectors: list[Selector],
    *,
    explicit: bool,
    program_format: str | None = None,
) -> Report:
    """Walks ``selectors`` in order. Returns the report; ``report.chosen`` is
    None when nothing matched or a required choice failed (the report says which)."""
    report = Report(
        selectors=[str(s) for s in selectors], explicit=explicit, program_format=program_format,
        plugins=list(registry.records.values()),
        config_files=[str(p) for p in registry.loaded_config.files],
    )
    devices = registry.devices()
    for sel in selectors:
        matching = [d for d in devices if _matches(sel, d)]
        usable_all = [d for d in matching if program_format is None or d.accepts(program_format) is None]
        usable = usable_all if sel.index is None else usable_all[sel.index:sel.index + 1]
        if usable:
            if report.chosen is None:
                report.chosen, report.chosen_by = usable[0], str(sel)
            seen = {id(report.chosen)} | {id(d) for d, _ in report.alternatives}
            report.alternatives.extend((d, str(sel)) for d in usable if id(d) not in seen)
            if explicit or sel.required:
                return report
            continue
        if report.chosen is not None:
            continue  # later preferences only matter as alternatives
        if sel.index is not None and usable_all:
            reason, absent = f"index {sel.index} out of range ({len(usable_all)} matching device(s))", False
        else:
            reason, absent = _why_none(sel, registry, program_format, matching)
        report.skipped.append(Skip(str(sel), reason, absent))
        if sel.required or explicit:
            return report
    return report


def warn_fallback(report: Report) -> None:
    """One line where the report is quiet (nx_hal.explain() has the rest),
    every reason where something failed."""
    chosen = report.chosen
    if report.skipped and chosen is not None:
        if report.quiet():
            warn_at_caller(f"nx_hal runs on {chosen.selector} ({chosen.name}): {report.absent_line()} "
                           "(nx_hal.explain() says why)", FallbackWarning)
            return
        skipped = "; ".join(f"{s.selector}: {s.reason}" for s in report.skipped)
        warn_at_caller(f"nx_hal fell back to {chosen.selector} ({chosen.name}); skipped {skipped}", FallbackWarning)
