"""The peft tuners the field reaches for, named: each a peft type and the settings that make it that method.

All are `PeftTuner`s (peft_tuner.py): peft's own layers, options from peft's config dataclass. For a
targeted frozen map W (d_out × d_in) and its input x, each computes h = W' x with

    dora       W' = m · (W + s·B A) / ‖W + s·B A‖_c            (Liu et al., ICML 2024; ‖·‖_c: per column; m trained)
    rslora     W' = W + (α / √r) · B A                          (Kalajdzievski 2023: rank-stabilised scale)
    pissa      W' = W_res + B A, B A from W's top-r singular    (Meng et al., NeurIPS 2024; W_res = W − B A at start)
               vectors
    olora      W' = W_res + B A, B A from the QR of W            (Büyükakyüz 2024)
    vera       W' = W + Λ_b B Λ_d A, A, B frozen random and      (Kopiczko et al., ICLR 2024; only Λ_b, Λ_d train)
               shared by all layers
    loha       W' = W + (B₁ A₁) ⊙ (B₂ A₂)                       (Hyeon-Woo et al., ICLR 2022: Hadamard product)
    lokr       W' = W + C ⊗ (B A)                               (Edalati et al. 2022; LyCORIS: Kronecker product)
    oft        W' = R W, R block-diagonal orthogonal (Cayley)   (Qiu et al., NeurIPS 2023)
    boft       W' = (Π_k B_k) W, butterfly-factored orthogonal   (Liu et al., ICLR 2024)
    hra        W' = W Π_i (I − 2 u_i u_iᵀ / ‖u_i‖²)              (Yuan et al., NeurIPS 2024: r Householder reflections)
    fourierft  W' = W + α · Re(IDFT2(F)), F sparse: n learned   (Gao et al., ICML 2024)
               coefficients at fixed random frequencies
    vblora     W' = W + B A, every row of A, B a top-k mix of    (Li et al., NeurIPS 2024)
               sub-vectors from one shared vector bank
    ln-tuning  LayerNorm gains and shifts train (peft copies     (Qi et al., 2022)
               each targeted LayerNorm)

Defaults are peft's, except where a peft default cannot fit a MiniLM-sized encoder: VB-LoRA's
sub-vectors have length 32 (peft's 256 must divide every targeted width; MiniLM's 384 and the
tiny encoders' 32 are not multiples of 256), and LN-tuning targets every "LayerNorm" (peft has no
BERT targets for it).

Each is one row of the registry's table (ENTRIES in registration.py): its name, its class here, its
peft type and what differs from `PeftTuner`'s defaults. The classes (`named_tuners.DoRA`, ...) are made
from those rows when this module loads, each registered under its row's name.
"""

from __future__ import annotations

from peftviz.methods.peft_tuner import PeftTuner
from peftviz.methods.registration import ENTRIES, NamedTuner, registered

# the class attributes a row may set besides title and peft_type (where empty, the class has PeftTuner's)
CLASS_SETTINGS = ("fixed", "defaults", "changes_base_weights", "learning_rates", "learning_rate_grid")


def named_class(row: NamedTuner) -> type[PeftTuner]:
    """The PeftTuner subclass of a row, a class of this module, registered under the row's name."""
    settings = {key: getattr(row, key) for key in CLASS_SETTINGS if getattr(row, key)}
    namespace = {"title": f"{row.title}, through Hugging Face peft", "peft_type": row.peft_type, **settings}
    namespace |= {"__module__": __name__, "__qualname__": row.class_name}
    return registered(type(row.class_name, (PeftTuner,), namespace))


NAMED_TUNERS = {row.class_name: named_class(row) for row in ENTRIES.values() if isinstance(row, NamedTuner)}
globals().update(NAMED_TUNERS)  # named_tuners.DoRA, ...: where the registry (and pickle) find each class
