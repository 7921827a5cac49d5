"""Which input files (or which slice of the data) each worker reads — a pure function.

With at least as many files as workers, each worker reads whole files (round robin, no two
workers read the same file). With fewer files, every worker reads every file and keeps every
N-th example (`Dataset.shard(num_workers, worker_index)`), so no example is seen twice per epoch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShardPlan:
    files: tuple[str, ...]  # files this worker opens
    by: str  # "file" or "data"
    num_shards: int  # for by == "data": Dataset.shard(num_shards, index)
    index: int


def plan_shards(files: list[str], num_workers: int, worker_index: int) -> ShardPlan:
    if num_workers < 1 or not 0 <= worker_index < num_workers:
        raise ValueError(f"worker {worker_index} of {num_workers} is not a valid worker")
    ordered = tuple(sorted(files))
    if not ordered:
        raise ValueError("no input files")
    if len(ordered) >= num_workers:
        return ShardPlan(files=ordered[worker_index::num_workers], by="file", num_shards=1, index=0)
    return ShardPlan(files=ordered, by="data", num_shards=num_workers, index=worker_index)
