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

from .manifest import KernelRecord, Manifest, RecordedRun, RecordedSpecialization

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
    kernels: dict[str, tuple[str, KernelRecord, dict[tuple, RecordedSpecialization]]] = {}
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
            held = kernels.get(record.name)
            if held is not None:
                where, kept, _ = held
                for field in ("source_hash", "parameters"):
                    if getattr(record, field) != getattr(kept, field):
                        raise MergeError(f"{path}: kernel {record.name}'s field {field!r} differs from {where}'s: "
                                         "its source changed between the recordings; record them again")
            else:
                held = kernels[record.name] = (path, record, {})
            specs = held[2]
            for s in record.specializations:
                indexes = next(at)
                moved = None if indexes is None else tuple(offset + i for i in indexes)
                key = (s.specialization, s.options)
                old = specs.get(key)
                if old is None:
                    specs[key] = dataclasses.replace(s, runs=moved)
                else:
                    both = None if old.runs is None or moved is None else tuple(sorted({*old.runs, *moved}))
                    specs[key] = dataclasses.replace(old, launches=old.launches + s.launches, runs=both)
            if held[1].shape_constexprs is None and record.shape_constexprs is not None:
                kernels[record.name] = (held[0], dataclasses.replace(held[1], shape_constexprs=record.shape_constexprs),
                                        specs)
            tunings = {t.key: t for t in kernels[record.name][1].tunings}
            for t in record.tunings:
                tunings.setdefault(t.key, t)
            kernels[record.name] = (kernels[record.name][0],
                                    dataclasses.replace(kernels[record.name][1], tunings=tuple(tunings.values())), specs)
    merged = tuple(dataclasses.replace(record, specializations=tuple(specs.values()))
                   for _, record, specs in kernels.values())
    return dataclasses.replace(first, kernels=merged, runs=tuple(runs))
