"""Merging manifests: the recordings of several runs of one program (``zerojit manifest merge``).

A program run with several model flags (another hidden size, another parallel size) records one
manifest per run. :func:`merge_manifests` makes one of them: every run kept in the top-level
``runs`` (a manifest with none counts as one run of its ``command``), each kernel merged by
identity (``module.qualname``) and source hash, each specialization once, its launches summed
and its ``runs`` the union of the runs that launched it. The generalisation report
(:mod:`zerojit.recording`) then tells a value set per run (configuration) from one that grows
within a run (growth).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from .manifest import KernelRecord, Manifest, RecordedRun, RecordedSpecialization, RecordedTuning

__all__ = ["MergeError", "merge_manifests", "runs_of"]


class MergeError(ValueError):
    """Manifests that cannot be merged (another Triton version or target, a kernel recorded with
    another source or other parameters); the message names both files and the field."""


def runs_of(manifest: Manifest) -> tuple[tuple[RecordedRun, ...], list[tuple[int, ...] | None]]:
    """The manifest's runs (one of its ``command`` when it names none) and, per specialization
    in kernel order, the runs that launched it (a specialization of unknown runs in that one)."""
    if manifest.runs is not None:
        return manifest.runs, [s.runs for k in manifest.kernels for s in k.specializations]
    return (RecordedRun(manifest.command),), [(0,) for k in manifest.kernels for _ in k.specializations]


def merge_manifests(manifests: Sequence[tuple[str, Manifest]]) -> Manifest:
    """One manifest of ``manifests`` (``(path, manifest)`` pairs, the path for messages): the
    first's Triton version, target, command and program folder; kernels in first-seen order.

    Raises:
        MergeError: no manifest, or one of another Triton version or target, or a kernel recorded
            with another source hash or other parameters than in an earlier manifest.
    """
    if not manifests:
        raise MergeError("no manifest to merge")
    first_path, first = manifests[0]
    runs: list[RecordedRun] = []
    kernels: dict[str, _Kernel] = {}
    for path, manifest in manifests:
        for field in ("triton_version", "target"):
            if getattr(manifest, field) != getattr(first, field) and manifest.kernels:
                raise MergeError(f"{path}: field {field!r} is {getattr(manifest, field)!r}, but {first_path}'s is "
                                 f"{getattr(first, field)!r}: merge recordings of one Triton and target only")
        own_runs, spec_runs = runs_of(manifest)
        offset = len(runs)
        runs += own_runs
        at = iter(spec_runs)
        for record in manifest.kernels:
            kernel = kernels.setdefault(record.name, _Kernel(path, record))
            for field in ("source_hash", "parameters"):
                if getattr(record, field) != getattr(kernel.record, field):
                    raise MergeError(f"{path}: kernel {record.name}'s field {field!r} differs from {kernel.path}'s: "
                                     "its source changed between the recordings; record them again")
            for s in record.specializations:
                indexes = next(at)
                kernel.add(s, None if indexes is None else tuple(offset + i for i in indexes))
            for t in record.tunings:
                kernel.tunings.setdefault(t.key, t)
            if kernel.shapes is None:
                kernel.shapes = record.shape_constexprs
    merged = tuple(dataclasses.replace(k.record, specializations=tuple(k.specs.values()),
                                       tunings=tuple(k.tunings.values()), shape_constexprs=k.shapes)
                   for k in kernels.values())
    return dataclasses.replace(first, kernels=merged, runs=tuple(runs))


class _Kernel:
    """One kernel being merged: where it was first seen, its specializations by key, its
    tunings by tuning key (the first recorded wins), its shape constexprs (the first known)."""

    def __init__(self, path: str, record: KernelRecord) -> None:
        self.path, self.record = path, record
        self.specs: dict[tuple, RecordedSpecialization] = {}
        self.tunings: dict[tuple, RecordedTuning] = {}
        self.shapes = record.shape_constexprs

    def add(self, spec: RecordedSpecialization, runs: tuple[int, ...] | None) -> None:
        """Add ``spec``, launched in ``runs`` (None: not known): a new one as it is, one held
        already with the launches summed and the runs joined."""
        key = (spec.specialization, spec.options)
        held = self.specs.get(key)
        if held is None:
            self.specs[key] = dataclasses.replace(spec, runs=runs)
            return
        joined = None if held.runs is None or runs is None else tuple(sorted({*held.runs, *runs}))
        self.specs[key] = dataclasses.replace(held, launches=held.launches + spec.launches, runs=joined)
