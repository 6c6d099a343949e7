"""Every dtype cast a piece of code makes, seen at the dispatcher: an independent count from the profiler's."""

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode


@dataclass(frozen=True)
class Cast:
    storage: int  # the source's storage address: which tensor (a parameter, an activation) was cast
    shape: tuple[int, ...]
    source: torch.dtype
    target: torch.dtype | None


@dataclass
class Casts(TorchDispatchMode):
    """`with Casts() as casts:` records every `aten._to_copy` (autocast's casts and `.to(dtype)` alike)."""

    seen: list[Cast] = field(default_factory=list)

    def __post_init__(self):
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            src = args[0]
            self.seen.append(Cast(src.untyped_storage().data_ptr(), tuple(src.shape), src.dtype, kwargs.get("dtype")))
        return func(*args, **kwargs)

    def of(self, tensors) -> list[Cast]:
        """The casts whose source is one of `tensors` (parameters, say)."""
        storages = {t.untyped_storage().data_ptr() for t in tensors}
        return [cast for cast in self.seen if cast.storage in storages]
