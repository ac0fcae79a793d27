"""Exports the real-model corpus: torchvision, Hugging Face transformers and
torch.nn architectures with random weights (nothing is downloaded), as ONNX
files with one input set each and onnxruntime's outputs as the oracle.

Run in an environment with torch (``pip install -e '.[models]'``):
``python -m tests.models.export DIR``. The tests call it in a child process
(torch and the vendor SDKs stay out of each other's process) and keep the
files in a cache keyed by the versions that shape an export.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SEED = 0
OPSET = 17


@dataclass
class Entry:
    """One corpus model: how it is built and exported."""

    name: str
    family: str
    source: str  # torchvision, transformers, torch.nn, onnxruntime.quantization
    build: Callable[[], tuple[Any, dict[str, Any]]]  # -> (module, named example inputs)
    exporter: str = "torchscript"  # or "dynamo"
    quantize: bool = False  # QDQ int8 by onnxruntime.quantization after export
    notes: list[str] = field(default_factory=list)


def _torch() -> Any:
    import torch

    return torch


def _image(batch: int = 1, size: int = 64) -> Any:
    torch = _torch()
    g = torch.Generator().manual_seed(SEED + 1)
    return torch.randn(batch, 3, size, size, generator=g)


def restimate_batchnorm(model: Any, example: Any, batches: int = 4) -> Any:
    """Re-estimates BatchNorm statistics on random inputs like ``example``.

    With default statistics (mean 0, variance 1) and random weights, each
    block scales activations down and a deep CNN ends near 1e-12, where any
    comparison passes. Statistics measured on the inputs keep activations at
    unit scale, as trained weights would.
    """
    torch = _torch()
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return model.eval()
    g = torch.Generator().manual_seed(SEED + 2)
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn((8, *example.shape[1:]), generator=g))
    return model.eval()


def _vision(factory: Callable[..., Any], size: int = 64, **kwargs: Any) -> Callable[[], tuple[Any, dict[str, Any]]]:
    def build() -> tuple[Any, dict[str, Any]]:
        torch = _torch()
        torch.manual_seed(SEED)
        model = factory(weights=None, **kwargs)
        x = _image(size=size)
        return restimate_batchnorm(model, x), {"image": x}

    return build


def _resnet18() -> tuple[Any, dict[str, Any]]:
    import torchvision

    return _vision(torchvision.models.resnet18)()


def _mobilenet_v2() -> tuple[Any, dict[str, Any]]:
    import torchvision

    return _vision(torchvision.models.mobilenet_v2)()


def _shufflenet() -> tuple[Any, dict[str, Any]]:
    import torchvision

    return _vision(torchvision.models.shufflenet_v2_x0_5)()


def _efficientnet() -> tuple[Any, dict[str, Any]]:
    import torchvision

    return _vision(torchvision.models.efficientnet_b0)()


def _convnext() -> tuple[Any, dict[str, Any]]:
    # 7x7 depthwise convolutions, then LayerNorm and Linear layers over
    # channels-last [N, H, W, C] activations.
    import torchvision

    model, inputs = _vision(torchvision.models.convnext_tiny)()
    torch = _torch()
    with torch.no_grad():  # torchvision starts each block's scale at 1e-6: blocks that barely count
        for name, parameter in model.named_parameters():
            if name.endswith("layer_scale"):
                parameter.fill_(1.0)
    return model, inputs


def _vit() -> tuple[Any, dict[str, Any]]:
    # torchvision's ViT at a small size: the same code as vit_b_16, 2 layers.
    from torchvision.models.vision_transformer import VisionTransformer

    torch = _torch()
    torch.manual_seed(SEED)
    model = VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=4, hidden_dim=64,
                              mlp_dim=128, num_classes=10)
    torch.nn.init.normal_(model.heads.head.weight, std=0.2)  # torchvision starts the head at zero
    return model.eval(), {"image": _image(size=64)}


def _lraspp() -> tuple[Any, dict[str, Any]]:
    # Segmentation: MobileNetV3 backbone, bilinear upsampling (Resize linear).
    import torchvision

    torch = _torch()
    torch.manual_seed(SEED)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                      num_classes=4)
    x = _image(size=64)
    return _DictOutput(restimate_batchnorm(model, x), "out"), {"image": x}


def _tokens(vocab: int, batch: int = 2, length: int = 16) -> tuple[Any, Any]:
    torch = _torch()
    g = torch.Generator().manual_seed(SEED + 3)
    ids = torch.randint(0, vocab, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.int64)
    mask[1, length - 4:] = 0  # one padded sequence: the mask must matter
    return ids, mask


def _transformer(model_class: Any, config: Any, key: str) -> tuple[Any, dict[str, Any]]:
    """A Hugging Face model with random weights, fed token ids and a mask, giving output ``key``."""
    torch = _torch()
    torch.manual_seed(SEED)
    model = model_class(config).eval()
    ids, mask = _tokens(config.vocab_size)
    return _HFOutput(model, key), {"input_ids": ids, "attention_mask": mask}


def _bert() -> tuple[Any, dict[str, Any]]:
    import transformers

    config = transformers.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=64)
    return _transformer(transformers.BertModel, config, "last_hidden_state")


def _gpt2() -> tuple[Any, dict[str, Any]]:
    import transformers

    config = transformers.GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                     use_cache=False)
    return _transformer(transformers.GPT2LMHeadModel, config, "logits")


def _llama() -> tuple[Any, dict[str, Any]]:
    # The Llama family's decoder: rotary positions, RMSNorm, SwiGLU and
    # grouped-query attention (4 query heads over 2 key/value heads).
    import transformers

    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
                                      use_cache=False)
    return _transformer(transformers.LlamaForCausalLM, config, "logits")


def _r3d() -> tuple[Any, dict[str, Any]]:
    # A video classifier: 3-D convolutions and pooling over (frames, height, width).
    import torchvision

    torch = _torch()
    torch.manual_seed(SEED)
    model = torchvision.models.video.r3d_18(weights=None, num_classes=10)
    clip = torch.randn(1, 3, 4, 32, 32, generator=torch.Generator().manual_seed(SEED + 1))
    return restimate_batchnorm(model, clip), {"clip": clip}


def _HFOutput(model: Any, key: str) -> Any:  # noqa: N802 - a module factory
    """A Hugging Face model returning one named output as a tensor."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return getattr(self.inner(input_ids=input_ids, attention_mask=attention_mask), key)

    return Wrapped().eval()


