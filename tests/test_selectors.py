"""Device selectors (nx_hal.selectors): parsed from text, built directly,
validated, and written back as the text they came from."""

from __future__ import annotations

import pydantic
import pytest

from nx_hal.selectors import Selector

USAGE = (
    "use kind, plugin, plugin:kind or plugin:kind:index (e.g. 'gpu', 'npu:cpu', 'tpu:cpu:0'), "
    "with '!' at the end for a required one"
)


def refusal(err: pytest.ExceptionInfo[pydantic.ValidationError]) -> str:
    """The one reason a selector was refused, as the validator worded it."""
    (error,) = err.value.errors()
    message = str(error["msg"])
    assert message.startswith("Value error, "), message
    return message.removeprefix("Value error, ")


@pytest.mark.parametrize(
    ("text", "plugin", "kind", "index", "required"),
    [
        ("gpu", None, "gpu", None, False),
        ("npu", None, "npu", None, False),  # a kind first, though a plugin has that name too
        ("other", None, "other", None, False),
        ("graphcore", "graphcore", None, None, False),
        ("npu:cpu", "npu", "cpu", None, False),
        ("tpu:cpu:0", "tpu", "cpu", 0, False),
        ("tpu:gpu:12", "tpu", "gpu", 12, False),
        ("gpu!", None, "gpu", None, True),
        ("graphcore!", "graphcore", None, None, True),
        ("npu:cpu:3!", "npu", "cpu", 3, True),
        ("  npu:cpu:1 ! ", "npu", "cpu", 1, True),
    ],
)
def test_parse(text: str, plugin: str | None, kind: str | None, index: int | None, required: bool) -> None:
    sel = Selector.parse(text)
    assert (sel.plugin, sel.kind, sel.index, sel.required) == (plugin, kind, index, required)
    assert sel == Selector(plugin=plugin, kind=kind, index=index, required=required)


@pytest.mark.parametrize(
    "text",
    ["", "!", "  ", ":cpu", "npu:", "npu::0", "npu:cpu:", "npu:cpu:0:1", "a:b:c:d", "tpu:cpu:0:1!",
     "cpu!!", "!!", "npu!:cpu", "tpu:cpu!:0"],
)
def test_bad_shape_says_what_a_selector_looks_like(text: str) -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        Selector.parse(text)
    assert refusal(err) == f"bad device selector '{text}': {USAGE}"


@pytest.mark.parametrize(("text", "index"), [("npu:cpu:x", "x"), ("tpu:cpu:-1", "-1"), ("npu:gpu:1.5!", "1.5")])
def test_index_that_is_not_a_number(text: str, index: str) -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        Selector.parse(text)
    assert refusal(err) == f"bad device selector '{text}': index '{index}' is not a number"


def test_unknown_kind_lists_the_kinds() -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        Selector.parse("npu:quantum")
    assert refusal(err) == "unknown device kind 'quantum' (kinds: cpu, gpu, tpu, npu, ipu, other)"
    with pytest.raises(pydantic.ValidationError) as err:
        Selector(plugin="npu", kind="warp")
    assert refusal(err) == "unknown device kind 'warp' (kinds: cpu, gpu, tpu, npu, ipu, other)"


def test_built_directly() -> None:
    sel = Selector(plugin="tpu", kind="cpu", index=0)
    assert (sel.plugin, sel.kind, sel.index, sel.required) == ("tpu", "cpu", 0, False)
    assert Selector(kind="gpu").plugin is None and Selector(kind="gpu").index is None
    assert Selector(plugin="graphcore").kind is None
    assert Selector.model_validate({"plugin": "npu", "kind": "cpu", "required": True}) == Selector.parse("npu:cpu!")


def test_index_boundary() -> None:
    assert Selector(kind="cpu", index=0).index == 0
    with pytest.raises(pydantic.ValidationError) as err:
        Selector(kind="cpu", index=-1)
    assert refusal(err) == "device index must be >= 0"


def test_names_a_kind_or_a_plugin() -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        Selector()
    assert refusal(err) == "a selector names a kind, a plugin, or both"
    with pytest.raises(pydantic.ValidationError) as err:
        Selector(index=0, required=True)
    assert refusal(err) == "a selector names a kind, a plugin, or both"


def test_unknown_field_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        Selector(kind="gpu", colour="red")  # type: ignore[call-arg]
    (error,) = err.value.errors()
    assert error["type"] == "extra_forbidden" and error["loc"] == ("colour",)


def test_frozen_and_hashable() -> None:
    sel = Selector.parse("npu:cpu:0")
    with pytest.raises(pydantic.ValidationError) as err:
        sel.index = 1  # type: ignore[misc]
    assert err.value.errors()[0]["type"] == "frozen_instance"
    assert sel.index == 0
    # Equal selectors are one key: preferences and reports are keyed by them.
    assert {sel: "first", Selector(plugin="npu", kind="cpu", index=0): "second"} == {sel: "second"}


@pytest.mark.parametrize(
    ("sel", "text"),
    [
        (Selector(kind="gpu"), "gpu"),
        (Selector(plugin="graphcore"), "graphcore"),
        (Selector(plugin="npu", kind="cpu"), "npu:cpu"),
        (Selector(plugin="tpu", kind="cpu", index=0), "tpu:cpu:0"),
        (Selector(plugin="tpu", kind="gpu", index=7, required=True), "tpu:gpu:7!"),
        (Selector(kind="ipu", required=True), "ipu!"),
    ],
)
def test_str_is_the_selector_text(sel: Selector, text: str) -> None:
    assert str(sel) == text
    assert Selector.parse(text) == sel
