"""AdaLoRA, adaptive budget allocation (Zhang et al., ICLR 2023), through Hugging Face peft.

Each targeted map W gets an update in SVD form, with a rank that training allocates:

    h = W x + (α / r) · P Λ Q x        P: d_out × r,  Λ = diag(λ_1 … λ_r),  Q: r × d_in

Every `deltaT` steps the rank allocator scores each triplet (P_i, λ_i, Q_i) by a smoothed
sensitivity |θ · ∂L/∂θ| (EMA with β₁, uncertainty with β₂) and keeps the highest-scoring ones
within a budget that falls, on a cubic schedule, from init_r to target_r ranks per map on average
between step tinit and total_step − tfinal; pruned triplets have λ_i set to 0. The loss adds
orth_reg_weight · mean over P, Q of ‖PᵀP − I‖_F (‖QQᵀ − I‖_F), keeping P and Q near-orthogonal.

All of it is peft's: its SVD layers, its `RankAllocator` (`update_and_allocate`, called after
every optimiser step as peft requires), its config. Two things peft leaves to its caller are done
here: `total_step`, which peft needs when the config is built, is the trainer's step count
(`schedule`), and the orthogonality penalty, which peft adds only inside its own forward when the
model returns a loss (peftviz's classifier computes the loss itself), is `regularization`, the
same sum as peft's `AdaLoraModel.forward`.

The run's record keeps the final ranks (the triplets the last allocation keeps per map) and the ranks
of the parameters the run stores (its best epoch's: non-zero λ).
A resumed run continues the budget schedule at its step, with the sensitivity averages started
afresh (peft keeps them in the allocator, not in the parameters).
"""

from __future__ import annotations

import torch
from torch import Tensor

from peftviz.errors import ConfigError
from peftviz.methods.peft_tuner import PeftTuner, peft_options
from peftviz.methods.registration import registered
from peftviz.options import Bounds, check_bound, check_type, shown

TOTAL_STEPS = Bounds(at_least=1)  # peft's AdaLoraConfig refuses a total_step of None or below 1


class AdaLoraOptions(peft_options("ADALORA")):
    def placeholders(self) -> dict:
        """A total_step peft accepts until the trainer says (`AdaLoRA.schedule`)."""
        return {"total_step": self.tinit + self.tfinal + 1}


@registered
class AdaLoRA(PeftTuner):
    peft_type = "ADALORA"
    config_class = AdaLoraOptions

    def schedule(self, total_steps: int) -> None:
        config = self.config
        # peft prunes init_r - target_r triplets per map: with none to prune, its kthvalue fails in the first allocation
        if config.target_r >= config.init_r:
            raise ConfigError(
                f"adalora: target_r must be below init_r ({config.init_r}) to allocate ranks in training, not "
                f"{config.target_r}"
            )
        if total_steps <= config.tinit + config.tfinal:
            raise ConfigError(
                f"adalora: training takes {total_steps} steps, which leaves none to allocate ranks in after "
                f"tinit={config.tinit} and tfinal={config.tfinal}"
            )
        self.tuner.rankallocator.set_total_step(total_steps)

    def after_step(self, step: int) -> None:
        self.tuner.update_and_allocate(step)

    def regularization(self) -> Tensor | None:
        weight = self.config.orth_reg_weight
        if weight == 0:  # every training step asks: no work for a penalty that weighs nothing
            return None
        penalties = []
        for name, p in self.tuner.model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                cov = p @ p.T if ".lora_A." in name else p.T @ p  # (r, r)
                penalties.append(torch.linalg.matrix_norm(cov - torch.eye(cov.shape[0], device=cov.device)))
        return weight * torch.stack(penalties).mean() if penalties else None

    def singular_values(self) -> dict[str, Tensor]:
        """peft's parameter name (in the encoder) -> Λ of that map, (init_r, 1): what the ranks are read from."""
        return {name: p for name, p in self.tuner.model.named_parameters() if name.endswith(".lora_E.default")}

    def ranks(self) -> dict[str, int]:
        """Map name -> the triplets the allocator keeps now (peft's rank_pattern; init_r before it first prunes).
        The pruned ones have λ = 0 from then on, so a trained model's ranks are also its non-zero λ."""
        pattern = self.tuner.peft_config["default"].rank_pattern or {}
        return {
            name.removesuffix(".lora_E.default"): sum(pattern[name]) if name in pattern else p.shape[0]
            for name, p in self.singular_values().items()
        }

    def kept_ranks(self) -> dict[str, int]:
        """Map name -> the non-zero λ of the parameters as they are now (a trained model's ranks)."""
        return {name.removesuffix(".lora_E.default"): int((p != 0).sum()) for name, p in self.singular_values().items()}

    def training_record(self) -> dict:
        """The last allocation's ranks, and those of the parameters the run keeps (its best epoch's, which
        may come before the last allocation)."""
        return {"adalora_final_ranks": self.ranks(), "adalora_kept_ranks": self.kept_ranks()}

    def peft_config(self) -> dict:
        """peft's adapter config: total_step and the ranks as peft's rank_pattern records them, per map (named
        in the encoder) which of its init_r triplets are kept: those whose λ is not 0. Read from the
        tensors, not the allocator, so that a run rebuilt from its stored parameters says the same; peft
        then saves the kept triplets only. total_step is the trainer's where this model trained (`schedule`),
        else a placeholder peft accepts (it matters to training alone)."""
        settings = super().peft_config()
        kept = {name.removesuffix(".default"): (p != 0).view(-1).tolist() for name, p in self.singular_values().items()}
        return settings | {"total_step": self.tuner.peft_config["default"].total_step, "rank_pattern": kept or None}

    @classmethod
    def options_from_peft(cls, adapter: dict) -> dict:
        """As any tuner's; peft itself applies rank_pattern when it loads (peftviz keeps the pruned triplets at 0)
        and total_step is the schedule of a training that is over."""
        return super().options_from_peft({k: v for k, v in adapter.items() if k not in ("rank_pattern", "total_step")})

    @classmethod
    def check_peft_values(cls, adapter: dict, options: dict) -> None:
        """The options' checks, and those of what peft reads besides when it loads an AdaLoRA adapter: total_step,
        which peft requires (> 0) though training alone uses it, and rank_pattern, per map the init_r flags of the
        triplets kept, by which peft resizes the map's layers."""
        super().check_peft_values(adapter, options)
        check_type("total_step", adapter.get("total_step"), int)
        check_bound("total_step", adapter.get("total_step"), TOTAL_STEPS)
        init_r = options.get("init_r")
        for key, kept in (adapter.get("rank_pattern") or {}).items():
            if not (isinstance(kept, list) and len(kept) == init_r and all(isinstance(flag, bool) for flag in kept)):
                raise ConfigError(
                    f"rank_pattern[{shown(key)}] must be a list of init_r = {init_r} true or false, not {shown(kept)}"
                )