def _DictOutput(model: Any, key: str) -> Any:  # noqa: N802 - a module factory
    """A model returning a dict, reduced to one tensor."""
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, image: Any) -> Any:
            return self.inner(image)[key]

    return Wrapped().eval()


def _recurrent(kind: str, bidirectional: bool) -> tuple[Any, dict[str, Any]]:
    import torch
    torch.manual_seed(SEED)
    cell = getattr(torch.nn, kind)

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = cell(16, 32, num_layers=2, batch_first=True, bidirectional=bidirectional)
            self.head = torch.nn.Linear(64 if bidirectional else 32, 5)

        def forward(self, x: Any) -> Any:
            out, _ = self.rnn(x)
            return self.head(out)

    g = torch.Generator().manual_seed(SEED + 4)
    return Tagger().eval(), {"sequence": torch.randn(2, 24, 16, generator=g)}


def _lstm_tagger() -> tuple[Any, dict[str, Any]]:
    """Token ids -> Embedding -> LSTM -> per-token logits: a recurrent model
    whose input is integer."""
    import torch
    from torch import nn
    torch.manual_seed(SEED)

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(500, 32)
            self.rnn = nn.LSTM(32, 48, batch_first=True)
            self.head = nn.Linear(48, 9)

        def forward(self, input_ids: Any) -> Any:
            out, _ = self.rnn(self.embed(input_ids))
            return self.head(out)

    ids, _ = _tokens(500, length=20)
    return Tagger().eval(), {"input_ids": ids}


def _unet() -> tuple[Any, dict[str, Any]]:
    """A small UNet: strided convs down, ConvTranspose and Resize (nearest
    and bilinear) up, skip connections concatenated."""
    import torch
    from torch import nn
    torch.manual_seed(SEED)

    def block(cin: int, cout: int) -> Any:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d1, self.d2, self.d3 = block(3, 16), block(16, 32), block(32, 64)
            self.pool = nn.MaxPool2d(2)
            self.up3 = nn.ConvTranspose2d(64, 32, 2, stride=2)
            self.u2 = block(64, 32)
            self.up2 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.u1 = block(48, 16)
            self.out = nn.Conv2d(16, 2, 1)

        def forward(self, x: Any) -> Any:
            a = self.d1(x)
            b = self.d2(self.pool(a))
            c = self.d3(self.pool(b))
            u = self.u2(torch.cat([self.up3(c), b], dim=1))
            u = self.u1(torch.cat([self.up2(u), a], dim=1))
            coarse = nn.functional.interpolate(self.out(u), scale_factor=0.5, mode="nearest")
            return nn.functional.interpolate(coarse, size=x.shape[-2:], mode="nearest") + self.out(u)

    x = _image(size=64)
    return restimate_batchnorm(UNet(), x), {"image": x}


def _small_cnn() -> tuple[Any, dict[str, Any]]:
    import torch
    from torch import nn
    torch.manual_seed(SEED)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.Conv2d(32, 64, 1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )
    x = _image(size=32)
    return restimate_batchnorm(model, x), {"image": x}


