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
"""

from __future__ import annotations

from peftviz.methods.peft_tuner import PeftTuner


class DoRA(PeftTuner):
    title = "DoRA, weight-decomposed low-rank adaptation (Liu et al., ICML 2024), through Hugging Face peft"
    peft_type = "LORA"
    fixed = {"use_dora": True}


class RsLoRA(PeftTuner):
    title = "rsLoRA, rank-stabilised LoRA: scale α / √r (Kalajdzievski 2023), through Hugging Face peft"
    peft_type = "LORA"
    fixed = {"use_rslora": True}


class PiSSA(PeftTuner):
    title = (
        "PiSSA, LoRA started from W's principal singular vectors (Meng et al., NeurIPS 2024), through Hugging Face peft"
    )
    peft_type = "LORA"
    changes_base_weights = True
    fixed = {"init_lora_weights": "pissa"}


class OLoRA(PeftTuner):
    title = "OLoRA, LoRA started from the QR decomposition of W (Büyükakyüz 2024), through Hugging Face peft"
    peft_type = "LORA"
    changes_base_weights = True
    fixed = {"init_lora_weights": "olora"}


class VeRA(PeftTuner):
    title = "VeRA, vector-based random matrix adaptation (Kopiczko et al., ICLR 2024), through Hugging Face peft"
    peft_type = "VERA"
    # its update starts small (Λ_d at 0.1, Λ_b at 0) and holds few tensors: it needs a higher rate than LoRA
    learning_rates = {"quick": 1e-2, "quick-long": 1e-2, "paper": 4e-3, "paper-long": 4e-3}


class LoHa(PeftTuner):
    title = "LoHa, low-rank Hadamard product updates (Hyeon-Woo et al., ICLR 2022), through Hugging Face peft"
    peft_type = "LOHA"


class LoKr(PeftTuner):
    title = "LoKr, low-rank Kronecker product updates (Edalati et al. 2022), through Hugging Face peft"
    peft_type = "LOKR"


class OFT(PeftTuner):
    title = "OFT, orthogonal fine-tuning (Qiu et al., NeurIPS 2023), through Hugging Face peft"
    peft_type = "OFT"


class BOFT(PeftTuner):
    title = "BOFT, butterfly orthogonal fine-tuning (Liu et al., ICLR 2024), through Hugging Face peft"
    peft_type = "BOFT"


class HRA(PeftTuner):
    title = "HRA, Householder reflection adaptation (Yuan et al., NeurIPS 2024), through Hugging Face peft"
    peft_type = "HRA"


class FourierFT(PeftTuner):
    title = "FourierFT, sparse spectral updates (Gao et al., ICML 2024), through Hugging Face peft"
    peft_type = "FOURIERFT"
    # n spectral coefficients per map, far fewer than LoRA's entries: like VeRA, a higher rate
    learning_rates = {"quick": 5e-2, "quick-long": 5e-2, "paper": 5e-2, "paper-long": 5e-2}
    learning_rate_grid = (1e-3, 1e-1)


class VBLoRA(PeftTuner):
    title = "VB-LoRA, LoRA from a shared vector bank (Li et al., NeurIPS 2024), through Hugging Face peft"
    peft_type = "VBLORA"
    defaults = {"vector_length": 32}


class LNTuning(PeftTuner):
    title = "LN-tuning, LayerNorm gains and shifts only (Qi et al., 2022), through Hugging Face peft"
    peft_type = "LN_TUNING"
    defaults = {"target_modules": "LayerNorm"}
