"""ONNX in nx_hal: conversion to StableHLO through torch-mlir in a child
process (``convert``, ``_child``), StableHLO verification in that child
(``verify``), the ONNX conformance runner (``conformance``), int8
quantization (``quantize``), and what each backend computes differently
from ONNX, rewritten or refused before any device compiles the model, with
the model's input and output names read in the same parse
(``deviations``). ``adapter`` offers them to devices through the core's
``nx_hal.converter.Converter`` interface.

This package depends on the core; the core reaches it only through that
interface, given to devices by the registry. Importing it imports nothing
heavy: each module imports onnx, torch-mlir or numpy when used.
"""