CORPUS: list[Entry] = [
    Entry("resnet18", "CNN", "torchvision", _resnet18),
    Entry("resnet18-dynamo", "CNN", "torchvision", _resnet18, exporter="dynamo"),
    Entry("mobilenet_v2", "depthwise CNN", "torchvision", _mobilenet_v2),
    Entry("shufflenet_v2", "depthwise CNN, channel shuffle", "torchvision", _shufflenet),
    Entry("efficientnet_b0", "depthwise CNN, squeeze-excite", "torchvision", _efficientnet),
    Entry("convnext_tiny", "CNN, channels-last Linear layers", "torchvision", _convnext),
    Entry("vit", "vision transformer", "torchvision", _vit),
    Entry("vit-dynamo", "vision transformer", "torchvision", _vit, exporter="dynamo"),
    Entry("lraspp_mobilenet_v3", "segmentation, bilinear Resize", "torchvision", _lraspp),
    Entry("bert", "encoder transformer", "transformers", _bert),
    Entry("gpt2", "decoder transformer", "transformers", _gpt2),
    Entry("gpt2-dynamo", "decoder transformer", "transformers", _gpt2, exporter="dynamo"),
    Entry("llama-dynamo", "decoder transformer, rotary, grouped-query attention", "transformers", _llama,
          exporter="dynamo"),
    Entry("r3d_18", "video CNN, Conv3d", "torchvision", _r3d),
    Entry("lstm", "recurrent", "torch.nn", lambda: _recurrent("LSTM", False)),
    Entry("gru-bidirectional", "recurrent", "torch.nn", lambda: _recurrent("GRU", True)),
    Entry("lstm-tagger", "recurrent, token ids", "torch.nn", _lstm_tagger),
    Entry("unet", "segmentation, ConvTranspose and Resize", "torch.nn", _unet),
    Entry("cnn-int8-qdq", "int8 QDQ", "onnxruntime.quantization", _small_cnn, quantize=True),
]


def _export(entry: Entry, path: Path) -> dict[str, np.ndarray]:
    torch = _torch()
    model, inputs = entry.build()
    names = list(inputs)
    args = tuple(inputs.values())
    # Not under no_grad: in eval mode without autograd, torch.nn.MultiheadAttention
    # takes a fused fast path (aten::_native_multi_head_attention) that has no ONNX form.
    if entry.exporter == "dynamo":
        program = torch.onnx.export(model, args, input_names=names, output_names=["output"], dynamo=True,
                                    opset_version=max(OPSET, 18))
        program.save(str(path))
    else:
        torch.onnx.export(model, args, str(path), input_names=names, output_names=["output"],
                          opset_version=OPSET, dynamo=False, do_constant_folding=True)
    return {k: v.numpy() for k, v in inputs.items()}


def _quantize(path: Path, feeds: dict[str, np.ndarray]) -> None:
    """Static int8 quantization in QDQ format, as int8 models ship from onnxruntime's tools."""
    from onnxruntime import quantization as q

    rng = np.random.default_rng(SEED + 5)

    class Calibration(q.CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()}
                                 for _ in range(8)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    fp32 = path.with_suffix(".fp32.onnx")
    path.rename(fp32)
    q.quantize_static(str(fp32), str(path), Calibration(), quant_format=q.QuantFormat.QDQ,
                      activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8, per_channel=True)
    fp32.unlink()


def oracle(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs, its graph optimizations off: the model's own
    semantics (fused int8 kernels would round QDQ models differently)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def export_all(out: Path, names: list[str] | None = None) -> dict[str, Any]:
    """Exports the corpus into ``out``: NAME.onnx, NAME.npz (inputs and the
    oracle's outputs) and manifest.json. A failed export is recorded, not fatal."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"torch": torch.__version__, "models": {}}
    previous = out / "manifest.json"
    if names and previous.exists():  # a partial export keeps the other records
        manifest["models"] = json.loads(previous.read_text()).get("models", {})
    for entry in CORPUS:
        if names and entry.name not in names:
            continue
        path = out / f"{entry.name}.onnx"
        record: dict[str, Any] = {"family": entry.family, "source": entry.source, "exporter": entry.exporter}
        t0 = time.perf_counter()
        try:
            feeds = _export(entry, path)
            if entry.quantize:
                _quantize(path, feeds)
            outputs = oracle(path, feeds)
            arrays: dict[str, Any] = {f"in:{k}": v for k, v in feeds.items()}
            arrays.update({f"out:{i}": v for i, v in enumerate(outputs)})
            np.savez(out / f"{entry.name}.npz", **arrays)
            record["inputs"] = list(feeds)
            record["ok"] = True
        except Exception as exc:  # noqa: BLE001 - recorded for the test to report
            record["ok"] = False
            record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        record["export_s"] = round(time.perf_counter() - t0, 2)
        manifest["models"][entry.name] = record
        print(f"{entry.name}: {'ok' if record['ok'] else record['error'][:200]} ({record['export_s']} s)",
              file=sys.stderr)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*", help="export only these models")
    args = parser.parse_args(argv)
    export_all(args.out, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
